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

Client traces (``hybrid.traces``): with ``--scheduler-arg client_trace=FILE`` (and
``--client-trace FILE`` for the clients' speeds and links), only clients online on the
trace's clock start training, and a client whose interval ends before its upload does is
dropped. The clock is the latest arrival's time plus any wait for a client to come online.

Written only with hybrid's public API: run it with
``hybrid train --scheduler examples/schedulers/fedbuff.py:FedBuff --scheduler-arg
buffer_size=4 --optimizer sgd --lr 1`` (persistent workers, or ``--clients K`` edge clients).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hybrid import Scheduler, Step, TrainLocally, Update, Verdict
from hybrid.aggregation import AggregationSettings, aggregate
from hybrid.traces import Trace, load_trace


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
    client_trace: str = ""
    """A client trace file: who is online when (empty: everyone, always)."""

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
        if self.client_trace:
            load_trace(self.client_trace)  # a one-line error on a bad trace


class FedBuff(Scheduler):
    Settings = FedBuffSettings
    task_kind = TrainLocally  # clients train locally (local_steps steps) and send Δ
    staleness_unit = "server steps"  # τ counts server steps, each combining K updates

    def __init__(self, workers: int, settings: FedBuffSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.concurrency = min(settings.concurrency or workers, workers)
        self.trace: Trace | None = None
        if settings.client_trace:
            self.trace = load_trace(settings.client_trace, workers)
        self.clock_s = 0.0
        """The trace's clock: the latest arrival, plus the waits for a client to come online."""
        self.started_s: dict[int, float] = {}
        self.trace_left = 0

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        # Whoever is not idle is training: the runtime knows, also after a restart.
        free = self.concurrency - (self.workers - len(idle))
        if free <= 0:
            return []
        if self.trace is not None:
            idle = self._online(idle, training=self.workers - len(idle))
        if free >= len(idle):
            started = list(idle)
        else:
            # a seeded sample of the idle clients, as FedBuff's client selector draws them
            chosen = self.rng.choice(len(idle), size=free, replace=False)
            started = sorted(idle[int(i)] for i in chosen)
        if self.trace is not None:
            self.started_s.update(dict.fromkeys(started, self.clock_s))
        return started

    def admit(self, update: Update, staleness: int) -> Verdict:
        if self.trace is None:
            return super().admit(update, staleness)
        self.clock_s = max(self.clock_s, update.finished_s)
        start = self.started_s.pop(update.worker_id, self.clock_s)
        if start + update.cost_s > self.trace.online_until(update.worker_id, start):
            self.trace_left += 1  # it went offline before its upload finished
            return Verdict.DROP
        return super().admit(update, staleness)

    def _online(self, idle: Sequence[int], training: int) -> list[int]:
        assert self.trace is not None
        online = [c for c in idle if self.trace.available(c, self.clock_s)]
        if not online and not training:  # nobody will arrive: wait for someone to come online
            self.clock_s = min(self.trace.next_online(c, self.clock_s) for c in idle)
            online = [c for c in idle if self.trace.available(c, self.clock_s)]
        return online

    def metrics(self) -> dict[str, float]:
        return {"sched/trace_left": self.trace_left} if self.trace is not None else {}

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
