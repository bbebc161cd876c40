"""Worker algorithms. Each loss is one readable function over a batch.

An ``Algorithm`` says how a worker acts and learns: the model it builds, the loss
whose gradient it pushes (``sync`` / ``async`` / ``bounded``), what it sends as an
actor and how the learner learns from that (the ``hybrid`` scheduler). Its builders take
``AlgoSettings`` (the algorithm's hyperparameters, built by the assembly from the flat
config), never the ``TrainConfig``.
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
    from hybrid.algorithms.ppo import PPOSettings
    from hybrid.core.learner import Learner
    from hybrid.envs import EnvInfo

LossFn = Callable[[Any, Rollout], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class NetSettings:
    """The actor-critic / Q-network's shape (``--hidden``, ``--layers``, the Gaussian head).

    These settings, like the others here, have no defaults: the assembly fills every field
    from the config field of the same name, whose default is the one."""

    hidden: int
    layers: int
    log_std_init: float
    state_dependent_std: bool


@dataclass(frozen=True)
class A2CSettings:
    """The returns and the actor-critic loss (a2c; PPO's and MAPPO's returns as well)."""

    gamma: float
    gae_lambda: float
    ent_coef: float
    vf_coef: float
    normalize_advantages: bool
    correction: str
    rho_bar: float
    c_bar: float


@dataclass(frozen=True)
class NStepQSettings:
    """n-step Q-learning: the actors' exploration and transitions, Ape-X's replay learner."""

    replay: str
    replay_capacity: int
    replay_batch: int
    replay_alpha: float
    replay_beta0: float
    learner_updates: int
    learning_starts: int
    q_nstep: int
    epsilon: float
    epsilon_alpha: float


@dataclass(frozen=True)
class AlgoSettings:
    """Everything an ``Algorithm`` builds its model, loss and learner from: picklable, so a
    worker process or a Ray actor receives it instead of the run's config."""

    algo: str
    env: str
    """The env id: a plug-in's family (PettingZoo) swaps in its multi-agent form."""
    seed: int
    """The run's seed: the learner's minibatch order and sampling derive from it."""
    workers: int
    """The number of actors, over which Ape-X spreads its ε."""
    nets: NetSettings
    a2c: A2CSettings
    nstep_q: NStepQSettings
    ppo: PPOSettings | None = None
    """PPO's (single-agent) settings; None when the algorithm is not ppo."""
    family: Any = None
    """The env family's own settings (a plug-in's ``EnvFamily.settings``), or None."""


@dataclass(frozen=True)
class Algorithm:
    model: Callable[[AlgoSettings, EnvInfo, int], nn.Module]
    """Build the model of worker ``i`` (``i = -1``: the server's / evaluator's copy)."""
    loss: Callable[[AlgoSettings], LossFn]
    """The loss whose gradient a worker pushes."""
    actor_payload: Callable[[AlgoSettings], Callable[[Any, Rollout], Any]]
    """What an actor sends the learner under the ``hybrid`` scheduler."""
    learner: Callable[[AlgoSettings, EnvInfo], Learner]
    """The learner of the ``hybrid`` scheduler."""
    records_behaviour_logp: bool = False
    local_update: Callable[[AlgoSettings], LocalUpdate | None] | None = None
    """Under gradient-pushing schedulers, optimize on the worker and send Δ = θ_snapshot −
    θ_local instead of one gradient (PPO's epochs; see hybrid/algorithms/ppo.py)."""
    target_network: bool = False
    """The server keeps a target copy of θ for this algorithm's bootstrap (n-step Q); the
    assembly then gives the global model its refresh period (``target_every``)."""


LocalUpdate = Callable[[Any, Any, Any, torch.Generator], tuple[torch.Tensor, dict[str, float]]]
"""(model, flat params, rollout, generator) -> (Δ, stats); the model holds θ_snapshot on entry."""


# --- a2c (A3C under async; IMPALA's learner under hybrid) -------------------------------------


def _actor_critic(settings: AlgoSettings, info: EnvInfo, worker_id: int) -> nn.Module:
    nets = settings.nets
    return ActorCritic(
        info.obs_dim,
        info.action_dim,
        info.continuous,
        nets.hidden,
        nets.layers,
        obs_shape=info.obs_shape,  # images: the Nature CNN
        log_std_init=nets.log_std_init,
        state_dependent_std=nets.state_dependent_std,
    )


def _a2c_loss(settings: AlgoSettings) -> LossFn:
    a2c = settings.a2c
    return functools.partial(
        a2c_loss,
        gamma=a2c.gamma,
        gae_lambda=a2c.gae_lambda,
        ent_coef=a2c.ent_coef,
        vf_coef=a2c.vf_coef,
        normalize_advantages=a2c.normalize_advantages,
    )


def _trajectory(settings: AlgoSettings) -> Callable[[Any, Rollout], Any]:
    return lambda model, rollout: rollout


def _vtrace_learner(settings: AlgoSettings, info: EnvInfo) -> Learner:
    from hybrid.core.learner import TrajectoryLearner

    a2c = settings.a2c
    loss = functools.partial(
        a2c_vtrace_loss,
        gamma=a2c.gamma,
        ent_coef=a2c.ent_coef,
        vf_coef=a2c.vf_coef,
        correction=a2c.correction,
        rho_bar=a2c.rho_bar,
        c_bar=a2c.c_bar,
    )
    return TrajectoryLearner(_actor_critic(settings, info, -1), loss)


# --- nstep_q (A3C paper's async n-step Q; Ape-X under hybrid) ---------------------------------


def _q_network(settings: AlgoSettings, info: EnvInfo, worker_id: int) -> nn.Module:
    if info.continuous:
        raise ConfigError(
            f"algo: nstep_q needs a Discrete action space; {info.env_id} is continuous"
        )
    q, nets = settings.nstep_q, settings.nets
    model = QNetwork(info.obs_dim, info.action_dim, nets.hidden, nets.layers)
    if worker_id >= 0:
        model.epsilon = apex_epsilon(worker_id, settings.workers, q.epsilon, q.epsilon_alpha)
    return model


def _nstep_q_loss(settings: AlgoSettings) -> LossFn:
    return functools.partial(nstep_q_loss, gamma=settings.a2c.gamma)


def _transitions(settings: AlgoSettings) -> Callable[[Any, Rollout], Any]:
    n = settings.nstep_q.q_nstep
    return functools.partial(nstep_transitions, gamma=settings.a2c.gamma, n=n)


def _replay_learner(settings: AlgoSettings, info: EnvInfo) -> Learner:
    from hybrid.core.learner import ReplayLearner
    from hybrid.replay import PrioritizedReplay, UniformReplay
    from hybrid.seeding import LEARNER, stream

    q = settings.nstep_q
    kind = PrioritizedReplay if q.replay == "prioritized" else UniformReplay
    replay = kind(q.replay_capacity, (info.obs_dim,), alpha=q.replay_alpha, beta0=q.replay_beta0)
    return ReplayLearner(
        _q_network(settings, info, -1),
        replay,
        q_replay_loss,
        batch_size=q.replay_batch,
        updates_per_batch=q.learner_updates,
        learning_starts=q.learning_starts,
        beta0=q.replay_beta0,
        seed=stream(settings.seed, LEARNER),
    )


# --- ppo (single-agent); mappo / ippo and every algorithm's multi-agent form ------------------


def _ppo_loss(settings: AlgoSettings) -> LossFn:
    from hybrid.algorithms.ppo import ppo_loss_fn

    return ppo_loss_fn(settings)


def _ppo_local_update(settings: AlgoSettings) -> LocalUpdate:
    from hybrid.algorithms.ppo import ppo_local_update

    return ppo_local_update(settings)


def _ppo_learner(settings: AlgoSettings, info: EnvInfo) -> Learner:
    from hybrid.algorithms.ppo import ppo_learner

    return ppo_learner(settings, _actor_critic(settings, info, -1))


def _multiagent_form(single: Algorithm | None) -> Algorithm:
    """``single`` on Gymnasium envs; on a PettingZoo env the multi-agent form of the same
    algorithm (multiagent/mappo.py). Chosen per call from ``settings.env``, so the loop, the
    schedulers and the runtimes look up ``ALGORITHMS[algo]`` as for any algorithm."""

    def pick(settings: AlgoSettings) -> Algorithm:
        family = env_family(settings.env)
        if family is not None:
            return resolve(family.algorithm)  # type: ignore[no-any-return]
        if single is None:
            raise ConfigError(
                f"algo: {settings.algo} needs a multi-agent PettingZoo env (e.g. "
                "mpe2/simple_spread_v3); use ppo on Gymnasium envs"
            )
        return single

    def local_update(settings: AlgoSettings) -> LocalUpdate | None:
        build = pick(settings).local_update
        return build(settings) if build is not None else None

    return Algorithm(
        model=lambda s, info, worker_id: pick(s).model(s, info, worker_id),
        loss=lambda s: pick(s).loss(s),
        actor_payload=lambda s: pick(s).actor_payload(s),
        learner=lambda s, info: pick(s).learner(s, info),
        records_behaviour_logp=True,
        local_update=local_update,
    )


ALGORITHMS: dict[str, Algorithm] = {
    "a2c": _multiagent_form(
        Algorithm(_actor_critic, _a2c_loss, _trajectory, _vtrace_learner, True)
    ),
    "nstep_q": Algorithm(
        _q_network, _nstep_q_loss, _transitions, _replay_learner, target_network=True
    ),
    "ppo": _multiagent_form(
        Algorithm(_actor_critic, _ppo_loss, _trajectory, _ppo_learner, True, _ppo_local_update)
    ),
    "mappo": _multiagent_form(None),
    "ippo": _multiagent_form(None),
}
