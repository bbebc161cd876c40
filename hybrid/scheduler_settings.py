"""The built-in schedulers' own settings: one dataclass each, with its defaults and checks.

Each built-in scheduler declares its dataclass as ``Settings`` and is built as
``cls(workers, settings)``, exactly as a scheduler of your own. The dataclasses live here,
apart from the schedulers, because they import nothing heavy: ``TrainConfig`` takes its
flat scheduler fields from them (``--staleness-bound``...: type, default and docstring, the
flag's --help text), ``FIELD_OWNERS`` their owners, and ``validate`` runs their checks, all
without importing a scheduler (or torch). A new knob of a built-in scheduler is one field
here, with its docstring: ``TrainConfig`` gains it as a field (a documented flag, a sweep
key, a config.json entry), owned by its scheduler in ``FIELD_OWNERS``, checked by the
dataclass; the scheduler reads it from its settings.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import math
import sys
import textwrap
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hybrid.aggregation import AggregationSettings
from hybrid.errors import ConfigError
from hybrid.privacy import PrivacySettings
from hybrid.traces import Trace

ASSEMBLED = "assembled"
"""Metadata key of a Settings field the assembly builds (from other config fields, or the
client profiles) rather than a config field of the same name: no flag, no config entry."""
_BUILT_BY_ASSEMBLY = {ASSEMBLED: True}

CONFIG_TYPE = "config_type"
"""Metadata key of a Settings field whose config field (flag, config.json entry) has a
narrower type than the field itself: one value for every client, where the assembly may
give the Settings one per client."""
_ONE_FOR_EVERY_CLIENT = {CONFIG_TYPE: "float"}


@dataclass(frozen=True)
class SyncSettings:
    """sync has no settings of its own: every worker takes part in every round."""


@dataclass(frozen=True)
class AsyncSettings:
    """async has no settings of its own: every idle worker starts, every update applies."""


@dataclass(frozen=True)
class BoundedSettings:
    """SSP's own settings (``--staleness-bound``, ``--staleness-aware-lr``)."""

    staleness_bound: int = 4
    """SSP bound s: a worker may run at most s clocks ahead of the slowest."""
    staleness_aware_lr: bool = False
    """Scale each step by 1/max(1, τ), τ its staleness (staleness-aware ASGD, Zhang et al.
    2016)."""

    def __post_init__(self) -> None:
        if self.staleness_bound < 0:
            raise ValueError(f"staleness_bound: {self.staleness_bound} must be >= 0")


@dataclass(frozen=True)
class ActorLearnerSettings:
    """The actor-learner's own settings (``--learner-batch``, ``--max-policy-lag``)."""

    learner_batch: int = 8
    """Trajectories per learner batch (B)."""
    max_policy_lag: int = 100
    """Drop trajectories acted more than this many learner steps (versions) ago."""

    def __post_init__(self) -> None:
        if self.learner_batch < 1:
            raise ValueError(f"learner_batch: {self.learner_batch} must be >= 1")
        if self.max_policy_lag < 0:
            raise ValueError(f"max_policy_lag: {self.max_policy_lag} must be >= 0")


@dataclass(frozen=True)
class FedAvgSettings:
    """fedavg's own settings: the sampled fraction C, the round deadline, what happens to a
    late Δ, and the clients' dropout and availability (one probability for every client,
    or one per client)."""

    client_fraction: float = 0.1
    """Fraction C of the K clients sampled each round, max(1, floor(C·K)); in (0, 1]."""
    round_deadline_s: float = 0.0
    """Seconds after a round starts when the server stops waiting (0: no deadline); virtual
    seconds on the serial runtime, wall seconds on processes and ray."""
    late_policy: str = "drop"
    """A Δ that misses the deadline is dropped (drop, counted) or admitted in a later round
    with its staleness (admit: asynchronous FL)."""
    client_dropout: float | tuple[float, ...] = field(default=0.0, metadata=_ONE_FOR_EVERY_CLIENT)
    """Probability that a sampled client drops out of its round (never starts)."""
    client_availability: float | tuple[float, ...] = field(
        default=1.0, metadata=_ONE_FOR_EVERY_CLIENT
    )
    """Probability that a client can be sampled in a given round."""
    # Built by the assembly, not config fields of their own: the aggregation and DP-FedAvg
    # settings from their flat fields (aggregator..., dp_*; FedBuff takes the same
    # aggregation settings), the Byzantine clients and the trace from the client profiles.
    aggregation: AggregationSettings = field(
        default_factory=AggregationSettings, metadata=_BUILT_BY_ASSEMBLY
    )
    """The server's rule for combining a round's Δs (the mean unless set)."""
    privacy: PrivacySettings = field(default_factory=PrivacySettings, metadata=_BUILT_BY_ASSEMBLY)
    """DP-FedAvg (off unless its clip is set)."""
    byzantine_clients: tuple[int, ...] = field(default=(), metadata=_BUILT_BY_ASSEMBLY)
    """The Byzantine clients' ids (their attack is the pool's), counted in the metrics."""
    trace: Trace | None = field(default=None, metadata=_BUILT_BY_ASSEMBLY)
    """A client trace: who is online when (None: everyone always)."""
    dp_noise_seed: int = field(default=0, metadata=_BUILT_BY_ASSEMBLY)
    """The seed of DP-FedAvg's noise, the run seed's own stream (hybrid.seeding)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.client_fraction <= 1.0:
            raise ValueError(f"client_fraction: {self.client_fraction} is outside (0, 1]")
        if self.round_deadline_s < 0:
            raise ValueError(f"round_deadline_s: {self.round_deadline_s} must be >= 0")
        if self.late_policy not in ("drop", "admit"):
            raise ValueError(f"late_policy: unknown {self.late_policy!r}; choose drop or admit")
        if not all(0.0 <= p < 1.0 for p in _each(self.client_dropout)):
            raise ValueError(f"client_dropout: {self.client_dropout} is outside [0, 1)")
        if not all(0.0 < p <= 1.0 for p in _each(self.client_availability)):
            raise ValueError(f"client_availability: {self.client_availability} is outside (0, 1]")


def _each(value: float | tuple[float, ...]) -> tuple[float, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


BUILT_IN_SETTINGS: dict[str, type] = {
    "sync": SyncSettings,
    "async": AsyncSettings,
    "bounded": BoundedSettings,
    "hybrid": ActorLearnerSettings,
    "fedavg": FedAvgSettings,
}
"""Built-in scheduler name -> its ``Settings`` dataclass."""


def coerce_setting(key: str, value: Any, annotation: Any) -> Any:
    """``value`` as the field's type: bool, int, float, str or None (also from CLI strings)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for kind in typing.get_args(annotation) if union else (annotation,):
        converted = _as(kind, value)
        if converted is not _NO:
            _check_magnitude(key, converted)
            return converted
    kinds = typing.get_args(annotation) if union else (annotation,)
    names = " or ".join(
        "None" if k is type(None) else getattr(k, "__name__", str(k)) for k in kinds
    )
    raise ConfigError(f"scheduler_args: {key}={value!r} is not a {names}")


_NO = object()

FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max
INT_MAX = 2**62


def _check_magnitude(key: str, value: Any) -> None:
    """A number a run can compute with: finite and within float32 (every setting ends up
    in float32 tensors; ``nan`` would silently diverge the run), an integer within 2**62."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"scheduler_args: {key}={value!r} is not a finite number")
    if isinstance(value, float) and abs(value) > FLOAT32_MAX:
        raise ConfigError(
            f"scheduler_args: {key}={value!r} is beyond the float32 range (±{FLOAT32_MAX:.4g}) "
            "the parameters are computed in"
        )
    if isinstance(value, int) and abs(value) > INT_MAX:
        raise ConfigError(f"scheduler_args: {key}={value} is beyond ±2**62")


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


def fold_scheduler_args(
    name: str, args: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Built-in scheduler ``name``'s ``--scheduler-arg`` values: ``(its settings, typed,
    the rest)``. A setting given so is the flag of the same name (``staleness_bound=2`` is
    ``--staleness-bound 2``); the rest (unknown names, values of the wrong type) stays for
    ``validate`` to refuse in one line."""
    settings_class = BUILT_IN_SETTINGS[name]
    all_hints = typing.get_type_hints(settings_class)
    hints = {name: all_hints[name] for name in field_defaults(settings_class)}
    own, rest = {}, {}
    for key, value in args.items():
        try:
            own[key] = coerce_setting(key, value, hints[key])
        except (KeyError, ConfigError):
            rest[key] = value
    return own, rest


def config_fields(settings_class: type) -> list[dataclasses.Field]:
    """A settings dataclass's fields that are config fields of the same name (not those the
    assembly builds)."""
    return [f for f in dataclasses.fields(settings_class) if not f.metadata.get(ASSEMBLED)]


def config_type(settings_field: dataclasses.Field) -> Any:
    """The type of a Settings field's config field (usually the field's own)."""
    return settings_field.metadata.get(CONFIG_TYPE, settings_field.type)


def field_docs(settings_class: type) -> dict[str, str]:
    """A dataclass's field docstrings (the string under each field), read from its source,
    each on one line (paragraphs kept): a built-in scheduler's flag takes its --help text
    from here, so a knob is documented once, on its Settings. Empty where the source cannot
    be read (a class made at run time)."""
    docs: dict[str, str] = {}
    for cls in reversed(settings_class.__mro__):  # a subclass's own docs win
        class_def = _class_definition(cls) if dataclasses.is_dataclass(cls) else None
        if class_def is not None:
            docs.update(_docs_in(class_def))
    return docs


def _docs_in(class_def: ast.ClassDef) -> dict[str, str]:
    docs = {}
    for statement, following in itertools.pairwise(class_def.body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            paragraphs = inspect.cleandoc(following.value.value).split("\n\n")
            docs[statement.target.id] = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    return docs


def _class_definition(cls: type) -> ast.ClassDef | None:
    """``cls``'s ``class`` statement. Its module is parsed once (TrainConfig reads three
    classes of this one at import; ``inspect.getsource`` would parse it for each)."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if path is None or "<locals>" in cls.__qualname__:  # made in a function: ask inspect
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        except (OSError, TypeError, SyntaxError):
            return None
        return node if isinstance(node, ast.ClassDef) else None
    body = _module_body(path)
    node = None
    for name in cls.__qualname__.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node


@functools.cache
def _module_body(path: str) -> list[ast.stmt]:
    try:
        with open(path, encoding="utf-8") as source:
            return ast.parse(source.read()).body
    except (OSError, SyntaxError, ValueError):  # no source beside a compiled module
        return []


def field_defaults(settings_class: type) -> dict[str, Any]:
    """A settings dataclass's config field names and their defaults, in order."""
    return {f.name: f.default for f in config_fields(settings_class)}


def settings_from_fields(name: str, values: Mapping[str, Any]) -> Any:
    """Built-in scheduler ``name``'s settings, each field read from ``values`` (the flat
    config fields of the same names); a value its checks refuse is one ``ConfigError``
    naming the field."""
    settings_class = BUILT_IN_SETTINGS[name]
    try:
        return settings_class(**{f: values[f] for f in field_defaults(settings_class)})
    except (TypeError, ValueError) as exc:  # a check names its field first
        raise ConfigError(str(exc)) from None


__all__ = [
    "ASSEMBLED",
    "BUILT_IN_SETTINGS",
    "CONFIG_TYPE",
    "ActorLearnerSettings",
    "AsyncSettings",
    "BoundedSettings",
    "FedAvgSettings",
    "SyncSettings",
    "coerce_setting",
    "config_fields",
    "config_type",
    "field_defaults",
    "field_docs",
    "fold_scheduler_args",
    "settings_from_fields",
]
