"""Scheduler registry: one line per built-in scheduler, and the door for your own.

A scheduler is named by a registered name (``sync``, or one you registered with
``register_scheduler``) or by a path to its class: ``my_pkg.my_mod:MyScheduler``
(imported) or ``path/to/file.py:MyScheduler`` (loaded from the file), as ``--env
module:name`` works for envs. Its own hyperparameters (a ``Settings`` dataclass on the
class) come from ``TrainConfig.scheduler_args``, checked against that dataclass here.

A scheduler is built from ``SchedulerSettings`` (the assembly fills them from the config):
the workers, the seed, the clients and the scheduler's own settings. Built-in schedulers
follow the contract a user's does: a ``Settings`` dataclass (defaults and checks written
there, once), ``__init__(workers, settings)``, ``task_kind`` and ``staleness_unit``. Their
settings are flat ``TrainConfig`` fields (``--staleness-bound``...), derived from those
dataclasses (``hybrid.scheduler_settings``); a user scheduler's come from
``scheduler_args``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import importlib
import importlib.util
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.clients import ClientSettings, population
from hybrid.errors import ConfigError
from hybrid.protocol import TASK_KINDS
from hybrid.scheduler_settings import (
    ActorLearnerSettings,
    AsyncSettings,
    BoundedSettings,
    FedAvgSettings,
    SyncSettings,
    coerce_setting,
)
from hybrid.schedulers.actor_learner import ActorLearner
from hybrid.schedulers.ad_psgd import AdPsgd, AdPsgdSettings
from hybrid.schedulers.asynchronous import Async
from hybrid.schedulers.base import ModelView, Scheduler, Verdict
from hybrid.schedulers.bounded import Bounded
from hybrid.schedulers.decentralized import MixingStep, ReplicaScheduler, RoundReplicas
from hybrid.schedulers.fedavg import FedAvg
from hybrid.schedulers.gossip import Gossip, GossipSettings
from hybrid.schedulers.guard import Guarded, construct
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
    """The scheduler's own settings: its ``Settings`` dataclass, filled (the assembly does
    for a built-in, from its flat fields), or a mapping of values (``scheduler_args``),
    checked against its ``Settings`` here."""


@dataclass(frozen=True)
class SchedulerEntry:
    """How to build one scheduler from its settings."""

    build: Callable[[SchedulerSettings], Scheduler]
    cls: type[Scheduler]


def _user_entry(cls: type[Scheduler], guarded: bool = True) -> SchedulerEntry:
    """Every scheduler, built-in or yours, is built the same way: ``cls(workers, settings)``
    (``cls(workers)`` when it declares no ``Settings``). Yours runs guarded: a fault of
    yours is one line naming the method, not a traceback; the built-ins are trusted."""

    def build(settings: SchedulerSettings) -> Scheduler:
        def make(*args: Any) -> Scheduler:
            return construct(settings.name, cls, *args) if guarded else cls(*args)

        if cls.Settings is None:
            return make(population(settings.clients))
        own = settings.args
        if not isinstance(own, cls.Settings):
            own = make_settings(cls, own or {})
        return make(population(settings.clients), own)

    return SchedulerEntry(build, cls)


SCHEDULERS: dict[str, SchedulerEntry] = {
    "sync": _user_entry(Sync, guarded=False),
    "async": _user_entry(Async, guarded=False),
    "bounded": _user_entry(Bounded, guarded=False),
    "hybrid": _user_entry(ActorLearner, guarded=False),
    "fedavg": _user_entry(FedAvg, guarded=False),
}
BUILT_IN = frozenset(SCHEDULERS)
"""The built-in schedulers whose settings are TrainConfig fields."""
DECENTRALIZED: dict[str, type[Scheduler]] = {"gossip": Gossip, "ad-psgd": AdPsgd, "sgp": Sgp}
"""Built-in decentralized schedulers (replicas, no global model); written like a user's
scheduler, their settings come from scheduler_args (``--scheduler-arg topology=torus``)."""
SCHEDULERS.update({name: _user_entry(cls, guarded=False) for name, cls in DECENTRALIZED.items()})


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


def task_kind_of(name: str) -> type | None:
    """The task kind of scheduler ``name`` (None: not known without importing it, under
    ``defer_user_schedulers``, or not a scheduler: validation says why)."""
    try:
        if _deferred(name):
            return None
        return resolve_scheduler(name).cls.task_kind
    except ConfigError:
        return None


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
        values[key] = coerce_setting(key, value, hints[key])
    try:
        return settings_cls(**values)
    except (TypeError, ValueError) as exc:  # a __post_init__ check, a missing field
        raise ConfigError(f"scheduler_args: {cls.__name__}: {exc}") from None


def check_scheduler(name: str, args: Mapping[str, Any]) -> type[Scheduler]:
    """Validate a config's scheduler and its arguments without building anything (under
    ``defer_user_schedulers``, a user's class is not imported: its form only is checked)."""
    if _deferred(name):
        return Scheduler
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
    if _deferred(name):
        return dict(args)
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


@dataclass(frozen=True)
class SchedulerSource:
    """The file a ``path/to/file.py:Class`` scheduler was loaded from: its resolved path and
    the SHA-256 of the bytes that ran."""

    path: str
    sha256: str


_LOADED_FILES: dict[str, SchedulerSource] = {}
"""Resolved path -> the source its module (in sys.modules) was executed from."""


def scheduler_source(name: str) -> SchedulerSource | None:
    """What a ``file.py:Class`` scheduler name ran in this process (None for any other name,
    or a file not loaded yet): the run records it beside its config."""
    where = name.rpartition(":")[0] if isinstance(name, str) else ""
    if not where.endswith(".py"):
        return None
    return _LOADED_FILES.get(str(Path(where).resolve()))


def _module_name(resolved: Path, digest: str) -> str:
    # Unique per file and content: two rule.py files in two folders, or an edited file,
    # are two modules (a stem alone would hand the first one's class to both).
    tag = hashlib.sha256(f"{resolved}\0{digest}".encode()).hexdigest()[:16]
    stem = "".join(c if c.isalnum() else "_" for c in resolved.stem)
    return f"hybrid_user_scheduler_{stem}_{tag}"


def _load_file(name: str, where: str) -> types.ModuleType:
    path = Path(where)
    if not path.is_file():
        raise ConfigError(f"scheduler: no file {where!r} (from {name!r})")
    resolved = path.resolve()
    try:
        source = resolved.read_bytes()
    except OSError as exc:
        raise ConfigError(f"scheduler: cannot read {where!r} ({exc.strerror or exc})") from None
    digest = hashlib.sha256(source).hexdigest()
    module_name = _module_name(resolved, digest)
    if module_name in sys.modules:  # this file, unchanged since it was loaded
        _LOADED_FILES[str(resolved)] = SchedulerSource(str(resolved), digest)
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ConfigError(f"scheduler: cannot load {where!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while loading
    try:
        # the bytes hashed above, not a second read: what ran is what is recorded
        exec(compile(source, str(resolved), "exec"), module.__dict__)
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(f"scheduler: loading {where!r} failed: {exc}") from None
    _LOADED_FILES[str(resolved)] = SchedulerSource(str(resolved), digest)
    return module


_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hybrid_defer_user_schedulers", default=False
)


@contextlib.contextmanager
def defer_user_schedulers() -> Iterator[None]:
    """Check scheduler names without importing them: a ``module:Class`` or ``file.py:Class``
    is only checked for its form (and the file for existing) until this exits. A sweep's
    ``--dry-run`` plans under it: it promises to run nothing, and importing runs code."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def _deferred(name: str) -> bool:
    """True (after checking the name's form) when ``name`` is a user's path to be loaded
    later (see ``defer_user_schedulers``)."""
    if not _DEFERRED.get() or name in SCHEDULERS or not isinstance(name, str) or ":" not in name:
        return False
    where, _, attribute = name.rpartition(":")
    if not where or not attribute.isidentifier():
        raise ConfigError(f"scheduler: {name!r} is not module:Class or path/to/file.py:Class")
    if where.endswith(".py") and not Path(where).is_file():
        raise ConfigError(f"scheduler: no file {where!r} (from {name!r})")
    return True


def _load_module(name: str, where: str) -> types.ModuleType:
    if where.endswith(".py"):
        return _load_file(name, where)
    try:
        return importlib.import_module(where)
    except Exception as exc:  # not only ImportError: '' or '..' are ValueErrors
        raise ConfigError(f"scheduler: cannot import {where!r} for {name!r}: {exc}") from None


__all__ = [
    "DECENTRALIZED",
    "SCHEDULERS",
    "ActorLearner",
    "ActorLearnerSettings",
    "AdPsgd",
    "AdPsgdSettings",
    "Async",
    "AsyncSettings",
    "Bounded",
    "BoundedSettings",
    "FedAvg",
    "FedAvgSettings",
    "Gossip",
    "GossipSettings",
    "Guarded",
    "MixingStep",
    "ModelView",
    "ReplicaScheduler",
    "RoundReplicas",
    "Scheduler",
    "SchedulerEntry",
    "SchedulerSettings",
    "SchedulerSource",
    "Sgp",
    "SgpSettings",
    "Sync",
    "SyncSettings",
    "Verdict",
    "check_scheduler",
    "defer_user_schedulers",
    "make_scheduler",
    "register_scheduler",
    "resolve_scheduler",
    "scheduler_source",
    "short_name",
    "task_kind_of",
    "typed_scheduler_args",
]
