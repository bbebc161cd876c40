"""``async``: A3C / Hogwild!. Every update is applied the moment it arrives."""

from __future__ import annotations

from collections.abc import Sequence

from hybrid.schedulers.base import Scheduler


class Async(Scheduler):
    applies_alone = True

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        return list(idle)

    def full(self) -> bool:
        return bool(self.buffer)
