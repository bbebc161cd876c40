"""``bounded``: stale synchronous parallel (Ho et al. 2013), updates applied on arrival.

Each worker's clock counts the tasks it has finished. A worker may start
clock c+1 only when every worker has finished clock c−s. ``s=0`` is
bulk-synchronous; an unbounded ``s`` is ``async`` exactly. Optionally the
step is scaled by 1/τ (staleness-aware ASGD, Zhang et al. 2016).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybrid import ComputeGradient, Scheduler, Step, Update, Verdict
from hybrid.scheduler_settings import BoundedSettings


class Bounded(Scheduler):
    Settings = BoundedSettings
    task_kind = ComputeGradient
    staleness_unit = "updates"

    def __init__(self, workers: int, settings: BoundedSettings | None = None) -> None:
        super().__init__(workers)
        settings = settings or BoundedSettings()
        self.bound = settings.staleness_bound
        self.staleness_aware = settings.staleness_aware_lr
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
