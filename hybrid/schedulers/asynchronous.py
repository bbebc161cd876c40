"""``async``: A3C / Hogwild!. Every update is applied the moment it arrives."""

from __future__ import annotations

from collections.abc import Sequence

from hybrid import ComputeGradient, Scheduler
from hybrid.scheduler_settings import AsyncSettings


class Async(Scheduler):
    Settings = AsyncSettings
    task_kind = ComputeGradient
    staleness_unit = "updates"
    applies_alone = True

    def __init__(self, workers: int, settings: AsyncSettings | None = None) -> None:
        super().__init__(workers)
        del settings  # none of its own

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        return list(idle)

    def full(self) -> bool:
        return bool(self.buffer)
