"""What the decentralized schedulers (``gossip``, ``ad-psgd``, ``sgp``) share.

They run on replicas, one per worker, instead of one θ: their steps are ``MixingStep``s,
which the loop applies through ``hybrid.replicas.ReplicaApplier`` (each listed update steps
its own worker's replica, then the replicas mix). Like every scheduler they only decide:
they read no replica and write none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from hybrid.errors import ConfigError
from hybrid.protocol import Step, Update
from hybrid.schedulers.base import Scheduler, Verdict


@dataclass
class MixingStep(Step):
    """Local steps, then a mix of the replicas.

    ``updates`` are stepped on their own worker's replica (``Update.worker_id``) with that
    replica's optimizer; ``mixing`` is the K×K matrix P of X ← P X (None: no mix). A row
    of P equal to the identity's leaves that replica untouched (AD-PSGD mixes one pair)."""

    mixing: np.ndarray | None = None
    push_sum: bool = False
    """Keep push-sum weights w ← P w and de-bias the replicas (z = x / w): for a P that is
    column- but not row-stochastic, or any P under a delay."""
    delay: int = 0
    """Mixes before the mass a replica sends to another arrives (0: at once)."""
    mix_first: bool = False
    """Mix, then step each listed replica along its direction (computed at the replica as
    read before the mix): AD-PSGD's order, and D-PSGD's as Lian et al. write it. False:
    step, then mix (adapt-then-combine; SGP's order, and all-reduce's on the complete
    graph)."""
    pairs: list[tuple[int, int]] = field(default_factory=list)
    """AD-PSGD: (worker, the neighbour it averages with) for each of ``updates``, in order;
    ``mixing`` is their product. A runtime whose workers share the replicas has each worker
    do its own pair (``hybrid.runtimes.shared_replicas``); the timeline records them."""


class ReplicaScheduler(Scheduler):
    """Base of the decentralized schedulers: one replica per worker, ``MixingStep``s."""

    replicas: ClassVar[bool] = True
    """The loop keeps one replica per worker (``hybrid.replicas.ReplicaApplier``)."""
    evaluate_replicas: bool = False
    """The loop evaluates every replica at the end, besides their average."""
    pair_lock: bool = True
    """Where workers share the replicas (processes): a worker reads its replica, and
    AD-PSGD's pair update runs, holding the rows' locks; False: lock-free (AD-PSGD's
    ``pair_lock`` setting)."""
    push_sum: ClassVar[bool] = False
    """Its steps keep push-sum weights or delays (sgp): the ray runtime then leaves the
    replicas with the loop instead of its actors."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        if workers < 2:
            raise ConfigError(
                f"workers: decentralized training needs at least 2 replicas to mix; got {workers}"
            )
        self.spectral_gap = 0.0
        """1 − |λ₂| of the mixing matrix (of one period of a time-varying one)."""

    def describe(self) -> str:
        """One line for the console when the run starts."""
        return f"{self.workers} replicas, spectral gap {self.spectral_gap:.4f}"

    def metrics(self) -> dict[str, float]:
        return {"sched/spectral_gap": self.spectral_gap}


class RoundReplicas(ReplicaScheduler):
    """Synchronous rounds, as ``sync``'s: every replica takes its local step from its own
    read of the same round, then all mix at once (``mixing``)."""

    staleness_unit = "rounds"

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.round_open = False
        self.pending: set[int] = set()
        self.rounds = 0

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        if self.round_open:
            # a pending worker is idle only if its task was lost: start it again
            return sorted(w for w in idle if w in self.pending)
        if len(idle) < self.workers:
            return []
        self.round_open = True
        self.pending = set(idle)
        return sorted(idle)

    def admit(self, update: Update, staleness: int) -> Verdict:
        self.pending.discard(update.worker_id)
        return super().admit(update, staleness)

    def reject(self, update: Update) -> Verdict:
        self.pending.discard(update.worker_id)  # its replica still mixes, unstepped
        return Verdict.DROP

    def full(self) -> bool:
        return self.round_open and not self.pending

    def mixing(self, round_index: int) -> MixingStep:
        """The round's mix (its ``updates`` are filled in by ``combine``)."""
        raise NotImplementedError

    def combine(self) -> Step | None:
        self.round_open = False
        step = self.mixing(self.rounds)
        step.updates = [update for update, _ in self.buffer]
        self.buffer.clear()
        self.rounds += 1
        return step

    def state_dict(self) -> dict[str, Any]:
        return {
            "round_open": self.round_open,
            "pending": sorted(self.pending),
            "rounds": self.rounds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_open = bool(state["round_open"])
        self.pending = {int(w) for w in state["pending"]}
        self.rounds = int(state["rounds"])


__all__ = ["MixingStep", "ReplicaScheduler", "RoundReplicas"]
