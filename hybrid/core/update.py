"""What a worker sends back after one task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Snapshot:
    """The global parameters a task starts from, tagged with their version."""

    params: torch.Tensor
    version: int
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Other server state a task reads, e.g. ``target`` (a Q-learning target network)."""
    task: str = "gradient"
    """What the worker must send back: the scheduler's ``payload_kind``."""
    progress: float = 0.0
    """How much of the env-step budget had been spent (0..1): the learning-rate schedule's
    input, for workers that step the shared optimizer themselves (Hogwild!)."""


@dataclass
class Update:
    """One worker task's result.

    ``payload`` is a flat float32 vector: a gradient (``kind="gradient"``), or a
    pseudo-gradient θ_global − θ_local (``kind="delta"``). Under a compressing
    codec it travels as the encoded ``bytes`` and is decoded on arrival.
    Staleness τ is the number of updates applied to θ between the worker's read
    (``base_version``) and this update's own apply: the loop measures it when it
    applies the update, unless a worker applied it itself (``staleness``).
    """

    worker_id: int
    base_version: int
    payload: torch.Tensor | bytes | Any
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
    started_s: float = 0.0
    """When the task started, on the runtime's clock (virtual or seconds since the run began)."""
    upload_s: float = 0.0
    """Of ``cost_s``, the time spent sending the payload."""
    obs_stats: dict[str, Any] | None = None
    """Summary (count, mean, M2) of the raw observations of this task, with normalize_obs:
    the global model merges it on arrival (hybrid/normalization.py)."""
    staleness: int | None = None
    """τ measured where the update was applied, when that was not the loop: a Hogwild!
    worker steps the shared θ itself and counts the applies between its read and its own.
    None: the loop measures τ as its version at apply − ``base_version``."""

    @property
    def finished_s(self) -> float:
        return self.started_s + self.cost_s

    @property
    def weight(self) -> float:
        """Aggregation weight: the number of samples behind the payload."""
        return float(self.env_steps)
