"""Logging: JSONL rows, a periodic status line off-terminal, and wandb that never stops training."""

from __future__ import annotations

import io
import json

import hybrid
from hybrid.tracking import Console


def test_metric_names_are_grouped(tiny_config):
    result = hybrid.train(tiny_config(scheduler="async"))
    train_rows = result.metrics("train")
    names = set().union(*train_rows)
    assert {"losses/policy", "losses/value", "losses/entropy"} <= names
    assert {"sched/staleness_mean", "sched/staleness_max", "sched/dropped"} <= names
    assert {"perf/env_steps_per_s", "perf/virtual_clock_s"} <= names
    assert [r["env_steps"] for r in train_rows] == sorted(r["env_steps"] for r in train_rows)
    assert all(r["virtual_s"] is not None for r in train_rows)
    for name in names - {"kind"}:
        assert name in ("env_steps", "updates", "wall_s", "virtual_s") or "/" in name, name


def test_status_lines_when_not_a_terminal():
    stream = io.StringIO()
    console = Console(total=1000, label="sync/CartPole-v1", enabled=True, stream=stream)
    console.update(100, "eval 20.0", force=True)
    console.update(200, "eval 30.0")  # throttled: within 10 s of the last line
    console.close()
    lines = stream.getvalue().splitlines()
    assert lines == ["[sync/CartPole-v1] 100 steps (10%) eval 20.0"]


def test_wandb_offline_run_files(tiny_config, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = hybrid.train(tiny_config(track=True, exp_name="unit"))
    runs = list((result.run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    files = {p.name for p in runs[0].rglob("*")}
    assert any(name.endswith(".wandb") for name in files)
    assert (result.run_dir / "summary.json").exists()


def test_broken_wandb_does_not_stop_training(tiny_config, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("wandb is down")

    monkeypatch.setattr(wandb, "init", broken_init)
    result = hybrid.train(tiny_config(track=True))
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 600
