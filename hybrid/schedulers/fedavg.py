"""``fedavg``: federated averaging in rounds (FedAvg, FedProx, FedAvgM, FedOpt).

Each round samples m = max(1, floor(C·K)) of the K clients among those idle and
available (a seeded draw), lets the sampled ones that do not drop out run E local
steps from the round's θ, and combines their Δ = θ_global − θ_local into the
sample-weighted mean (McMahan et al. 2017). The server's optimizer applies that
mean as a pseudo-gradient: SGD with lr 1 is FedAvg, with momentum FedAvgM, and
``fedadam`` / ``fedyogi`` / ``fedadagrad`` (``hybrid.fedopt``) are FedOpt (Reddi et al.
2021); torch's ``adam`` is not FedAdam (bias correction, v₀ = 0). FedProx's μ lives in
the client's loss (the worker).

Stragglers: with a deadline, a Δ whose task ran longer than ``deadline_s`` is late.
The serial runtime hands it over at the deadline, so the round closes then; the
scheduler drops it (counted), or under ``late_policy="admit"`` holds it until the
first round that closes after it really arrived and admits it there with its
staleness (asynchronous FL). Dropout is decided here, from the seeded draw, when a
client is sampled: a client that drops out is never started and never reports, so
the round time is that of the slowest surviving client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hybrid import Payload, Scheduler, Step, TrainLocally, Update, Verdict
from hybrid.clients import clients_per_round
from hybrid.scheduler_settings import FedAvgSettings

MAX_EMPTY_ROUNDS = 10_000
"""Rounds in a row in which nobody took part (all unavailable or dropped out) before the
scheduler gives up: only a near-certain dropout or near-zero availability gets there."""


class FedAvg(Scheduler):
    Settings = FedAvgSettings
    task_kind = TrainLocally
    staleness_unit = "rounds"

    def __init__(self, workers: int, settings: FedAvgSettings | None = None) -> None:
        """``workers``: the K clients (or the workers, without edge clients). The round's
        draws come from ``self.rng``, the run's seeded scheduler stream (``bind``)."""
        super().__init__(workers)
        settings = settings or FedAvgSettings()
        self.dropout = _per_client("client_dropout", settings.client_dropout, workers)
        self.availability = _per_client(
            "client_availability", settings.client_availability, workers
        )
        self.per_round = clients_per_round(settings.client_fraction, workers)
        self.deadline_s = settings.round_deadline_s
        self.late_policy = settings.late_policy

        self.round_open = False
        self.pending: set[int] = set()
        """Clients of the open round that have not reported."""
        self.round_version = 0
        self.round_closes_s = 0.0
        """Latest arrival seen in the open round: when it closes."""
        self.counts = dict.fromkeys(
            ("rounds", "empty_rounds", "sampled", "dropouts", "late_dropped", "late_admitted"),
            0,
        )
        self.late_staleness = 0

    # -- the protocol ------------------------------------------------------------------------

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        if self.round_open:
            # A pending client can only be idle if its task was lost (a parallel runtime
            # restarted its worker): start it again from the round's parameters.
            return sorted(w for w in idle if w in self.pending)
        if not idle:
            return []
        for _ in range(MAX_EMPTY_ROUNDS):
            survivors = self._sample_round(idle)
            if survivors:
                self.round_open = True
                self.pending = set(survivors)
                self.round_version = version
                self.round_closes_s = 0.0
                self.counts["rounds"] += 1
                return survivors
            self.counts["empty_rounds"] += 1
        raise RuntimeError(
            f"fedavg: no client took part in {MAX_EMPTY_ROUNDS} rounds in a row; "
            "client_dropout is too high or client_availability too low"
        )

    def admit(self, update: Update, staleness: int) -> Verdict:
        if update.kind != Payload.DELTA:
            # Applying a gradient as a model difference with lr 1 would wreck the model.
            raise RuntimeError(
                f"fedavg got a {update.kind!r} update from worker {update.worker_id}: the "
                "runtime must pass the snapshot's task ('delta') on to its workers"
            )
        self.pending.discard(update.worker_id)
        self.round_closes_s = max(self.round_closes_s, self._arrival_s(update))
        if self._late(update):
            if self.late_policy == "drop":
                self.counts["late_dropped"] += 1
                return Verdict.DROP
            # Kept in the buffer (so checkpoints hold it) until a round closes after it
            # truly arrives: combine() leaves it there until then.
            self.buffer.append((update, staleness))
            return Verdict.BUFFER
        return super().admit(update, staleness)

    def reject(self, update: Update) -> Verdict:
        self.pending.discard(update.worker_id)  # the round closes without it
        return Verdict.DROP

    def full(self) -> bool:
        return self.round_open and not self.pending

    def combine(self) -> Step | None:
        self.round_open = False
        # What had arrived when the round closed: every on-time Δ of this round, and late
        # ones (admit) that finished by then. Later ones wait for a later round.
        arrived = [u for u, _ in self.buffer if u.finished_s <= self.round_closes_s]
        waiting = [(u, s) for u, s in self.buffer if u.finished_s > self.round_closes_s]
        self.buffer = []
        for update in arrived:
            # Applied now, at the round's version: its staleness in versions.
            staleness = self.round_version - update.base_version
            self.buffer.append((update, staleness))
            if self._late(update):
                self.counts["late_admitted"] += 1
                self.late_staleness += staleness
        step = super().combine()
        self.buffer = waiting
        if step is not None:
            step.clip = False  # a model difference; the clients clipped their gradients
        return step

    def metrics(self) -> dict[str, float]:
        """Cumulative round counters for the training rows and the summary."""
        row: dict[str, float] = {f"sched/{name}": value for name, value in self.counts.items()}
        row["sched/late_held"] = sum(self._late(u) for u, _ in self.buffer)
        if self.counts["late_admitted"]:
            row["sched/late_staleness_mean"] = self.late_staleness / self.counts["late_admitted"]
        return row

    def state_dict(self) -> dict[str, Any]:
        # self.rng is not here: the loop saves it with every scheduler's
        return {
            "round_open": self.round_open,
            "pending": sorted(self.pending),
            "round_version": self.round_version,
            "round_closes_s": self.round_closes_s,
            "counts": dict(self.counts),
            "late_staleness": self.late_staleness,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_open = bool(state["round_open"])
        self.pending = {int(w) for w in state["pending"]}
        self.round_version = int(state["round_version"])
        self.round_closes_s = float(state["round_closes_s"])
        self.counts = {name: int(value) for name, value in state["counts"].items()}
        self.late_staleness = int(state["late_staleness"])

    # -- internals ---------------------------------------------------------------------------

    def _sample_round(self, idle: Sequence[int]) -> list[int]:
        """One round's draw: who is available, who is sampled, who does not drop out."""
        candidates = np.asarray(sorted(idle), dtype=np.int64)
        if (self.availability < 1).any():
            reachable = self.rng.random(len(candidates)) < self.availability[candidates]
            candidates = candidates[reachable]
        if len(candidates) == 0:
            return []
        chosen = self.rng.choice(
            candidates, size=min(self.per_round, len(candidates)), replace=False
        )
        chosen.sort()
        self.counts["sampled"] += len(chosen)
        if (self.dropout > 0).any():
            stays = self.rng.random(len(chosen)) >= self.dropout[chosen]
            self.counts["dropouts"] += int((~stays).sum())
            chosen = chosen[stays]
        return [int(c) for c in chosen]

    def _late(self, update: Update) -> bool:
        return self.deadline_s > 0 and update.cost_s > self.deadline_s

    def _arrival_s(self, update: Update) -> float:
        """When the server had this update, or stopped waiting for it."""
        if self.deadline_s > 0:
            return min(update.finished_s, update.started_s + self.deadline_s)
        return update.finished_s


def _per_client(name: str, value: float | Sequence[float], clients: int) -> np.ndarray:
    values = np.asarray(value, dtype=np.float64)
    if values.ndim == 0:
        return np.full(clients, float(values))
    if values.shape != (clients,):
        raise ValueError(f"{name}: expected one value or {clients}, got {values.shape[0]}")
    return values.copy()
