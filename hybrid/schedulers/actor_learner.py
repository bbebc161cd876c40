"""``hybrid``: asynchronous actors, a synchronous batched learner (IMPALA, GA3C, Ape-X).

Actors never wait: each sends a trajectory as soon as it has one, tagged with the
policy version it acted with. The learner trains on batches of B trajectories;
those whose policy lag exceeds ``max_policy_lag`` are dropped (counted). The lag
itself is corrected by the learner's loss (V-trace) or its replay (Q-learning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hybrid.protocol import CollectExperience, Step, Update
from hybrid.schedulers.base import Scheduler, Verdict


@dataclass(frozen=True)
class ActorLearnerSettings:
    """The actor-learner's own settings (``--learner-batch``, ``--max-policy-lag``)."""

    learner_batch: int = 8
    max_policy_lag: int = 100


class ActorLearner(Scheduler):
    task_kind = CollectExperience
    staleness_unit = "learner steps"

    def __init__(self, workers: int, batch_size: int, max_policy_lag: int) -> None:
        super().__init__(workers)
        if batch_size < 1:
            raise ValueError(f"learner_batch: {batch_size} must be >= 1")
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag: {max_policy_lag} must be >= 0")
        self.batch_size = batch_size
        self.max_policy_lag = max_policy_lag

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        return list(idle)

    def admit(self, update: Update, staleness: int) -> Verdict:
        if staleness > self.max_policy_lag:
            return Verdict.DROP
        return super().admit(update, staleness)

    def full(self) -> bool:
        return len(self.buffer) >= self.batch_size

    def combine(self) -> Step | None:
        if not self.buffer:
            return None
        updates = [u for u, _ in self.buffer]
        lags = [lag for _, lag in self.buffer]
        self.buffer.clear()
        return Step(batch=[u.payload for u in updates], lags=lags, updates=updates)
