"""Cooperative multi-agent tasks (PettingZoo) as a hybrid plug-in.

Importing this package registers the ``multiagent`` env family with ``hybrid.plugins``:
ids of the form ``package/module`` that Gymnasium does not know. The check below runs when
a config is validated; the adapter (``pettingzoo``) and MAPPO / IPPO (``mappo``) are
imported only when a run uses them. This module is the plug-in's part of the assembly: it
alone reads the flat config (the check, and ``settings``, which builds the
``MultiAgentSettings`` that MAPPO / IPPO receive inside ``AlgoSettings.family``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybrid.errors import ConfigError
from hybrid.plugins import EnvFamily, register_env_family

if TYPE_CHECKING:
    from hybrid.algorithms.ppo import PPOSettings
    from hybrid.config import TrainConfig

MULTIAGENT_ALGOS = ("mappo", "ippo", "ppo", "a2c")

PAPER_MAPPO: dict[str, object] = {
    "mappo_value_loss": "huber",
    "mappo_huber_delta": 10.0,
    "mappo_separate_optimizers": True,
    "mappo_value_norm_per_minibatch": True,
    "max_grad_norm": 10.0,
}
"""The choices of Yu et al. 2022's released MAPPO code where hybrid's defaults differ:
``hybrid.train(cfg, **PAPER_MAPPO)``, or the same as flags (docs/multiagent.md)."""
"""What runs on a PettingZoo env: ``ppo`` is IPPO there; ``a2c`` one gradient per task."""


@dataclass(frozen=True)
class MultiAgentSettings:
    """What MAPPO / IPPO build their model and loss from, besides ``AlgoSettings``."""

    param_sharing: str
    agent_id: bool
    critic: str
    """``central`` or ``local`` (``critic_kind``: ``auto`` already resolved)."""
    ppo: PPOSettings
    """PPO's settings with the multi-agent default of advantage normalization."""


def settings(cfg: TrainConfig) -> MultiAgentSettings:
    """The family's settings from the flat config (the assembly calls it)."""
    import dataclasses

    from hybrid.assembly import ppo_settings

    ppo = dataclasses.replace(
        ppo_settings(cfg, multiagent=True),
        value_loss=cfg.mappo_value_loss,
        huber_delta=cfg.mappo_huber_delta,
        separate_clipping=cfg.mappo_separate_optimizers,
        value_norm_per_minibatch=cfg.mappo_value_norm_per_minibatch,
    )
    return MultiAgentSettings(
        param_sharing=cfg.param_sharing,
        agent_id=cfg.agent_id,
        critic=critic_kind(cfg),
        ppo=ppo,
    )


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
        settings=settings,
    )
)

__all__ = [
    "MULTIAGENT_ALGOS",
    "PAPER_MAPPO",
    "MultiAgentSettings",
    "check_config",
    "critic_kind",
    "env_state",
    "mappo",
    "pettingzoo",
    "settings",
]
