"""Per-env defaults: one readable table, like rl-zoo's hyperparameter files.

The rule
--------
``train()`` (and so the CLI) gives every field that is still at its **global
default** (the value in ``TrainConfig``) the value listed here for the env. A
field you set to anything else is yours and stays, and so is every keyword
given to ``train(config, **overrides)``. A config field or CLI flag set to
exactly its global default cannot be told apart from one left alone (e.g.
``--workers 8`` on Pendulum-v1 gives 2 workers): pass it to ``train`` as a
keyword, or use ``--no-env-defaults`` (``env_defaults=False``) to run with the
global defaults throughout. ``config.json`` and ``Result.config`` record the
values in effect, and a resumed run uses those, not this table.

The table never sets ``scheduler`` or ``runtime``: they are what a study varies.

Each entry says what it was tuned for; ``benchmarks/envs.py`` measures it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from hybrid.config import ConfigError, TrainConfig

_MUJOCO_PPO: dict[str, Any] = {
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

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # MPE episodes are 25 steps: one rollout per episode, 16 envs a worker so the forward
    # pass is batched and PPO's epochs are paid once per 400 joint steps (with 4 envs,
    # training ran at ~50% of the raw env rate, with 16 at ~62%), and gamma 0.95 (with
    # 0.99 a truncated episode bootstraps ~100 steps ahead and the critic, which cannot
    # see the time left, learns values that pull the policy off the landmarks before it
    # recovers).
    "mpe2/simple_spread_v3": {
        "rollout_steps": 25,
        "envs_per_worker": 16,
        "gamma": 0.95,
        "gae_lambda": 0.95,
    },
    "mpe2/simple_speaker_listener_v4": {
        "rollout_steps": 25,
        "envs_per_worker": 16,
        "gamma": 0.95,
        "gae_lambda": 0.95,
    },
    # Swing-up with a dense cost; an episode is 200 steps. PPO with a short horizon
    # (gamma 0.9, as rl-zoo's) and normalized observations and rewards.
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
    # Discrete, 8-d state, 1000-step episodes; solved at 200.
    "LunarLander-v3": {
        "algo": "ppo",
        "workers": 4,
        "envs_per_worker": 4,
        "rollout_steps": 128,
        "gamma": 0.999,
        "gae_lambda": 0.98,
        "ent_coef": 0.01,
        "ppo_epochs": 4,
        "ppo_minibatches": 8,
        "ppo_lr": 5e-4,
        "optimizer": "sgd",
        "lr": 1.0,
        "value_norm": False,
        "normalize_obs": True,
        "total_env_steps": 1_000_000,
        "eval_every": 25_000,
    },
    # MuJoCo locomotion: PPO on 1M steps with normalized observations and rewards (the
    # CleanRL / rl-zoo recipe); every worker's envs own their MuJoCo model and data.
    "HalfCheetah-v5": _MUJOCO_PPO,
    "Hopper-v5": _MUJOCO_PPO,
    # A2C as in the A3C paper's Atari runs (baselines' settings: 16 envs x 5 steps,
    # RMSProp 7e-4 shared by all workers); the Nature CNN is chosen from the image shape.
    "ALE/Pong-v5": {
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
    },
    # Driving among seeded traffic (the seed project's use case); each worker's simulator
    # draws its own traffic from its env seeds. The env steps slowly (~40 steps/s).
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


def env_defaults(env_id: str) -> dict[str, Any]:
    """The overrides listed for ``env_id`` (empty for an env without an entry)."""
    return dict(ENV_DEFAULTS.get(env_id, {}))


def apply_env_defaults(cfg: TrainConfig, keep: Iterable[str] = ()) -> TrainConfig:
    """``cfg`` with the env's defaults given to every field still at its global default,
    except the fields named in ``keep`` (``train(cfg, **overrides)``'s keywords)."""
    if cfg.env_defaults is not True:
        return cfg
    overrides = env_defaults(cfg.env)
    if not overrides:
        return cfg
    globals_ = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(overrides) - set(globals_))
    if unknown:  # a typo in the table above, not the user's fault: say where
        raise ConfigError(f"{unknown[0]}: unknown field in hybrid/defaults.py for {cfg.env}")
    changes = {
        name: value
        for name, value in overrides.items()
        if name not in keep and _same(getattr(cfg, name), globals_[name])
    }
    return cfg.replace(**changes)


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
        from hybrid.runtimes._parallel import physical_cores

        return cfg.replace(workers=physical_cores())
    return cfg


def _same(value: Any, default: Any) -> bool:
    # type() too: True == 1 and 1 == 1.0 in Python, but --workers 1 is not "left alone"
    # when the default is True; exact equality of type and value is "left at the default".
    return type(value) is type(default) and value == default


__all__ = ["ENV_DEFAULTS", "apply_env_defaults", "apply_runtime_defaults", "env_defaults"]
