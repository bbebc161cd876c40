"""Per-task settings from the scheduler (Flower's configure_fit for hybrid), and FedNova,
the example scheduler that uses them (examples/schedulers/fednova.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_update

import hybrid
from hybrid import Scheduler, TrainLocally
from hybrid.schedulers import make_settings, resolve_scheduler

ROOT = Path(__file__).resolve().parents[1]
FEDNOVA = f"{ROOT / 'examples' / 'schedulers' / 'fednova.py'}:FedNova"


def fednova(workers: int, **settings):
    cls = resolve_scheduler(FEDNOVA).cls
    scheduler = cls(workers, make_settings(cls, settings))
    scheduler.bind(None, np.random.default_rng(0))
    return scheduler


def delta(worker_id: int, values: list[float], env_steps: int = 10):
    return make_update(worker_id, 0, values, env_steps=env_steps, kind="delta")


def test_fednova_hands_each_client_its_own_local_steps() -> None:
    s = fednova(6, client_fraction=0.5, min_local_steps=2, max_local_steps=9)
    started = s.ready(list(range(6)), 0)
    assert len(started) == 3
    for worker_id, task_settings in started:
        assert 0 <= worker_id < 6 and set(task_settings) == {"steps"}
        assert 2 <= task_settings["steps"] <= 9
    assert s.ready([w for w in range(6) if w not in dict(started)], 0) == []  # round open


def test_fednova_normalizes_each_delta_by_its_steps() -> None:
    """d = τ_eff Σ p_i Δ_i / τ_i with p_i = 1/m; FedAvg's plain mean without normalize."""
    for normalize in (True, False):
        s = fednova(2, normalize=normalize)
        s.local_steps, s.pending = {0: 1, 1: 4}, {0, 1}  # a round with τ = 1 and 4
        s.admit(delta(0, [2.0, 0.0]), 0)
        s.admit(delta(1, [0.0, 8.0]), 0)
        assert s.full()
        step = s.combine()
        # normalized: τ_eff = 2.5, per-step mean = ([2, 0] / 1 + [0, 8] / 4) / 2 = [1, 1]
        expected = [2.5, 2.5] if normalize else [1.0, 4.0]
        torch.testing.assert_close(step.direction, torch.tensor(expected))
        assert step.clip is False and not s.full()


def _spans(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "spans.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("runtime", ["serial", "processes"])
def test_the_worker_runs_the_steps_ready_chose_and_spans_record_them(
    tiny_config, runtime: str
) -> None:
    cfg = tiny_config(
        scheduler=FEDNOVA,
        scheduler_args={"min_local_steps": 1, "max_local_steps": 3},
        runtime=runtime,
        workers=2,
        optimizer="sgd",
        lr=1.0,
        local_optimizer="sgd",
        local_lr=0.01,
        total_env_steps=300,
    )
    result = hybrid.train(cfg)
    spans = _spans(result.run_dir)
    assert spans and all("task" in span for span in spans)
    per_step = cfg.rollout_steps * cfg.envs_per_worker  # env steps of one local step
    seen = set()
    for span in spans:
        steps = span["task"]["steps"]
        assert 1 <= steps <= 3
        assert span["env_steps"] == steps * per_step  # the worker took exactly those steps
        seen.add(steps)
    assert len(seen) > 1  # the steps do vary
    assert result.summary["staleness_unit"] == "rounds"


class _WrongSetting(Scheduler):
    task_kind = TrainLocally

    def ready(self, idle: Sequence[int], version: int) -> list[tuple[int, dict]]:
        return [(w, {"epochs": 3}) for w in idle]

    def full(self) -> bool:
        return bool(self.buffer)


def test_a_setting_the_task_lacks_is_one_line(tiny_config) -> None:
    hybrid.register_scheduler("wrong-setting", _WrongSetting)
    with pytest.raises(ValueError, match=r"^_WrongSetting.ready: TrainLocally has no setting "):
        hybrid.train(tiny_config(scheduler="wrong-setting"))


def test_plain_ids_leave_spans_as_they_were(tiny_config) -> None:
    result = hybrid.train(tiny_config(scheduler="async"))
    assert not any("task" in span for span in _spans(result.run_dir))
