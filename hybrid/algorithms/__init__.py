"""Worker algorithms. Each loss is one readable function over a batch.

An ``Algorithm`` says how a worker acts and learns: the model it builds, the loss
whose gradient it pushes (``sync`` / ``async`` / ``bounded``), what it sends as an
actor and how the learner learns from that (the ``hybrid`` scheduler).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hybrid.algorithms.a2c import a2c_loss, a2c_vtrace_loss
from hybrid.algorithms.nstep_q import apex_epsilon, nstep_q_loss, nstep_transitions, q_replay_loss
from hybrid.algorithms.rollout import Rollout
from hybrid.envs import env_family
from hybrid.errors import ConfigError
from hybrid.nets import ActorCritic, QNetwork
from hybrid.plugins import resolve

if TYPE_CHECKING:
    from hybrid.config import TrainConfig
    from hybrid.core.learner import Learner
    from hybrid.envs import EnvInfo

LossFn = Callable[[Any, Rollout], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Algorithm:
    model: Callable[[TrainConfig, EnvInfo, int], nn.Module]
    """Build the model of worker ``i`` (``i = -1``: the server's / evaluator's copy)."""
    loss: Callable[[TrainConfig], LossFn]
    """The loss whose gradient a worker pushes."""
    actor_payload: Callable[[TrainConfig], Callable[[Any, Rollout], Any]]
    """What an actor sends the learner under the ``hybrid`` scheduler."""
    learner: Callable[[TrainConfig, EnvInfo], Learner]
    """The learner of the ``hybrid`` scheduler."""
    records_behaviour_logp: bool = False
    local_update: Callable[[TrainConfig], LocalUpdate | None] | None = None
    """Under gradient-pushing schedulers, optimize on the worker and send Δ = θ_snapshot −
    θ_local instead of one gradient (PPO's epochs; see hybrid/algorithms/ppo.py)."""


LocalUpdate = Callable[[Any, Any, Any, torch.Generator], tuple[torch.Tensor, dict[str, float]]]
"""(model, flat params, rollout, generator) -> (Δ, stats); the model holds θ_snapshot on entry."""


# --- a2c (A3C under async; IMPALA's learner under hybrid) -------------------------------------


def _actor_critic(cfg: TrainConfig, info: EnvInfo, worker_id: int) -> nn.Module:
    return ActorCritic(
        info.obs_dim,
        info.action_dim,
        info.continuous,
        cfg.hidden,
        cfg.layers,
        obs_shape=info.obs_shape,  # images: the Nature CNN (issue 11)
        log_std_init=cfg.log_std_init,
        state_dependent_std=cfg.state_dependent_std,
    )


def _a2c_loss(cfg: TrainConfig) -> LossFn:
    return functools.partial(
        a2c_loss,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        normalize_advantages=cfg.normalize_advantages,
    )


def _trajectory(cfg: TrainConfig) -> Callable[[Any, Rollout], Any]:
    return lambda model, rollout: rollout


def _vtrace_learner(cfg: TrainConfig, info: EnvInfo) -> Learner:
    from hybrid.core.learner import TrajectoryLearner

    loss = functools.partial(
        a2c_vtrace_loss,
        gamma=cfg.gamma,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        correction=cfg.correction,
        rho_bar=cfg.rho_bar,
        c_bar=cfg.c_bar,
    )
    return TrajectoryLearner(_actor_critic(cfg, info, -1), loss)


# --- nstep_q (A3C paper's async n-step Q; Ape-X under hybrid) ---------------------------------


def _q_network(cfg: TrainConfig, info: EnvInfo, worker_id: int) -> nn.Module:
    if info.continuous:
        raise ConfigError(
            f"algo: nstep_q needs a Discrete action space; {info.env_id} is continuous"
        )
    model = QNetwork(info.obs_dim, info.action_dim, cfg.hidden, cfg.layers)
    if worker_id >= 0:
        model.epsilon = apex_epsilon(worker_id, cfg.workers, cfg.epsilon, cfg.epsilon_alpha)
    return model


def _nstep_q_loss(cfg: TrainConfig) -> LossFn:
    return functools.partial(nstep_q_loss, gamma=cfg.gamma)


def _transitions(cfg: TrainConfig) -> Callable[[Any, Rollout], Any]:
    return functools.partial(nstep_transitions, gamma=cfg.gamma, n=cfg.q_nstep)


def _replay_learner(cfg: TrainConfig, info: EnvInfo) -> Learner:
    from hybrid.core.learner import ReplayLearner
    from hybrid.replay import PrioritizedReplay, UniformReplay
    from hybrid.seeding import LEARNER, stream

    kind = PrioritizedReplay if cfg.replay == "prioritized" else UniformReplay
    replay = kind(
        cfg.replay_capacity, (info.obs_dim,), alpha=cfg.replay_alpha, beta0=cfg.replay_beta0
    )
    return ReplayLearner(
        _q_network(cfg, info, -1),
        replay,
        q_replay_loss,
        batch_size=cfg.replay_batch,
        updates_per_batch=cfg.learner_updates,
        learning_starts=cfg.learning_starts,
        beta0=cfg.replay_beta0,
        seed=stream(cfg.seed, LEARNER),
    )


# --- ppo (single-agent); mappo / ippo and every algorithm's multi-agent form ------------------


def _ppo_loss(cfg: TrainConfig) -> LossFn:
    from hybrid.algorithms.ppo import ppo_loss_fn

    return ppo_loss_fn(cfg)


def _ppo_local_update(cfg: TrainConfig) -> LocalUpdate:
    from hybrid.algorithms.ppo import ppo_local_update

    return ppo_local_update(cfg)


def _ppo_learner(cfg: TrainConfig, info: EnvInfo) -> Learner:
    from hybrid.algorithms.ppo import ppo_learner

    return ppo_learner(cfg, _actor_critic(cfg, info, -1))


def _multiagent_form(single: Algorithm | None) -> Algorithm:
    """``single`` on Gymnasium envs; on a PettingZoo env the multi-agent form of the same
    algorithm (multiagent/mappo.py). Chosen per call from ``cfg.env``, so the loop, the
    schedulers and the runtimes look up ``ALGORITHMS[cfg.algo]`` as for any algorithm."""

    def pick(cfg: TrainConfig) -> Algorithm:
        family = env_family(cfg.env)
        if family is not None:
            return resolve(family.algorithm)  # type: ignore[no-any-return]
        if single is None:
            raise ConfigError(
                f"algo: {cfg.algo} needs a multi-agent PettingZoo env (e.g. "
                "mpe2/simple_spread_v3); use ppo on Gymnasium envs"
            )
        return single

    def local_update(cfg: TrainConfig) -> LocalUpdate | None:
        build = pick(cfg).local_update
        return build(cfg) if build is not None else None

    return Algorithm(
        model=lambda cfg, info, worker_id: pick(cfg).model(cfg, info, worker_id),
        loss=lambda cfg: pick(cfg).loss(cfg),
        actor_payload=lambda cfg: pick(cfg).actor_payload(cfg),
        learner=lambda cfg, info: pick(cfg).learner(cfg, info),
        records_behaviour_logp=True,
        local_update=local_update,
    )


ALGORITHMS: dict[str, Algorithm] = {
    "a2c": _multiagent_form(
        Algorithm(_actor_critic, _a2c_loss, _trajectory, _vtrace_learner, True)
    ),
    "nstep_q": Algorithm(_q_network, _nstep_q_loss, _transitions, _replay_learner),
    "ppo": _multiagent_form(
        Algorithm(_actor_critic, _ppo_loss, _trajectory, _ppo_learner, True, _ppo_local_update)
    ),
    "mappo": _multiagent_form(None),
    "ippo": _multiagent_form(None),
}
