"""FedBuff: federated learning with buffered asynchronous aggregation (Nguyen et al. 2022).

Clients train asynchronously: up to ``concurrency`` of them run local training at once,
each from the θ it downloaded, and send Δ (here θ_read − θ_local, a direction to descend).
The server buffers the Δs as they arrive, each weighted by its staleness,

    s(τ) = 1 / (1 + τ)^a      (a = 0.5: the paper's 1/√(1+τ)),

and once it holds ``buffer_size`` K of them it takes one server step along their mean,
Δ̄ = (1/K) Σ s(τ_k) Δ_k, with the server optimizer (``--optimizer sgd --lr η_g``; with
momentum, FedBuff's server momentum). Nothing is applied between an arrival and the step
that uses it, so τ on arrival is τ at apply.

Robust aggregation (``hybrid.aggregation``): with ``aggregator`` other than ``mean`` (or a
``norm_bound``), the K staleness-weighted Δs s(τ_k) Δ_k are combined by that rule instead of
their mean, e.g. ``--scheduler-arg aggregator=median``; Krum's f must satisfy K > 2f + 2.

Written only with hybrid's public API: run it with
``hybrid train --scheduler examples/schedulers/fedbuff.py:FedBuff --scheduler-arg
buffer_size=4 --optimizer sgd --lr 1`` (persistent workers, or ``--clients K`` edge clients).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hybrid import Scheduler, Step, TrainLocally
from hybrid.aggregation import AggregationSettings, aggregate


@dataclass
class FedBuffSettings:
    buffer_size: int = 10
    """K: client updates aggregated into one server step."""
    concurrency: int = 0
    """Clients training at once (0: every worker / client may)."""
    staleness_exponent: float = 0.5
    """a in s(τ) = (1 + τ)^-a (0: no staleness weighting)."""
    aggregator: str = "mean"
    """How the buffered Δs combine: mean, median, trimmed_mean, krum, multi_krum."""
    trim_beta: float = 0.1
    krum_f: int = 1
    krum_m: int = 1
    norm_bound: float = 0.0
    """Scale each Δ to at most this norm first (0: off)."""

    @property
    def aggregation(self) -> AggregationSettings:
        return AggregationSettings(
            self.aggregator, self.trim_beta, self.krum_f, self.krum_m, self.norm_bound
        )

    def __post_init__(self) -> None:
        if self.buffer_size < 1:
            raise ValueError(f"buffer_size: {self.buffer_size} must be >= 1")
        if self.concurrency < 0:
            raise ValueError(f"concurrency: {self.concurrency} must be >= 0")
        if self.staleness_exponent < 0:
            raise ValueError(f"staleness_exponent: {self.staleness_exponent} must be >= 0")
        self.aggregation.check_clients(self.buffer_size)  # a one-line error on a bad rule


class FedBuff(Scheduler):
    Settings = FedBuffSettings
    task_kind = TrainLocally  # clients train locally (local_steps steps) and send Δ

    def __init__(self, workers: int, settings: FedBuffSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.concurrency = min(settings.concurrency or workers, workers)

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        # Whoever is not idle is training: the runtime knows, also after a restart.
        free = self.concurrency - (self.workers - len(idle))
        if free <= 0:
            return []
        if free >= len(idle):
            return list(idle)
        # a seeded sample of the idle clients, as FedBuff's client selector draws them
        chosen = self.rng.choice(len(idle), size=free, replace=False)
        return sorted(idle[int(i)] for i in chosen)

    def full(self) -> bool:
        return len(self.buffer) >= self.settings.buffer_size

    def combine(self) -> Step | None:
        if not self.buffer:
            return None
        a = self.settings.staleness_exponent
        updates = [update for update, _ in self.buffer]
        aggregation = self.settings.aggregation
        if not aggregation.is_plain_mean:
            rows = torch.stack([(1.0 + tau) ** -a * update.payload for update, tau in self.buffer])
            self.buffer.clear()
            # each client counts once, as in FedBuff's mean of the K buffered Δs
            direction = aggregate(rows, [1.0] * len(updates), aggregation)
            return Step(direction, clip=False, updates=updates)
        direction = sum((1.0 + tau) ** -a * update.payload for update, tau in self.buffer)
        self.buffer.clear()
        # a model difference: not clipped like a gradient (clients clipped theirs)
        return Step(direction / len(updates), clip=False, updates=updates)
