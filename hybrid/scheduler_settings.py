"""The built-in schedulers' own settings: one dataclass each, with its defaults and checks.

Each built-in scheduler declares its dataclass as ``Settings`` and is built as
``cls(workers, settings)``, exactly as a scheduler of your own. The dataclasses live here,
apart from the schedulers, because they import nothing heavy: ``TrainConfig`` takes its
flat scheduler fields' defaults from them (``--staleness-bound``...), ``FIELD_OWNERS``
its owners, and ``validate`` runs their checks, all without importing a scheduler (or
torch). A new knob of a built-in scheduler is one field here: ``TrainConfig`` gains it as a
field (a flag, a sweep key, a config.json entry), owned by its scheduler in
``FIELD_OWNERS``, checked by the dataclass; the scheduler reads it from its settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hybrid.errors import ConfigError


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
    """Scale each step by 1/max(1, τ) (staleness-aware ASGD, Zhang et al. 2016)."""

    def __post_init__(self) -> None:
        if self.staleness_bound < 0:
            raise ValueError(f"staleness_bound: {self.staleness_bound} must be >= 0")


@dataclass(frozen=True)
class ActorLearnerSettings:
    """The actor-learner's own settings (``--learner-batch``, ``--max-policy-lag``)."""

    learner_batch: int = 8
    """B: trajectories per learner batch."""
    max_policy_lag: int = 100
    """Trajectories acted more than this many learner steps ago are dropped."""

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
    """C: the fraction of the K clients sampled each round, max(1, floor(C·K)); in (0, 1]."""
    round_deadline_s: float = 0.0
    """Seconds after a round starts when the server stops waiting (0: no deadline)."""
    late_policy: str = "drop"
    """A Δ that misses the deadline is dropped (drop) or admitted in a later round with its
    staleness (admit)."""
    client_dropout: float | tuple[float, ...] = 0.0
    """Probability that a sampled client drops out of its round (never starts)."""
    client_availability: float | tuple[float, ...] = 1.0
    """Probability that a client can be sampled in a given round."""

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


def field_defaults(settings_class: type) -> dict[str, Any]:
    """A settings dataclass's field names and their defaults, in order."""
    return {f.name: f.default for f in dataclasses.fields(settings_class)}


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
    "BUILT_IN_SETTINGS",
    "ActorLearnerSettings",
    "AsyncSettings",
    "BoundedSettings",
    "FedAvgSettings",
    "SyncSettings",
    "field_defaults",
    "settings_from_fields",
]
