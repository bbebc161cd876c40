"""Cooperative multi-agent tasks (PettingZoo) as a hybrid plug-in.

Importing this package registers the ``multiagent`` env family with ``hybrid.plugins``:
ids of the form ``package/module`` that Gymnasium does not know. The check below runs when
a config is validated; the adapter (``pettingzoo``) and MAPPO / IPPO (``mappo``) are
imported only when a run uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid.errors import ConfigError
from hybrid.plugins import EnvFamily, register_env_family

if TYPE_CHECKING:
    from hybrid.config import TrainConfig

MULTIAGENT_ALGOS = ("mappo", "ippo", "ppo", "a2c")
"""What runs on a PettingZoo env: ``ppo`` is IPPO there; ``a2c`` one gradient per task."""


def critic_kind(cfg: TrainConfig) -> str:
    """``central`` or ``local``: ``--critic`` if set, else what the algorithm prescribes."""
    if cfg.critic != "auto":
        return cfg.critic
    return "central" if cfg.algo == "mappo" else "local"


def check_config(cfg: TrainConfig) -> None:
    """Multi-agent settings that only the env can check (agents, state()); ConfigErrors."""
    from multiagent.pettingzoo import describe_spec, parse_groups  # probes the env

    spec = describe_spec(cfg.env)
    parse_groups(spec, cfg.param_sharing)
    if critic_kind(cfg) == "central" and spec.state_dim is None:
        what = "mappo's centralized critic" if cfg.algo == "mappo" else "--critic central"
        raise ConfigError(
            f"critic: {what} is fed from state(), which {cfg.env} does not implement; "
            "use --algo ippo or --critic local"
        )
    # Settings whose machinery wraps Gymnasium envs (PettingZoo envs have their own).
    unsupported = {"wrappers": bool(cfg.wrappers)}
    for name, used in unsupported.items():
        if used:
            raise ConfigError(f"{name}: not supported on multi-agent (PettingZoo) envs yet")
    if cfg.algo not in MULTIAGENT_ALGOS:
        raise ConfigError(
            f"algo: {cfg.algo!r} does not run on multi-agent envs; "
            f"choose one of {', '.join(MULTIAGENT_ALGOS)}"
        )


register_env_family(
    EnvFamily(
        name="multiagent",
        claims=lambda env_id: "/" in env_id,
        check=check_config,
        describe="multiagent.pettingzoo:describe",
        make_vector_env="multiagent.pettingzoo:make_vector_env",
        runner="multiagent.pettingzoo:MultiAgentRunner",
        algorithm="multiagent.mappo:MULTIAGENT",
        baseline_returns="multiagent.pettingzoo:random_policy_returns",
    )
)

__all__ = [
    "MULTIAGENT_ALGOS",
    "check_config",
    "critic_kind",
    "env_state",
    "mappo",
    "pettingzoo",
]
