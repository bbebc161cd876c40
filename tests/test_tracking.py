"""Logging: JSONL rows, a periodic status line off-terminal, and wandb that never stops training."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

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


def _row(kind: str, env_steps: int, **metrics: float) -> dict:
    return {"kind": kind, "env_steps": env_steps, "updates": 1, "wall_s": 1.0} | metrics


def test_status_lines_when_not_a_terminal():
    stream = io.StringIO()
    console = Console(total=1000, label="sync/CartPole-v1", enabled=True, stream=stream)
    console.update(_row("train", 100, **{"perf/env_steps_per_s": 1234.0}))
    console.update(_row("train", 150, **{"sched/staleness_mean": 1.5}))  # within 10 s: quiet
    console.update(_row("eval", 200, **{"eval/return_mean": 20.0}))  # an evaluation: a line
    console.update(_row("train", 300))  # no staleness in this window: the last one stays
    console.close(finished=True)
    assert stream.getvalue().splitlines() == [
        "[sync/CartPole-v1] 100 steps (10%) 1,234 env steps/s",
        "[sync/CartPole-v1] 200 steps (20%) 1,234 env steps/s, eval 20.0, staleness 1.50",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_nothing_when_disabled():
    terminal = _Terminal()
    console = Console(total=1000, label="async/CartPole-v1", enabled=True, stream=terminal)
    console.update(_row("train", 500, **{"perf/env_steps_per_s": 900.0}))
    console.update(_row("eval", 500, **{"eval/return_mean": 42.0}))
    console.update(_row("train", 600, **{"sched/staleness_mean": 6.25}))
    console.close(finished=True)  # stopped early (solved): the bar ends complete
    drawn = terminal.getvalue().split("\r")[-1]  # tqdm redraws the line in place
    assert drawn.startswith("async/CartPole-v1 100%|") and "| 600/600 [" in drawn
    assert "900 env steps/s, eval 42.0, staleness 6.25]" in drawn

    silent = _Terminal()
    console = Console(total=1000, label="async/CartPole-v1", enabled=False, stream=silent)
    console.update(_row("eval", 500, **{"eval/return_mean": 42.0}))
    console.close(finished=True)
    assert silent.getvalue() == ""


def test_a_run_prints_status_lines_off_terminal_and_nothing_without_progress(
    tiny_config, tmp_path, capsys
):
    hybrid.train(tiny_config(progress=True, scheduler="async"))
    lines = capsys.readouterr().err.splitlines()
    status = [line for line in lines if line.startswith("[async/CartPole-v1]")]
    assert len(status) >= 3  # the first row, then each evaluation (300, 600)
    assert "env steps/s" in status[-1] and "eval " in status[-1] and "staleness" in status[-1]

    hybrid.train(tiny_config(progress=False, out=str(tmp_path / "quiet")))
    assert "[sync/CartPole-v1]" not in capsys.readouterr().err


class _Recorder(hybrid.Callback):
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.summaries: list[dict] = []

    def on_log(self, row):
        self.rows.append(row)

    def on_eval(self, row):
        self.rows.append(row)

    def on_end(self, summary):
        self.summaries.append(summary)


def test_callbacks_receive_every_logged_row_in_order_and_the_summary(tiny_config):
    recorder, seen_by_function = _Recorder(), []
    result = hybrid.train(tiny_config(), callbacks=[recorder, seen_by_function.append])
    on_disk = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").open()]
    assert {row["kind"] for row in on_disk} == {"train", "eval"}
    assert recorder.rows == on_disk
    assert seen_by_function == on_disk  # a plain function gets train and eval rows
    assert recorder.summaries == [result.summary]
    assert set(result.summary) == set(json.loads((result.run_dir / "summary.json").read_text()))


def test_a_raising_callback_is_dropped_with_one_warning_and_training_goes_on(tiny_config):
    calls = []

    def broken_plot(row):
        calls.append(row)
        raise ValueError("a plotting bug")

    recorder = _Recorder()
    with pytest.warns(UserWarning, match="a plotting bug") as warned:
        result = hybrid.train(tiny_config(), callbacks=[broken_plot, recorder])
    assert len([w for w in warned if "callback" in str(w.message)]) == 1
    assert len(calls) == 1  # not called again after it raised
    assert result.summary["env_steps"] >= 600
    assert len(recorder.rows) == len(result.metrics())  # the others saw every row
    assert recorder.summaries == [result.summary]


def test_a_callback_that_cannot_be_called_fails_before_anything_is_written(tiny_config):
    cfg = tiny_config()
    with pytest.raises(TypeError, match="instance"):
        hybrid.train(cfg, callbacks=[_Recorder])
    with pytest.raises(TypeError, match="neither callable"):
        hybrid.train(cfg, callbacks=[object()])
    assert not Path(cfg.out).exists()


def test_wandb_offline_run_files_hold_config_and_summary(tiny_config, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = hybrid.train(
        tiny_config(track=True, exp_name="unit", checkpoint_every=20, wandb_checkpoint=True)
    )
    runs = list((result.run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # wandb-core writes the file from its own process and may finish a moment after
    # run.finish() returns.
    deadline = time.monotonic() + 20
    while True:
        records = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
        if b"exp_name" in records or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # The run's records are protobuf: strings are stored as they are.
    assert b"exp_name" in records and b"unit" in records  # the config
    assert result.summary["final_params_sha256"].encode() in records  # the summary
    assert b"sched/staleness" in records  # the staleness histograms
    assert b"checkpoint" in records  # the final checkpoint, as an artifact


def test_broken_wandb_does_not_stop_training(tiny_config, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("wandb is down")

    monkeypatch.setattr(wandb, "init", broken_init)
    result = hybrid.train(tiny_config(track=True))
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 600
