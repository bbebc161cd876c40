"""Who writes θ: the loop's server (``ServerApplies``) or the workers themselves
(``WorkersApply``, Hogwild!). The runtime picks one; the loop takes its snapshots and
applies its steps through it, so ``GlobalModel`` has one behaviour whoever writes.
"""

from __future__ import annotations

from typing import Protocol

import torch

from hybrid.core.global_model import GlobalModel
from hybrid.protocol import Snapshot, Step, Task


class Applier(Protocol):
    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        """What a dispatched task starts from."""
        ...

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        """Account for one step of the loop; returns the direction's pre-clip norm."""
        ...


class ServerApplies:
    """The main process is the one writer: each step goes through the server optimizer, and
    a snapshot is a copy (a task reads it later, after other steps may have changed θ)."""

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        return model.snapshot(task, progress)

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        return model.apply(step, progress)


class WorkersApply:
    """Hogwild!: every worker has already stepped the shared θ (with the shared optimizer
    statistics) by the time the loop sees its update, so the loop only counts the version.

    A snapshot holds the live θ, uncopied: workers read the shared θ, unlocked, when they
    start, so a copy taken here would be read by nobody.
    """

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        return model.snapshot(task, progress, copy=False)

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        if step.direction is None:
            raise ValueError("a Step without a direction must go through a learner first")
        model.count_version()
        return float(torch.linalg.vector_norm(step.direction))


SERVER_APPLIES = ServerApplies()
"""The applier of every runtime but Hogwild!'s (the default of a runtime that names none)."""
