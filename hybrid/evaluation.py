"""Periodic deterministic evaluation of the global parameters on separate envs."""

from __future__ import annotations

import numpy as np
import torch

from hybrid.config import TrainConfig
from hybrid.core.worker import build_model
from hybrid.envs import EnvInfo, make_vector_env
from hybrid.nets import FlatParams
from hybrid.seeding import EVAL, int_seed, stream


class Evaluator:
    """Runs one deterministic episode on each of ``eval_episodes`` envs.

    The envs are reset with the same seeds at every evaluation, so successive
    evaluations differ only through the parameters.
    """

    def __init__(self, cfg: TrainConfig, info: EnvInfo) -> None:
        self.info = info
        self.episodes = cfg.eval_episodes
        self.envs = make_vector_env(cfg.env, cfg.eval_episodes)
        self.seeds = [int_seed(s) for s in stream(cfg.seed, EVAL).spawn(cfg.eval_episodes)]
        self.model = build_model(cfg, info)
        self.flat = FlatParams(self.model)

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor) -> np.ndarray:
        """Per-episode returns of the greedy policy."""
        self.flat.load(params)
        obs, _ = self.envs.reset(seed=self.seeds)
        returns = np.zeros(self.episodes)
        running = np.ones(self.episodes, dtype=bool)
        while running.any():
            action = self.model.act(torch.as_tensor(obs, dtype=torch.float32), None).numpy()
            if self.info.continuous:
                action = np.clip(action, self.info.action_low, self.info.action_high)
            obs, reward, terminated, truncated, _ = self.envs.step(action)
            returns += reward * running
            running &= ~(terminated | truncated)
        return returns

    def close(self) -> None:
        self.envs.close()
