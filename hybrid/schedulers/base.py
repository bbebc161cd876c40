"""The scheduler protocol: a pure policy over hand-made or real ``Update``s.

A scheduler decides who may start a task (``ready``), what happens to an
arriving update (``admit``), when the buffered updates become a step
(``full``) and how they combine (``combine``). It does no I/O and owns no
threads or processes, so it can be unit-tested with hand-made updates.

Writing your own (the contract; ``hybrid.register_scheduler`` or
``--scheduler module:Class`` makes it usable like a built-in one):

- subclass ``Scheduler``; implement ``ready`` and ``full``, and override ``admit``,
  ``reject`` and ``combine`` where the default (buffer everything, sample-weighted
  mean) is not your rule;
- declare your hyperparameters as a dataclass in the class attribute ``Settings``:
  the constructor is then ``__init__(self, workers, settings)``, and the values come
  from ``TrainConfig.scheduler_args`` (Python, ``--scheduler-arg key=value``, sweep
  YAML parameters ``scheduler_arg.KEY``), type-checked against the dataclass;
- say what workers do (``task_kind``: ``ComputeGradient``, ``TrainLocally`` for local
  training of ``local_steps`` steps sending Δ, or ``CollectExperience`` for a learner,
  from ``hybrid.protocol``), whether every update is
  applied alone on arrival (``applies_alone``: then the processes runtime may let
  workers apply it themselves, Hogwild!) and the unit of staleness;
- ``ready`` may hand a worker its own task settings, returning ``(id, {"steps": 20})``
  instead of the id (per-client local steps or learning rate: FedNova's varying steps);
- you may read the global parameters through ``self.model`` (``params``, ``version``;
  bound by the loop before the first ``ready``) and keep copies of them, and draw from
  ``self.rng`` (seeded from the run's seed, saved in checkpoints); you may not
  write them, step an optimizer, do I/O, start threads or processes, or import a
  runtime: the loop applies what ``combine`` returns, on every runtime alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from hybrid.protocol import (
    TASK_KINDS,
    CollectExperience,
    ComputeGradient,
    Payload,
    Step,
    Task,
    TrainLocally,
    Update,
    Verdict,
)
from hybrid.schedulers.aggregate import weighted_mean


class ModelView(Protocol):
    """What a scheduler may read of the global model (never write)."""

    @property
    def params(self) -> torch.Tensor: ...
    @property
    def version(self) -> int: ...


class Scheduler(ABC):
    Settings: ClassVar[type | None] = None
    """The dataclass of this scheduler's own hyperparameters (``TrainConfig.scheduler_args``);
    None: it takes none. Built-in schedulers take theirs as TrainConfig fields, which the
    assembly packs into their own small settings (``BoundedSettings``...)."""
    model: ModelView | None = None
    """The global model, read-only (``bind``): for rules that need θ, e.g. delay compensation."""
    rng: np.random.Generator
    """The scheduler's own random stream (``bind``), e.g. to sample clients."""
    task_kind: ClassVar[type[Task]] = ComputeGradient
    """What workers are asked to do: ``ComputeGradient``, ``TrainLocally`` (``local_steps``
    steps, sending Δ) or ``CollectExperience`` (for a learner). The loop fills in the
    task's settings from the run's config."""
    staleness_unit: ClassVar[str] = "updates"
    """The name of one unit of staleness τ under this scheduler. A unit is always one step
    applied to θ (one version); the name says what that step is made of: ``updates`` (one
    worker's update applied alone: async, bounded), ``rounds`` (a round's updates combined:
    sync, fedavg), ``server steps`` (a buffer of updates combined: FedBuff) or ``learner
    steps`` (hybrid). summary.json reports it as ``staleness_unit``; docs/concepts.md
    (Staleness units) is the table."""
    applies_alone: ClassVar[bool] = False
    """Every admitted update becomes a step of its own at the full learning rate, the moment
    it arrives. Then a worker may take that step itself on shared parameters (Hogwild!):
    the processes runtime lets it when ``lock_free`` is on and no codec is in the way."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers: {workers} is too small; it must be >= 1")
        self.workers = workers
        self.buffer: list[tuple[Update, int]] = []

    def bind(self, model: ModelView, rng: np.random.Generator) -> None:
        """Called by the loop once, before the first ``ready``: the global model to read and
        a random stream of the scheduler's own (seeded from the run's seed, checkpointed)."""
        self.model = model
        self.rng = rng

    @abstractmethod
    def ready(
        self, idle: Sequence[int], version: int
    ) -> Sequence[int | tuple[int, Mapping[str, Any]]]:
        """Of the ``idle`` workers, those that start a task now from ``version``.

        A worker is named by its id, or by ``(id, settings)``: then its task runs with those
        of the task's fields replaced (``{"steps": 20, "lr": 0.01}`` for ``TrainLocally``:
        local steps and learning rate), as Flower's ``configure_fit`` configures each
        client. The worker applies them; ``spans.jsonl`` records them as ``task``."""

    def admit(self, update: Update, staleness: int) -> Verdict:
        self.buffer.append((update, staleness))
        return Verdict.BUFFER

    def reject(self, update: Update) -> Verdict:
        """An update that arrived but must not be applied (corrupt, non-finite).

        The task still happened, so clocks and rounds move on as if it had been
        dropped: a round that waited for it closes without it.
        """
        del update
        return Verdict.DROP

    @abstractmethod
    def full(self) -> bool:
        """Whether the buffered updates are to be combined into a step now."""

    def combine(self) -> Step | None:
        """Sample-weighted mean of the buffered payloads (None if nothing survived)."""
        updates = [u for u, _ in self.buffer]
        self.buffer.clear()
        if not updates:
            return None
        if len(updates) == 1:  # async's every step: the payload is its own mean, uncopied
            direction = updates[0].payload
        else:
            direction = weighted_mean([u.payload for u in updates], [u.weight for u in updates])
        # A model difference (fedavg's or PPO's Δ) is not a gradient: bounding its norm by
        # max_grad_norm would cap how far one round may move. Workers clip their own gradients.
        return Step(direction, clip=any(u.kind != Payload.DELTA for u in updates), updates=updates)

    def finished(self) -> bool:
        """True once this scheduler starts no more tasks before the env-step budget is spent
        (e.g. DP-FedAvg at its target ε): the loop then ends the run when ``ready`` starts
        nobody."""
        return False

    def metrics(self) -> dict[str, float]:
        """Cumulative counters (``sched/...``) for the training rows and the summary."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


__all__ = [
    "TASK_KINDS",
    "CollectExperience",
    "ComputeGradient",
    "ModelView",
    "Scheduler",
    "Step",
    "TrainLocally",
    "Update",
    "Verdict",
]
