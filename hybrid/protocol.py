"""The words every component speaks: tasks, snapshots, updates, steps and verdicts.

A scheduler asks workers to do a ``Task`` (typed: compute a gradient, act and send
experience, or train locally); a worker answers a ``Snapshot`` with an ``Update``
whose payload is of a ``Payload`` kind; the scheduler turns what it admitted
(``Verdict``) into a ``Step`` that the loop applies. This module imports nothing of
hybrid's, so schedulers, workers, runtimes and the loop can all depend on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import torch


class Payload(str, enum.Enum):
    """What an update carries (a str enum: it compares equal to its value)."""

    GRADIENT = "gradient"
    """The gradient of the algorithm's loss at the snapshot's θ: a direction to descend."""
    DELTA = "delta"
    """A pseudo-gradient θ_snapshot − θ_local after local optimizer steps (PPO's epochs,
    a federated client's round): also a direction, but a model difference, not clipped
    like a gradient."""
    TRAJECTORY = "trajectory"
    """Experience for a learner (a rollout, or n-step transitions with priorities)."""


@dataclass(frozen=True)
class ComputeGradient:
    """Collect a fresh rollout and send the direction the algorithm computes from it (its
    loss's gradient; PPO, whose epochs run on the worker, sends their Δ)."""

    deadline_s: float = 0.0
    """Seconds after the start when the server stops waiting (0: none)."""
    rollout_steps: int = 0
    """Env steps per env of the rollout (0: the run's ``--rollout-steps``)."""

    def __post_init__(self) -> None:
        _check_rollout_steps(self.rollout_steps)


@dataclass(frozen=True)
class CollectExperience:
    """Act with the snapshot's policy and send the experience to a learner."""

    deadline_s: float = 0.0


@dataclass(frozen=True)
class TrainLocally:
    """Take ``steps`` local optimizer steps from the snapshot's θ, each on a fresh rollout,
    and send Δ = θ_snapshot − θ_local (a federated client's round)."""

    steps: int = 1
    optimizer: str = "adam"
    """sgd or adam, fresh for every task."""
    lr: float = 1e-3
    prox_mu: float = 0.0
    """FedProx: the client minimizes its loss + μ/2 ‖θ − θ_snapshot‖²."""
    deadline_s: float = 0.0
    rollout_steps: int = 0
    """Env steps per env of each local step's rollout (0: the run's ``--rollout-steps``)."""

    def __post_init__(self) -> None:
        _check_rollout_steps(self.rollout_steps)


def _check_rollout_steps(rollout_steps: int) -> None:
    # A scheduler sets it per task (ready's settings): its mistake is said in one line.
    if rollout_steps < 0:
        raise ValueError(
            f"rollout_steps={rollout_steps} must be >= 1, or 0 for the run's --rollout-steps"
        )


Task: TypeAlias = ComputeGradient | CollectExperience | TrainLocally
TASK_KINDS: tuple[type, ...] = (ComputeGradient, CollectExperience, TrainLocally)


@dataclass
class Snapshot:
    """The global parameters a task starts from, tagged with their version."""

    params: torch.Tensor
    version: int
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Other server state a task reads, e.g. ``target`` (a Q-learning target network)."""
    task: Task = field(default_factory=ComputeGradient)
    """What the worker must do."""
    progress: float = 0.0
    """How much of the env-step budget had been spent (0..1): the learning-rate schedule's
    input, for workers that step the shared optimizer themselves (Hogwild!)."""


@dataclass
class Update:
    """One worker task's result.

    ``payload`` is a flat float32 vector for a gradient or a Δ (under a compressing codec
    it travels as the encoded ``bytes`` and is decoded on arrival), or a learner's
    experience (``kind`` TRAJECTORY). Staleness τ is the number of updates applied to θ
    between the worker's read (``base_version``) and this update's own apply: the loop
    measures it when it applies the update, unless a worker applied it itself
    (``staleness``).
    """

    worker_id: int
    base_version: int
    payload: torch.Tensor | bytes | Any
    env_steps: int
    kind: Payload = Payload.GRADIENT
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
    task_settings: dict[str, Any] | None = None
    """The task's settings the scheduler chose for this worker (``ready`` returned
    ``(worker id, settings)``), set by the loop on arrival; None: the run's own."""
    overdue: bool = False
    """A stand-in, not a result: a real runtime hands it over when the task's ``deadline_s``
    has passed and the worker is still computing (payload None, ``cost_s`` the seconds waited,
    more than ``deadline_s``). The task's own update follows when the worker finishes."""
    held_s: float = 0.0
    """Seconds a real runtime held the finished result back to emulate the client's traced
    speed and links (``client_trace``); part of ``cost_s``."""

    @property
    def finished_s(self) -> float:
        return self.started_s + self.cost_s

    @property
    def weight(self) -> float:
        """Aggregation weight: the number of samples behind the payload."""
        return float(self.env_steps)


@dataclass
class Step:
    """What a scheduler hands on: a direction to descend (a combined gradient or
    pseudo-gradient) and its step-size scale, or a batch of trajectories that a
    learner turns into directions."""

    direction: torch.Tensor | None = None
    lr_scale: float = 1.0
    batch: list[Any] | None = None
    """Trajectory payloads (actor-learner schedulers); ``direction`` is then None."""
    lags: list[int] | None = None
    """Policy lag of each trajectory in ``batch``, in versions."""
    clip: bool = True
    """Clip ``direction`` to ``max_grad_norm``. False for a model difference (fedavg's Δ):
    a gradient-norm bound would cap how far a round may move; clients clip their gradients."""
    updates: list[Update] = field(default_factory=list)
    """The updates combined into this step: the loop measures their staleness when it
    applies the step (one definition for every scheduler and runtime)."""


class Verdict(enum.Enum):
    """What a scheduler decided about an arriving update."""

    BUFFER = "buffer"
    """Kept until the next ``combine``."""
    DROP = "drop"
    """Discarded (counted as ``sched/dropped``)."""


__all__ = [
    "TASK_KINDS",
    "CollectExperience",
    "ComputeGradient",
    "Payload",
    "Snapshot",
    "Step",
    "Task",
    "TrainLocally",
    "Update",
    "Verdict",
]
