"""Scheduler registry: one line per built-in scheduler, and the door for your own.

A scheduler is named by a registered name (``sync``, or one you registered with
``register_scheduler``) or by a path to its class: ``my_pkg.my_mod:MyScheduler``
(imported) or ``path/to/file.py:MyScheduler`` (loaded from the file), as ``--env
module:name`` works for envs. Its own hyperparameters (a ``Settings`` dataclass on the
class) come from ``TrainConfig.scheduler_args``, checked against that dataclass here.

A scheduler is built from ``SchedulerSettings`` (the assembly fills them from the config):
the workers, the seed, the clients and the scheduler's own settings, a built-in's small
dataclass (``BoundedSettings``...) or a user scheduler's ``Settings`` arguments.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.clients import ClientSettings, population
from hybrid.errors import ConfigError
from hybrid.protocol import TASK_KINDS
from hybrid.schedulers.actor_learner import ActorLearner, ActorLearnerSettings
from hybrid.schedulers.ad_psgd import AdPsgd, AdPsgdSettings
from hybrid.schedulers.asynchronous import Async
from hybrid.schedulers.base import ModelView, Scheduler, Verdict
from hybrid.schedulers.bounded import Bounded, BoundedSettings
from hybrid.schedulers.decentralized import MixingStep, ReplicaScheduler
from hybrid.schedulers.fedavg import FedAvg, FedAvgSettings
from hybrid.schedulers.gossip import Gossip, GossipSettings
from hybrid.schedulers.sgp import Sgp, SgpSettings
from hybrid.schedulers.synchronous import Sync


@dataclass(frozen=True)
class SchedulerSettings:
    """What a scheduler is built from; the assembly fills it from the config."""

    name: str
    """The registered name or ``module:Class`` path (``TrainConfig.scheduler``)."""
    workers: int
    seed: int
    clients: ClientSettings
    """The run's clients (their profiles: who may be sampled, who drops out); without
    edge clients, its workers."""
    args: Any = None
    """The scheduler's own settings: a built-in's dataclass (``BoundedSettings``,
    ``ActorLearnerSettings``, ``FedAvgSettings``; None for sync and async), or a user
    scheduler's ``scheduler_args`` mapping, checked against its ``Settings``."""


@dataclass(frozen=True)
class SchedulerEntry:
    """How to build one scheduler from its settings."""

    build: Callable[[SchedulerSettings], Scheduler]
    cls: type[Scheduler]


def _user_entry(cls: type[Scheduler]) -> SchedulerEntry:
    def build(settings: SchedulerSettings) -> Scheduler:
        if cls.Settings is None:
            return cls(population(settings.clients))  # type: ignore[call-arg]
        own = make_settings(cls, settings.args or {})
        return cls(population(settings.clients), own)  # type: ignore[call-arg]

    return SchedulerEntry(build, cls)


def _bounded(settings: SchedulerSettings) -> Bounded:
    own: BoundedSettings = settings.args
    return Bounded(settings.workers, own.staleness_bound, own.staleness_aware_lr)


def _actor_learner(settings: SchedulerSettings) -> ActorLearner:
    own: ActorLearnerSettings = settings.args
    return ActorLearner(settings.workers, own.learner_batch, own.max_policy_lag)


SCHEDULERS: dict[str, SchedulerEntry] = {
    "sync": SchedulerEntry(lambda s: Sync(s.workers), Sync),
    "async": SchedulerEntry(lambda s: Async(s.workers), Async),
    "bounded": SchedulerEntry(_bounded, Bounded),
    "hybrid": SchedulerEntry(_actor_learner, ActorLearner),
    "fedavg": SchedulerEntry(FedAvg.from_settings, FedAvg),
}
BUILT_IN = frozenset(SCHEDULERS)
"""The built-in schedulers whose settings are TrainConfig fields."""
DECENTRALIZED: dict[str, type[Scheduler]] = {"gossip": Gossip, "ad-psgd": AdPsgd, "sgp": Sgp}
"""Built-in decentralized schedulers (replicas, no global model); written like a user's
scheduler, their settings come from scheduler_args (``--scheduler-arg topology=torus``)."""
SCHEDULERS.update({name: _user_entry(cls) for name, cls in DECENTRALIZED.items()})


def register_scheduler(name: str, cls: type[Scheduler]) -> None:
    """Make ``cls`` usable as ``TrainConfig.scheduler=name`` (in this process).

    Parallel runtimes build the scheduler in the main process only, so registering it
    there is enough. For the command line and sweeps, name the class by its path instead
    (``module:Class``), which every process can import.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"scheduler: {name!r} is not a usable name (a non-empty string, no ':')")
    if name in BUILT_IN or name in DECENTRALIZED:
        raise ConfigError(f"scheduler: {name!r} is a built-in scheduler; choose another name")
    _check_class(name, cls)
    SCHEDULERS[name] = _user_entry(cls)


def resolve_scheduler(name: str) -> SchedulerEntry:
    """The entry for a registered name or a ``module:Class`` / ``file.py:Class`` path."""
    if name in SCHEDULERS:
        return SCHEDULERS[name]
    if not isinstance(name, str) or ":" not in name:
        options = ", ".join(SCHEDULERS)
        raise ConfigError(
            f"scheduler: unknown {name!r}; choose one of {options}, or name your own class "
            "as module:Class or path/to/file.py:Class"
        )
    where, _, attribute = name.rpartition(":")
    module = _load_module(name, where)
    cls = getattr(module, attribute, None)
    if cls is None:
        raise ConfigError(f"scheduler: {where!r} has no attribute {attribute!r}")
    _check_class(name, cls)
    return _user_entry(cls)


def short_name(name: str) -> str:
    """A scheduler's name fit for a directory or a chart label (its class, for a path)."""
    return name.rpartition(":")[2] if ":" in name else name


def make_settings(cls: type[Scheduler], args: Mapping[str, Any]) -> Any:
    """``cls.Settings`` filled from ``args``, each value checked against the field's type."""
    settings_cls = cls.Settings
    if settings_cls is None:
        if args:
            raise ConfigError(
                f"scheduler_args: {cls.__name__} takes no arguments (it declares no Settings)"
            )
        return None
    fields = {f.name: f for f in dataclasses.fields(settings_cls)}
    hints = typing.get_type_hints(settings_cls)
    values = {}
    for key, value in args.items():
        if key not in fields:
            raise ConfigError(
                f"scheduler_args: {cls.__name__} has no setting {key!r}; "
                f"its settings are {', '.join(fields) or 'none'}"
            )
        values[key] = _coerce(key, value, hints[key])
    try:
        return settings_cls(**values)
    except (TypeError, ValueError) as exc:  # a __post_init__ check, a missing field
        raise ConfigError(f"scheduler_args: {cls.__name__}: {exc}") from None


def check_scheduler(name: str, args: Mapping[str, Any]) -> type[Scheduler]:
    """Validate a config's scheduler and its arguments without building anything."""
    entry = resolve_scheduler(name)
    if entry.cls in (SCHEDULERS[b].cls for b in BUILT_IN):
        if args:
            raise ConfigError(
                f"scheduler_args: the built-in scheduler {name!r} takes none; its settings "
                "are TrainConfig fields (see hybrid train --help)"
            )
    else:
        make_settings(entry.cls, args)
    return entry.cls


def typed_scheduler_args(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` with each value as its setting's type ("true" -> True): what config.json
    records, so that analysis groups runs by values, not by how they were typed."""
    cls = resolve_scheduler(name).cls
    if cls.Settings is None or not args:
        return dict(args)
    settings = make_settings(cls, args)
    return {key: getattr(settings, key) for key in args}


def make_scheduler(settings: SchedulerSettings) -> Scheduler:
    """The scheduler ``settings.name`` names (``hybrid.assembly.scheduler_settings``)."""
    return resolve_scheduler(settings.name).build(settings)


# --- internals --------------------------------------------------------------------------------


def _check_class(name: str, cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise ConfigError(f"scheduler: {name!r} is not a subclass of hybrid.Scheduler")
    if cls.task_kind not in TASK_KINDS:
        kinds = ", ".join(kind.__name__ for kind in TASK_KINDS)
        raise ConfigError(
            f"scheduler: {cls.__name__}.task_kind is {cls.task_kind!r}; choose one of {kinds} "
            "(hybrid.protocol)"
        )
    if cls.Settings is not None and not dataclasses.is_dataclass(cls.Settings):
        raise ConfigError(f"scheduler: {cls.__name__}.Settings must be a dataclass")


def _load_module(name: str, where: str) -> types.ModuleType:
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"scheduler: no file {where!r} (from {name!r})")
        module_name = f"hybrid_user_scheduler_{path.stem}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"scheduler: cannot load {where!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while loading
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ConfigError(f"scheduler: loading {where!r} failed: {exc}") from None
        return module
    try:
        return importlib.import_module(where)
    except Exception as exc:  # not only ImportError: '' or '..' are ValueErrors
        raise ConfigError(f"scheduler: cannot import {where!r} for {name!r}: {exc}") from None


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """``value`` as the field's type: bool, int, float, str or None (also from CLI strings)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for kind in typing.get_args(annotation) if union else (annotation,):
        converted = _as(kind, value)
        if converted is not _NO:
            return converted
    kinds = typing.get_args(annotation) if union else (annotation,)
    names = " or ".join(
        "None" if k is type(None) else getattr(k, "__name__", str(k)) for k in kinds
    )
    raise ConfigError(f"scheduler_args: {key}={value!r} is not a {names}")


_NO = object()


def _as(kind: Any, value: Any) -> Any:
    """``value`` converted to ``kind``, or ``_NO``. A bool is no number here."""
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            return {"true": True, "false": False}.get(text, _NO)
        if kind is type(None):
            return None if text in ("none", "null") else _NO
        try:
            return kind(text) if kind in (int, float) else _NO
        except ValueError:
            return _NO
    if kind is bool or kind is str:
        return value if isinstance(value, kind) else _NO
    if kind is type(None):
        return None if value is None else _NO
    if kind in (int, float) and isinstance(value, int | float) and not isinstance(value, bool):
        return kind(value) if kind is float or isinstance(value, int) else _NO
    return _NO


__all__ = [
    "DECENTRALIZED",
    "SCHEDULERS",
    "ActorLearner",
    "ActorLearnerSettings",
    "AdPsgd",
    "AdPsgdSettings",
    "Async",
    "Bounded",
    "BoundedSettings",
    "FedAvg",
    "FedAvgSettings",
    "Gossip",
    "GossipSettings",
    "MixingStep",
    "ModelView",
    "ReplicaScheduler",
    "Scheduler",
    "SchedulerEntry",
    "SchedulerSettings",
    "Sgp",
    "SgpSettings",
    "Sync",
    "Verdict",
    "check_scheduler",
    "make_scheduler",
    "register_scheduler",
    "resolve_scheduler",
    "short_name",
    "typed_scheduler_args",
]
