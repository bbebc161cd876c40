"""Scheduler registry: one line per scheduler."""

from __future__ import annotations

from collections.abc import Callable

from hybrid.config import TrainConfig
from hybrid.schedulers.actor_learner import ActorLearner
from hybrid.schedulers.asynchronous import Async
from hybrid.schedulers.base import Scheduler, Verdict
from hybrid.schedulers.bounded import Bounded
from hybrid.schedulers.fedavg import FedAvg
from hybrid.schedulers.synchronous import Sync

SCHEDULERS: dict[str, Callable[[TrainConfig], Scheduler]] = {
    "sync": lambda c: Sync(c.workers),
    "async": lambda c: Async(c.workers),
    "bounded": lambda c: Bounded(c.workers, c.staleness_bound, c.staleness_aware_lr),
    "hybrid": lambda c: ActorLearner(c.workers, c.learner_batch, c.max_policy_lag),
    "fedavg": FedAvg.from_config,
}


def make_scheduler(cfg: TrainConfig) -> Scheduler:
    return SCHEDULERS[cfg.scheduler](cfg)


__all__ = [
    "SCHEDULERS",
    "ActorLearner",
    "Async",
    "Bounded",
    "FedAvg",
    "Scheduler",
    "Sync",
    "Verdict",
    "make_scheduler",
]
