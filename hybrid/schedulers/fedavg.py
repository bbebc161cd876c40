"""``fedavg``: federated averaging in rounds (FedAvg, FedProx, FedAvgM, FedOpt).

Each round samples m = max(1, floor(C·K)) of the K clients among those idle and
available (a seeded draw), lets the sampled ones that do not drop out run E local
steps from the round's θ, and combines their Δ = θ_global − θ_local into the
sample-weighted mean (McMahan et al. 2017). The server's optimizer applies that
mean as a pseudo-gradient: SGD with lr 1 is FedAvg, with momentum FedAvgM, and
``fedadam`` / ``fedyogi`` / ``fedadagrad`` (``hybrid.fedopt``) are FedOpt (Reddi et al.
2021); torch's ``adam`` is not FedAdam (bias correction, v₀ = 0). FedProx's μ lives in
the client's loss (the worker).

Stragglers: with a deadline, a Δ whose task ran longer than ``deadline_s`` is late
(``cost_s > deadline_s``, one rule for every runtime). The serial runtime hands it over at
the deadline, so the round closes then; processes and ray hand over a stand-in at the
deadline (``Update.overdue``, the worker computing on) and the Δ itself when it comes. The
scheduler drops it (counted once), or under ``late_policy="admit"`` holds it until the
first round that closes after it really arrived and admits it there with its
staleness (asynchronous FL). Dropout is decided here, from the seeded draw, when a
client is sampled: a client that drops out is never started and never reports, so
the round time is that of the slowest surviving client.

Hostile and private rounds (``AggregationSettings``, ``PrivacySettings``): the server may
combine the round's Δs with a robust rule instead of the mean (``hybrid.aggregation``:
median, trimmed mean, Krum, Multi-Krum, norm bounding), or run DP-FedAvg (``hybrid.privacy``:
clip, sum, Gaussian noise, fixed denominator, with ε from ``dp-accounting``; a run can stop
before a round would pass a target ε). With both off, a round is combined exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hybrid import Payload, Scheduler, Step, TrainLocally, Update, Verdict
from hybrid.aggregation import aggregate
from hybrid.clients import clients_per_round
from hybrid.privacy import DpFedAvg
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
        self.told_late: set[int] = set()
        """Clients whose deadline a real runtime reported passed (``Update.overdue``), their
        Δ not yet here. Not checkpointed: a resumed real runtime starts with no task in flight."""
        self._init_hostile_rounds(workers, settings)
        self.trace = settings.trace
        self.trace_wait_s = 0.0
        """Trace seconds spent waiting for a client to come online (not on the runtime's clock)."""
        self.trace_round_start_s = 0.0
        self.trace_left = 0

    # -- the protocol ------------------------------------------------------------------------

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        if self.round_open:
            # A pending client can only be idle if its task was lost (a parallel runtime
            # restarted its worker): start it again from the round's parameters.
            return sorted(w for w in idle if w in self.pending)
        if not idle or self.finished():
            return []
        for _ in range(MAX_EMPTY_ROUNDS):
            survivors = self._sample_round(idle)
            self._count_private_round()
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
        if update.overdue:  # late by the rule below: its cost_s is past the deadline
            # A real runtime's word at the deadline: the round closes without this client,
            # whose Δ comes later. The late policy is applied (and counted) now, as on the clock.
            self.told_late.add(update.worker_id)
            if self.late_policy == "drop":
                self.counts["late_dropped"] += 1
            return Verdict.DROP  # nothing to hold yet: under admit, the Δ is held on arrival
        if update.worker_id in self.told_late:
            self.told_late.discard(update.worker_id)
            if self.late_policy == "drop":
                return Verdict.DROP  # counted when its deadline passed
        if self.trace is not None and self._went_offline(update):
            self.trace_left += 1
            return Verdict.DROP
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
        step = self._combine_hostile() if self.hostile_combine else super().combine()
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
        if self.trace is not None:
            row["sched/trace_wait_s"] = self.trace_wait_s
            row["sched/trace_left"] = self.trace_left
        return row | self._hostile_metrics()

    def state_dict(self) -> dict[str, Any]:
        # self.rng is not here: the loop saves it with every scheduler's
        return {
            "round_open": self.round_open,
            "pending": sorted(self.pending),
            "round_version": self.round_version,
            "round_closes_s": self.round_closes_s,
            "counts": dict(self.counts),
            "late_staleness": self.late_staleness,
            **self._hostile_state(),
            **(
                {"trace": [self.trace_wait_s, self.trace_round_start_s, self.trace_left]}
                if self.trace is not None
                else {}
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_open = bool(state["round_open"])
        self.pending = {int(w) for w in state["pending"]}
        self.round_version = int(state["round_version"])
        self.round_closes_s = float(state["round_closes_s"])
        self.counts = {name: int(value) for name, value in state["counts"].items()}
        self.late_staleness = int(state["late_staleness"])
        self._load_hostile_state(state)
        if "trace" in state:
            wait, start, left = state["trace"]
            self.trace_wait_s, self.trace_round_start_s, self.trace_left = wait, start, int(left)

    # -- internals ---------------------------------------------------------------------------

    def _sample_round(self, idle: Sequence[int]) -> list[int]:
        """One round's draw: who is available, who is sampled, who does not drop out."""
        candidates = np.asarray(sorted(idle), dtype=np.int64)
        if (self.availability < 1).any():
            reachable = self.rng.random(len(candidates)) < self.availability[candidates]
            candidates = candidates[reachable]
        if self.trace is not None:
            candidates = self._online(candidates)
        if len(candidates) == 0:
            return []
        if self.privacy.enabled and self.privacy.sampling == "poisson":
            # DP-FedAvg's Poisson sampling: each client independently, q = m / K
            taken = self.rng.random(len(candidates)) < self.per_round / self.workers
            chosen = candidates[taken]
        else:
            chosen = self.rng.choice(
                candidates, size=min(self.per_round, len(candidates)), replace=False
            )
        chosen.sort()
        self.byzantine_sampled += int(self.attacker_mask[chosen].sum())
        self.counts["sampled"] += len(chosen)
        if (self.dropout > 0).any():
            stays = self.rng.random(len(chosen)) >= self.dropout[chosen]
            self.counts["dropouts"] += int((~stays).sum())
            chosen = chosen[stays]
        return [int(c) for c in chosen]

    # -- hostile and private rounds: robust aggregation, Byzantine counts, DP-FedAvg ------------

    def _init_hostile_rounds(self, clients: int, settings: FedAvgSettings) -> None:
        self.aggregation = settings.aggregation
        self.privacy = settings.privacy
        if self.privacy.enabled and not self.aggregation.is_plain_mean:
            raise ValueError("dp_clip: DP-FedAvg aggregates with the mean; leave aggregator mean")
        self.aggregation.check_clients(self.per_round)
        self.privacy.check_round(clients, self.per_round)
        self.attacker_mask = np.zeros(clients, dtype=bool)
        self.attacker_mask[list(settings.byzantine_clients)] = True
        self.byzantine_sampled = 0
        self.byzantine_received = 0
        self.dp: DpFedAvg | None = None
        if self.privacy.enabled:
            # its own stream, seeded by the assembly from the run's seed (hybrid.seeding)
            generator = torch.Generator().manual_seed(settings.dp_noise_seed)
            self.dp = DpFedAvg(self.privacy, clients, self.per_round, generator)
        self.hostile_combine = self.dp is not None or not self.aggregation.is_plain_mean

    def finished(self) -> bool:
        """True once another round would spend more privacy than the target ε allows."""
        return self.dp is not None and not self.dp.accountant.allows_another_round()

    def _count_private_round(self) -> None:
        # Every draw is a release of DP-FedAvg, also one that sampled nobody (Poisson): the
        # accountant charges it, which can only overstate ε.
        if self.dp is not None:
            self.dp.accountant.rounds += 1

    def _combine_hostile(self) -> Step | None:
        """The round's buffered Δs under the robust rule, or DP-FedAvg's noised mean."""
        updates = [u for u, _ in self.buffer]
        self.buffer.clear()
        if not updates:
            return None
        self.byzantine_received += sum(bool(self.attacker_mask[u.worker_id]) for u in updates)
        deltas = torch.stack([u.payload for u in updates])
        if self.dp is not None:
            direction = self.dp.aggregate(deltas)
        else:
            direction = aggregate(deltas, [u.weight for u in updates], self.aggregation)
        return Step(direction, clip=False, updates=updates)

    def _hostile_metrics(self) -> dict[str, float]:
        row: dict[str, float] = {}
        if self.attacker_mask.any():
            row["sched/byzantine_clients"] = int(self.attacker_mask.sum())
            row["sched/byzantine_sampled"] = self.byzantine_sampled
            row["sched/byzantine_received"] = self.byzantine_received
        if self.dp is not None:
            row |= {f"sched/{name}": value for name, value in self.dp.metrics().items()}
            if self.privacy.target_epsilon:
                row["sched/dp_target_epsilon"] = self.privacy.target_epsilon
                row["sched/dp_target_reached"] = float(self.finished())
        return row

    def _hostile_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self.attacker_mask.any():
            state["byzantine"] = [self.byzantine_sampled, self.byzantine_received]
        if self.dp is not None:
            state["dp"] = self.dp.state_dict()
        return state

    def _load_hostile_state(self, state: dict[str, Any]) -> None:
        if "byzantine" in state:
            self.byzantine_sampled, self.byzantine_received = map(int, state["byzantine"])
        if self.dp is not None and "dp" in state:
            self.dp.load_state_dict(state["dp"])

    # -- trace-driven availability (hybrid.traces) ------------------------------------------

    def _online(self, candidates: np.ndarray) -> np.ndarray:
        """The candidates online when this round starts on the trace's clock: the runtime's
        time at the last round's close plus the waits so far. When none is, the round waits
        (on the trace's clock only) for the first to come online."""
        assert self.trace is not None
        now = self.round_closes_s + self.trace_wait_s
        online = [c for c in candidates if self.trace.available(int(c), now)]
        if not online:
            start = min(self.trace.next_online(int(c), now) for c in candidates)
            if start == float("inf"):
                return candidates[:0]
            self.trace_wait_s += start - now
            now = start
            online = [c for c in candidates if self.trace.available(int(c), now)]
        self.trace_round_start_s = now
        return np.asarray(online, dtype=np.int64)

    def _went_offline(self, update: Update) -> bool:
        """Whether the client's interval ended before its upload did (FedScale's dropout)."""
        assert self.trace is not None
        until = self.trace.online_until(update.worker_id, self.trace_round_start_s)
        return self.trace_round_start_s + update.cost_s > until

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
