"""Who writes θ: the loop's server (``ServerApplies``) or the workers themselves
(``WorkersApply``, Hogwild!). The runtime picks one; the loop takes its snapshots and
applies its steps through it, so ``GlobalModel`` has one behaviour whoever writes. A
decentralized scheduler's run keeps one replica per worker instead
(``hybrid.replicas.ReplicaApplier``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from hybrid.core.global_model import GlobalModel
from hybrid.protocol import Snapshot, Step, Task


class Applier(Protocol):
    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        """What a dispatched task starts from."""
        ...

    def snapshots(
        self, model: GlobalModel, task: Task, progress: float, worker_ids: Sequence[int]
    ) -> list[tuple[list[int], Snapshot]]:
        """What the tasks of ``worker_ids`` start from, grouped by shared snapshot."""
        ...

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        """Account for one step of the loop; returns the direction's pre-clip norm."""
        ...

    def metrics(self) -> dict[str, float]:
        """Counters for the training rows and the summary."""
        ...

    def optimizer_steps(self, version: int) -> int | None:
        """How many steps the global model's optimizer has taken by ``version``, where this
        applier knows (a resume checks the optimizer's state against it); None: unknown."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class _OneModel:
    """What both one-θ appliers share: every task starts from one snapshot; no state."""

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        raise NotImplementedError

    def snapshots(
        self, model: GlobalModel, task: Task, progress: float, worker_ids: Sequence[int]
    ) -> list[tuple[list[int], Snapshot]]:
        return [(list(worker_ids), self.snapshot(model, task, progress))]

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class ServerApplies(_OneModel):
    """The main process is the one writer: each step goes through the server optimizer, and
    a snapshot is a copy (a task reads it later, after other steps may have changed θ)."""

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        return model.snapshot(task, progress)

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        return model.apply(step, progress)

    def optimizer_steps(self, version: int) -> int | None:
        return version  # each version is one step of the server optimizer


class WorkersApply(_OneModel):
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

    def optimizer_steps(self, version: int) -> int | None:
        # the workers step the shared statistics unlocked: concurrent steps may count once,
        # and a step taken may not have reached the loop's version yet
        return None


SERVER_APPLIES = ServerApplies()
"""The applier of every runtime but Hogwild!'s (the default of a runtime that names none)."""
