"""What a worker sends back after one task."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Snapshot:
    """The global parameters a task starts from, tagged with their version."""

    params: torch.Tensor
    version: int


@dataclass
class Update:
    """One worker task's result.

    ``payload`` is a flat float32 vector: a gradient (``kind="gradient"``), or a
    pseudo-gradient θ_global − θ_local (``kind="delta"``). Staleness is measured
    against ``base_version`` when the update is applied.
    """

    worker_id: int
    base_version: int
    payload: torch.Tensor
    env_steps: int
    kind: str = "gradient"
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    nbytes: int = 0
    cost_s: float = 0.0
    """Seconds the task took: virtual on the serial runtime, real elsewhere."""
    task_index: int = 0
    """How many tasks this worker had finished before this one (its SSP clock)."""

    @property
    def weight(self) -> float:
        """Aggregation weight: the number of samples behind the payload."""
        return float(self.env_steps)
