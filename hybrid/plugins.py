"""Plug-ins: packages that add to hybrid without hybrid importing them.

``multiagent`` (PettingZoo tasks) and ``federated`` (per-client evaluation) are plug-ins:
they import ``hybrid``; ``hybrid`` never imports them by name in its code, so the
dependency goes one way. A plug-in package registers what it adds when it is imported,
with ``register_env_family`` or ``register_final_evaluation``. What it registers names its
heavy parts by ``"module:attribute"`` paths, imported only when used, so importing a
plug-in (and validating a config) stays light.

``load()`` imports the plug-ins once: the ones shipped with hybrid (``PLUGINS``) and any
installed package that declares itself in its ``pyproject.toml``::

    [project.entry-points."hybrid.plugins"]
    my_plugin = "my_package"

A notebook can also just ``import my_package`` before training.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybrid.config import TrainConfig

PLUGINS = ("multiagent", "federated")
"""The plug-in packages shipped in hybrid's wheel."""
ENTRY_POINT_GROUP = "hybrid.plugins"


def resolve(path: str) -> Any:
    """The object a ``"module:attribute"`` path names (imports the module)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class EnvFamily:
    """Env ids that are not Gymnasium's: how to recognise, check, build and learn on them.

    ``claims`` and ``check`` are called while a config is validated: ``claims`` must import
    nothing heavy; ``check`` may probe the env. The other fields are ``"module:attribute"``
    paths, imported when a run uses the family.
    """

    name: str
    claims: Callable[[str], bool]
    """Whether an env id (one Gymnasium does not know) belongs to this family."""
    check: Callable[[TrainConfig], None]
    """Raise ConfigError on settings this family cannot run."""
    describe: str
    """``(env_id) -> EnvInfo``."""
    make_vector_env: str
    """``(env_id, num_envs) -> vector env``."""
    runner: str
    """The Runner class: ``(envs, seed, info, normalization)``."""
    algorithm: str
    """The ``hybrid.algorithms.Algorithm`` every algorithm name takes on this family."""
    baseline_returns: str | None = None
    """``(env_id, episodes, seeds) -> returns`` of a reference policy, reported beside the
    trained one's in ``summary.json``."""
    settings: Callable[[TrainConfig], Any] | None = None
    """The family's own settings, built from the flat config by the assembly (the plug-in's
    part of it) and handed to its algorithm as ``AlgoSettings.family``."""


@dataclass(frozen=True)
class FinalEvaluation:
    """Figures computed once, on the final parameters, when ``applies(cfg)``."""

    name: str
    applies: Callable[[TrainConfig], bool]
    run: str
    """``"module:function"``: ``(settings, info, params) -> dict`` of summary figures."""
    settings: Callable[[TrainConfig], Any] | None = None
    """The evaluation's own settings, built from the flat config by the assembly (the
    plug-in's part of it) and handed to ``run``; None hands ``run`` the config itself."""


_ENV_FAMILIES: dict[str, EnvFamily] = {}
_FINAL_EVALUATIONS: dict[str, FinalEvaluation] = {}
_loaded = False


def register_env_family(family: EnvFamily) -> None:
    _ENV_FAMILIES[family.name] = family


def register_final_evaluation(evaluation: FinalEvaluation) -> None:
    _FINAL_EVALUATIONS[evaluation.name] = evaluation


def load() -> None:
    """Import every plug-in once (they register themselves as they are imported)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in PLUGINS:
        importlib.import_module(name)
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        importlib.import_module(point.value.partition(":")[0])


def env_families() -> list[EnvFamily]:
    load()
    return list(_ENV_FAMILIES.values())


def final_evaluations() -> list[FinalEvaluation]:
    load()
    return list(_FINAL_EVALUATIONS.values())


__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGINS",
    "EnvFamily",
    "FinalEvaluation",
    "env_families",
    "final_evaluations",
    "load",
    "register_env_family",
    "register_final_evaluation",
    "resolve",
]
