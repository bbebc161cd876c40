"""``bounded``: stale synchronous parallel (Ho et al. 2013), updates applied on arrival.

Each worker's clock counts the tasks it has finished. A worker may start
clock c+1 only when every worker has finished clock c−s. ``s=0`` is
bulk-synchronous; an unbounded ``s`` is ``async`` exactly. Optionally the
step is scaled by 1/τ (staleness-aware ASGD, Zhang et al. 2016).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid.protocol import Step, Update
from hybrid.schedulers.base import Scheduler, Verdict


@dataclass(frozen=True)
class BoundedSettings:
    """SSP's own settings (``--staleness-bound``, ``--staleness-aware-lr``)."""

    staleness_bound: int = 4
    staleness_aware_lr: bool = False


class Bounded(Scheduler):
    def __init__(self, workers: int, bound: int, staleness_aware: bool = False) -> None:
        super().__init__(workers)
        if bound < 0:
            raise ValueError(f"staleness_bound: {bound} must be >= 0")
        self.bound = bound
        self.staleness_aware = staleness_aware
        self.clocks = [0] * workers

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        slowest = min(self.clocks)
        return [w for w in idle if self.clocks[w] - slowest <= self.bound]

    def admit(self, update: Update, staleness: int) -> Verdict:
        self.clocks[update.worker_id] += 1
        return super().admit(update, staleness)

    def reject(self, update: Update) -> Verdict:
        self.clocks[update.worker_id] += 1  # the task finished, even if it cannot be applied
        return Verdict.DROP

    def full(self) -> bool:
        return bool(self.buffer)

    def combine(self) -> Step | None:
        staleness = max((s for _, s in self.buffer), default=0)
        step = super().combine()
        if step is not None and self.staleness_aware:
            step.lr_scale = 1.0 / max(1, staleness)
        return step

    def state_dict(self) -> dict[str, Any]:
        return {"clocks": list(self.clocks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clocks = [int(c) for c in state["clocks"]]
