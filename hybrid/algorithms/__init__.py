"""Worker algorithms. Each loss is one readable function over a batch."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from hybrid.algorithms.a2c import a2c_loss
from hybrid.algorithms.rollout import Rollout
from hybrid.config import TrainConfig
from hybrid.nets import ActorCritic

LossFn = Callable[[ActorCritic, Rollout], tuple[torch.Tensor, dict[str, float]]]


def _a2c(cfg: TrainConfig) -> LossFn:
    return functools.partial(
        a2c_loss,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        normalize_advantages=cfg.normalize_advantages,
    )


ALGORITHMS: dict[str, Callable[[TrainConfig], LossFn]] = {
    "a2c": _a2c,
}


def make_loss(cfg: TrainConfig) -> LossFn:
    return ALGORITHMS[cfg.algo](cfg)
