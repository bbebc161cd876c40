"""``sync``: A2C. Every worker starts from the same version; one averaged step per round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybrid.core.global_model import Step
from hybrid.schedulers.base import Scheduler


class Sync(Scheduler):
    name = "sync"

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.round_open = False

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        if self.round_open or len(idle) < self.workers:
            return []
        self.round_open = True
        return sorted(idle)

    def full(self) -> bool:
        return len(self.buffer) == self.workers

    def combine(self) -> Step:
        self.round_open = False
        return super().combine()

    def state_dict(self) -> dict[str, Any]:
        return {"round_open": self.round_open}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_open = bool(state["round_open"])
