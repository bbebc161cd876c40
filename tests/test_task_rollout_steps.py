"""A scheduler's per-task rollout length: ``ready`` names ``(worker, {"rollout_steps": n})``
and that worker's task collects n steps per env instead of the run's ``--rollout-steps``,
alone or computed in a group, and spans.jsonl records it as the task's setting."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import hybrid
from hybrid.schedulers.actor_learner import ActorLearner
from hybrid.schedulers.fedavg import FedAvg
from hybrid.schedulers.synchronous import Sync

RUN_ROLLOUT = 5  # tiny_config's rollout_steps
LONG = 2 * RUN_ROLLOUT


def _spans(run_dir: str | Path) -> list[dict[str, Any]]:
    lines = (Path(run_dir) / "spans.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _longer(worker_id: int) -> dict[str, int]:
    """The even workers' tasks: twice the run's rollout."""
    return {"rollout_steps": LONG} if worker_id % 2 == 0 else {}


class _SyncLonger(Sync):
    """sync, with twice the run's rollout for the even workers (the others named by id)."""

    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, _longer(w)) if _longer(w) else w for w in super().ready(idle, version)]


class _SyncLongerAll(Sync):
    """sync, with twice the run's rollout for every worker."""

    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, {"rollout_steps": LONG}) for w in super().ready(idle, version)]


class _FedAvgLonger(FedAvg):
    """FedAvg whose clients take 2 local steps, the even ones on rollouts twice as long."""

    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, {"steps": 2, **_longer(w)}) for w in super().ready(idle, version)]


hybrid.register_scheduler("test-sync-longer", _SyncLonger)
hybrid.register_scheduler("test-sync-longer-all", _SyncLongerAll)
hybrid.register_scheduler("test-fedavg-longer", _FedAvgLonger)


@pytest.mark.parametrize(
    ("scheduler", "runtime"),
    [
        ("test-sync-longer", "serial"),  # a group of the longer tasks, one plain task
        ("test-sync-longer-all", "serial"),  # one group, every task longer
        ("test-sync-longer", "processes"),  # each task in its worker's process
    ],
)
def test_a_gradient_task_collects_the_rollout_its_scheduler_set(
    tiny_config, scheduler: str, runtime: str
) -> None:
    workers = 2 if runtime == "processes" else 3  # as many processes as this machine's cores
    cfg = tiny_config(scheduler=scheduler, runtime=runtime, workers=workers, total_env_steps=300)
    assert cfg.rollout_steps == RUN_ROLLOUT
    spans = _spans(hybrid.train(cfg).run_dir)
    per_step = cfg.envs_per_worker
    seen = set()
    for span in spans:
        steps = span.get("task", {}).get("rollout_steps", 0)
        expected = LONG if (scheduler.endswith("-all") or span["worker"] % 2 == 0) else 0
        assert steps == expected
        assert span["env_steps"] == (steps or RUN_ROLLOUT) * per_step
        seen.add(steps)
    assert seen == ({LONG} if scheduler.endswith("-all") else {LONG, 0})


@pytest.mark.parametrize("workers", [2, 3])  # the longer clients alone (2) or a group (3)
def test_local_training_takes_each_step_on_the_rollout_its_scheduler_set(
    tiny_config, workers: int
) -> None:
    cfg = tiny_config(
        scheduler="test-fedavg-longer",
        scheduler_args={"client_fraction": 1.0},  # every client in every round
        workers=workers,
        optimizer="sgd",
        lr=1.0,
        local_optimizer="sgd",
        local_lr=0.01,
        total_env_steps=300,
    )
    spans = _spans(hybrid.train(cfg).run_dir)
    assert spans
    for span in spans:
        steps = span["task"].get("rollout_steps", RUN_ROLLOUT)
        assert steps == (LONG if span["worker"] % 2 == 0 else RUN_ROLLOUT)
        assert span["env_steps"] == span["task"]["steps"] * steps * cfg.envs_per_worker


class _Negative(Sync):
    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, {"rollout_steps": -1}) for w in super().ready(idle, version)]


class _LearnerLonger(ActorLearner):
    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, {"rollout_steps": LONG}) for w in super().ready(idle, version)]


def test_a_negative_rollout_is_one_line(tiny_config) -> None:
    hybrid.register_scheduler("test-negative-rollout", _Negative)
    with pytest.raises(ValueError, match=r"^_Negative.ready: rollout_steps=-1 must be >= 1, or 0"):
        hybrid.train(tiny_config(scheduler="test-negative-rollout"))


def test_an_actor_has_no_rollout_of_its_own(tiny_config) -> None:
    # A learner batches trajectories of one length: CollectExperience has no such setting.
    hybrid.register_scheduler("test-learner-longer", _LearnerLonger)
    with pytest.raises(ValueError, match=r"CollectExperience has no setting 'rollout_steps'"):
        hybrid.train(tiny_config(scheduler="test-learner-longer"))


class _SyncShort(Sync):
    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        return [(w, {"rollout_steps": 1}) for w in super().ready(idle, version)]


def test_a_rollout_too_short_for_ppos_minibatches_is_one_line(tiny_config) -> None:
    hybrid.register_scheduler("test-short-rollout", _SyncShort)
    cfg = tiny_config(scheduler="test-short-rollout", algo="ppo", ppo_minibatches=4)
    with pytest.raises(ValueError, match=r"^rollout_steps=1: 2 samples per task, fewer than"):
        hybrid.train(cfg)
