"""Defaults per env family, and per env id where an id needs more: readable tables, like
rl-zoo's hyperparameter files.

The families
------------
The family comes from the id, without building the env: ``mpe2/`` ids are MPE, ``ALE/``
ids Atari, and Gymnasium's registry (``spec.entry_point``) names classic control, Box2D,
MuJoCo and ale_py ids. Classic control and Box2D hold both discrete and continuous tasks,
so there the action space picks the recipe (one probe of the env). An id of no family gets
the recipe its spaces call for: image observations the Atari one, continuous actions the
continuous-control one, otherwise the discrete-control one. ``ENV_DEFAULTS`` lists the
ids that need more than their family, each saying why.

The rule
--------
``train()`` (and so the CLI) gives every field that is still at its **global
default** (the value in ``TrainConfig``) the value listed here for the env. A
field you set to anything else is yours and stays, and so is every keyword
given to ``train(config, **overrides)`` and every flag given to ``hybrid train``
(the CLI passes them as keywords). A config field set to exactly its global
default cannot be told apart from one left alone (``TrainConfig(workers=8)`` on
CartPole-v1 gives 2 workers): pass it to ``train`` as a keyword, or use
``env_defaults=False`` (``--no-env-defaults``) to run with the global defaults
throughout. ``config.json`` and ``Result.config`` record the values in effect, with
``env_defaults`` off, so a rerun of either and a resumed run use those, not these tables.

The tables never set ``scheduler`` or ``runtime``: they are what a study varies.

Each recipe says what it follows and what measured it (``benchmarks/tune_cartpole.py``,
``benchmarks/cartpole.py``, ``benchmarks/envs.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from hybrid.config import ConfigError, TrainConfig

# --- recipes: one per kind of task -------------------------------------------------------

# Discrete control with small observations (CartPole, Acrobot, MountainCar): A2C with SB3 /
# rl-zoo's CartPole-v1 settings (8 envs x 5 steps, RMSprop, ent_coef 0, gae_lambda 1, clip
# 0.5) but lr 1e-3, the 8 envs stepped by 2 workers x 4. benchmarks/tune_cartpole.py is the
# sweep (CartPole-v1, 10 seeds, median env steps to solve, sync / async): rl-zoo's lr 7e-4
# took 13,750 / 7,500, 1e-3 10,000 / 12,500; with rl-zoo's settings 4 workers x 2 envs took
# 15,000 under sync, 4 x 1 30,000 under async (staler gradients), 2 x 2 11,250 / 12,500
# with an async seed unsolved at 60k. Fewer workers than the global 8: async's staleness
# grows with them, and sync and async share these defaults.
DISCRETE_A2C: dict[str, Any] = {
    "algo": "a2c",
    "workers": 2,
    "envs_per_worker": 4,
    "rollout_steps": 5,
    "optimizer": "rmsprop",
    "lr": 1e-3,
    "ent_coef": 0.0,
    "gae_lambda": 1.0,
    "max_grad_norm": 0.5,
}

# Continuous actions: PPO with normalized observations and rewards, the CleanRL / rl-zoo
# MuJoCo recipe (2,048 steps per update, 10 epochs of 32 minibatches of 64, lr 3e-4, no
# entropy bonus) split over 4 workers of 512 steps; every worker's envs own their model.
CONTINUOUS_PPO: dict[str, Any] = {
    "algo": "ppo",
    "workers": 4,
    "envs_per_worker": 1,
    "rollout_steps": 512,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.0,
    "ppo_epochs": 10,
    "ppo_minibatches": 16,
    "ppo_lr": 3e-4,
    "optimizer": "sgd",
    "lr": 1.0,
    "value_norm": False,
    "normalize_obs": True,
    "normalize_reward": True,
    "total_env_steps": 1_000_000,
    "eval_every": 50_000,
    "eval_episodes": 5,
}

# Box2D with discrete actions (LunarLander): rl-zoo's PPO for LunarLander (long horizon,
# gamma 0.999, lambda 0.98, 4 epochs), 16 envs x 128 steps per update, local Adam at 2.5e-4
# (rl-zoo's is SB3's 3e-4). With 5e-4, async on LunarLander-v3 (200k steps, seeds 0 and 1)
# climbed to 199 and 112 and fell back to 5 and 39, unsolved: async adds each worker's Δ to
# θ as it arrives, computed on a θ ~3 updates stale; at 2.5e-4 both seeds solved, at 75k
# and 150k steps (docs/reproduce.md, "The LunarLander recipe").
BOX2D_PPO: dict[str, Any] = {
    "algo": "ppo",
    "workers": 4,
    "envs_per_worker": 4,
    "rollout_steps": 128,
    "gamma": 0.999,
    "gae_lambda": 0.98,
    "ent_coef": 0.01,
    "ppo_epochs": 4,
    "ppo_minibatches": 8,
    "ppo_lr": 2.5e-4,
    "optimizer": "sgd",
    "lr": 1.0,
    "value_norm": False,
    "normalize_obs": True,
    "total_env_steps": 1_000_000,
    "eval_every": 25_000,
}

# Images: A2C as in the A3C paper's Atari runs (baselines' settings: 16 envs x 5 steps,
# RMSProp 7e-4 shared by all workers); the Nature CNN is chosen from the image shape.
ATARI_A2C: dict[str, Any] = {
    "algo": "a2c",
    "workers": 4,
    "envs_per_worker": 4,
    "rollout_steps": 5,
    "optimizer": "rmsprop",
    "lr": 7e-4,
    "ent_coef": 0.01,
    "total_env_steps": 10_000_000,
    "eval_every": 250_000,
    "eval_episodes": 3,
    "log_every": 10_000,
}

# MPE (PettingZoo): MAPPO as in Yu et al. 2022's MPE runs (a centralized critic, 10 PPO
# epochs over each rollout, value normalization), the Δ of each worker's PPO applied by a
# plain SGD server at lr 1. Episodes are 25 steps: one rollout per episode, 16 envs a worker
# so the forward pass is batched and PPO's epochs are paid once per 400 joint steps (with 4
# envs, training ran at ~50% of the raw env rate, with 16 at ~62%); 2 workers, as a sync
# round averages the workers' Δs and fewer make more rounds in a budget
# (benchmarks/multiagent_bench.py). gamma 0.95: with 0.99 a truncated episode bootstraps
# ~100 steps ahead and the critic, which cannot see the time left, learns values that pull
# the policy off the landmarks before it recovers. (A2C with CartPole's 8 x 2 x 5 did not
# learn at all on an mpe2 task in 300k joint steps.)
MPE: dict[str, Any] = {
    "algo": "mappo",
    "workers": 2,
    "envs_per_worker": 16,
    "rollout_steps": 25,
    "gamma": 0.95,
    "gae_lambda": 0.95,
    "optimizer": "sgd",
    "lr": 1.0,
}

# --- families ------------------------------------------------------------------------------

FAMILIES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # family: (recipe for discrete actions, recipe for continuous actions)
    "classic_control": (DISCRETE_A2C, CONTINUOUS_PPO),
    "box2d": (BOX2D_PPO, CONTINUOUS_PPO),
    "mujoco": (CONTINUOUS_PPO, CONTINUOUS_PPO),
    "atari": (ATARI_A2C, ATARI_A2C),
    "mpe": (MPE, MPE),
    # Another PettingZoo package: its spaces say nothing about its episodes or its agents'
    # task, and no run has measured one, so the global defaults stay (set algo and sizes).
    "pettingzoo": ({}, {}),
}
"""Defaults per env family; an id of no family gets the recipe its spaces call for."""

# Gymnasium entry points (``spec.entry_point``) that name a family.
_ENTRY_POINTS = (
    ("gymnasium.envs.classic_control.", "classic_control"),
    ("gymnasium.envs.box2d.", "box2d"),
    ("gymnasium.envs.mujoco.", "mujoco"),
    ("ale_py", "atari"),
)

# --- ids that need more than their family ----------------------------------------------

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # Swing-up with a dense cost; an episode is 200 steps. The continuous recipe with a short
    # horizon (gamma 0.9, as rl-zoo's), 8 envs x 256 steps, a higher lr decayed linearly and
    # a narrower initial action noise: with the family's gamma 0.99 and 1M-step schedule
    # it does not swing up within a short budget.
    "Pendulum-v1": {
        "algo": "ppo",
        "workers": 2,
        "envs_per_worker": 4,
        "rollout_steps": 256,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "ent_coef": 0.0,
        "ppo_epochs": 10,
        "ppo_minibatches": 16,
        "ppo_lr": 1e-3,
        "optimizer": "sgd",
        "lr": 1.0,
        "lr_schedule": "linear",
        "value_norm": False,
        "normalize_obs": True,
        "normalize_reward": True,
        "log_std_init": -0.5,
        "eval_every": 10_000,
    },
    # Driving among seeded traffic (the seed project's use case); each worker's simulator
    # draws its own traffic from its env seeds. No family: highway-env's simulator steps
    # slowly (~40 steps/s), so the budget and evaluation are sized for it, and gamma 0.8
    # follows highway-env's own examples.
    "highway-fast-v0": {
        "algo": "a2c",
        "workers": 4,
        "envs_per_worker": 1,
        "rollout_steps": 16,
        "gamma": 0.8,
        "gae_lambda": 0.95,
        "lr": 5e-4,
        "hidden": 256,
        "total_env_steps": 50_000,
        "eval_every": 5_000,
        "eval_episodes": 5,
        "log_every": 500,
    },
}


def family_of(env_id: str) -> str | None:
    """The family of ``env_id`` as far as its name and Gymnasium's registry tell, without
    building the env: classic_control, box2d, mujoco, atari, mpe or pettingzoo (another
    PettingZoo package); None when neither does (a registered factory, highway-env)."""
    if env_id.startswith("mpe2/"):
        return "mpe"
    if env_id.startswith("ALE/"):
        return "atari"
    from hybrid.envs import ensure_registered, is_multiagent_id

    if is_multiagent_id(env_id):
        return "pettingzoo"

    try:
        ensure_registered(env_id)  # imports a plug-in package (highway_env), builds nothing
    except ConfigError:
        return None  # train() reports the missing extra itself
    spec = gym.registry.get(env_id)
    entry = spec.entry_point if spec is not None else None
    if not isinstance(entry, str):
        return None
    return next((family for prefix, family in _ENTRY_POINTS if entry.startswith(prefix)), None)


def defaults_for(env_id: str, cfg: TrainConfig | None = None) -> tuple[str, dict[str, Any]]:
    """``(source, overrides)``: where ``env_id``'s defaults come from and what they are.

    ``source`` is ``"env id"`` for an id listed in ``ENV_DEFAULTS``, the family's name, or
    ``"spaces: image" | "spaces: continuous" | "spaces: discrete"`` for an id of no family
    (the Atari, continuous-control or discrete-control recipe). The env is built only when
    the answer depends on its spaces; ``cfg`` brings the wrappers that may change them.
    """
    if env_id in ENV_DEFAULTS:
        return "env id", dict(ENV_DEFAULTS[env_id])
    family = family_of(env_id)
    if family is not None:
        discrete, continuous = FAMILIES[family]
        if discrete is continuous:
            return family, dict(discrete)
        return family, dict(continuous if _spaces(env_id, cfg)[1] else discrete)
    image, is_continuous = _spaces(env_id, cfg)
    if image:
        return "spaces: image", dict(ATARI_A2C)
    if is_continuous:
        return "spaces: continuous", dict(CONTINUOUS_PPO)
    return "spaces: discrete", dict(DISCRETE_A2C)


def _spaces(env_id: str, cfg: TrainConfig | None) -> tuple[bool, bool]:
    """(image observations, continuous actions), from one probe of the env."""
    from hybrid.registry import env_spaces

    return env_spaces(env_id, cfg)


def env_defaults(env_id: str) -> dict[str, Any]:
    """The overrides ``env_id`` gets: its own entry, else its family's, else its spaces'."""
    return defaults_for(env_id)[1]


def apply_env_defaults(cfg: TrainConfig, keep: Iterable[str] = ()) -> TrainConfig:
    """``cfg`` with the env's defaults given to every field still at its global default,
    except the fields named in ``keep`` (``train(cfg, **overrides)``'s keywords)."""
    if cfg.env_defaults is not True:
        return cfg
    try:
        overrides = defaults_for(cfg.env, cfg)[1]
    except ConfigError:
        return cfg  # an env that cannot be probed: train() says why when it builds it
    globals_ = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(overrides) - set(globals_))
    if unknown:  # a typo in the tables above, not the user's fault: say where
        raise ConfigError(f"{unknown[0]}: unknown field in hybrid/defaults.py for {cfg.env}")
    keep = set(keep)
    recipe_algo = overrides.get("algo", cfg.algo)
    chosen = "algo" in keep or not _same(cfg.algo, globals_["algo"])
    algo = cfg.algo if chosen else recipe_algo
    if (recipe_algo in _DELTA_ALGOS) != (algo in _DELTA_ALGOS or _trains_locally(cfg)):
        # The run's workers send another payload than the recipe's (an algorithm you chose,
        # or a scheduler whose clients train locally, as fedavg's do): the recipe's server
        # optimizer was chosen for its payload (PPO's Δ applied by SGD at lr 1 would be a
        # gradient step of lr 1 for A2C), so the server optimizer stays the global one.
        keep |= _SERVER_OPTIMIZER
    changes = {
        name: value
        for name, value in overrides.items()
        if name not in keep and _same(getattr(cfg, name), globals_[name])
    }
    return cfg.replace(**changes)


_SERVER_OPTIMIZER = {"optimizer", "lr", "lr_schedule"}
_DELTA_ALGOS = {"ppo", "mappo", "ippo"}  # their workers send Δ; a2c, nstep_q send gradients


def _trains_locally(cfg: TrainConfig) -> bool:
    """Whether the scheduler's workers train locally and send Δ (fedavg, FedBuff)."""
    from hybrid.protocol import TrainLocally
    from hybrid.registry import scheduler_task_kind

    try:
        return scheduler_task_kind(cfg.scheduler) is TrainLocally
    except ConfigError:
        return False  # an unknown scheduler: validation says so


def apply_runtime_defaults(cfg: TrainConfig, keep: Iterable[str] = ()) -> TrainConfig:
    """On the processes and ray runtimes, ``workers`` left at its global default becomes one
    per physical core (the serial runtime simulates any number; real ones contend for cores).
    A cluster (``ray_address``) sizes itself: pass ``workers`` there."""
    default = TrainConfig.__dataclass_fields__["workers"].default
    if (
        cfg.runtime in ("processes", "ray")
        and not cfg.ray_address
        and "workers" not in keep
        and _same(cfg.workers, default)
    ):
        from hybrid.cluster_profile import physical_cores

        return cfg.replace(workers=physical_cores())
    return cfg


def _same(value: Any, default: Any) -> bool:
    # type() too: True == 1 and 1 == 1.0 in Python, but --workers 1 is not "left alone"
    # when the default is True; exact equality of type and value is "left at the default".
    return type(value) is type(default) and value == default


__all__ = [
    "ENV_DEFAULTS",
    "FAMILIES",
    "apply_env_defaults",
    "apply_runtime_defaults",
    "defaults_for",
    "env_defaults",
    "family_of",
]
