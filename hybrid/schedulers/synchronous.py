"""``sync``: A2C. Every worker starts from the same version; one averaged step per round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybrid import ComputeGradient, Scheduler, Step, Update, Verdict
from hybrid.scheduler_settings import SyncSettings


class Sync(Scheduler):
    Settings = SyncSettings
    task_kind = ComputeGradient
    staleness_unit = "rounds"

    def __init__(self, workers: int, settings: SyncSettings | None = None) -> None:
        super().__init__(workers)
        del settings  # none of its own
        self.round_open = False
        self.pending: set[int] = set()
        """Workers of the open round whose update has not arrived."""

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        if self.round_open:
            # A pending worker can only be idle if its task was lost (the worker died
            # and was restarted): start it again from the round's parameters.
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
        self.pending.discard(update.worker_id)  # the round closes without it
        return Verdict.DROP

    def full(self) -> bool:
        return self.round_open and not self.pending

    def combine(self) -> Step | None:
        self.round_open = False
        return super().combine()

    def state_dict(self) -> dict[str, Any]:
        return {"round_open": self.round_open, "pending": sorted(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_open = bool(state["round_open"])
        self.pending = {int(w) for w in state["pending"]}
