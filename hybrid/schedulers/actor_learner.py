"""``hybrid``: asynchronous actors, a synchronous batched learner (IMPALA, GA3C, Ape-X).

Actors never wait: each sends a trajectory as soon as it has one, tagged with the
policy version it acted with. The learner trains on batches of B trajectories;
those whose policy lag exceeds ``max_policy_lag`` are dropped (counted). The lag
itself is corrected by the learner's loss (V-trace) or its replay (Q-learning).
"""

from __future__ import annotations

from collections.abc import Sequence

from hybrid import CollectExperience, Scheduler, Step, Update, Verdict
from hybrid.scheduler_settings import ActorLearnerSettings


class ActorLearner(Scheduler):
    Settings = ActorLearnerSettings
    task_kind = CollectExperience
    staleness_unit = "learner steps"

    def __init__(self, workers: int, settings: ActorLearnerSettings | None = None) -> None:
        super().__init__(workers)
        settings = settings or ActorLearnerSettings()
        self.batch_size = settings.learner_batch
        self.max_policy_lag = settings.max_policy_lag

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
