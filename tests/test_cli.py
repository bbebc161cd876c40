"""The command line: a real run writes its directory; bad input is one line, exit 2, no files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SUMMARY_KEYS = {
    "solved",
    "env_steps_to_solve",
    "train_wall_s",
    "env_steps",
    "updates",
    "env_steps_per_s",
    "staleness_mean",
    "staleness_max",
    "final_eval_return",
    "virtual_time_s",
    "final_params_sha256",
}


def hybrid_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.run(
        [sys.executable, "-m", "hybrid.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def test_train_writes_config_metrics_and_summary(tmp_path):
    out = tmp_path / "a3c"
    proc = hybrid_cli(
        "train",
        "--env",
        "CartPole-v1",
        "--scheduler",
        "async",
        "--workers",
        "4",
        "--seed",
        "0",
        "--total-env-steps",
        "2000",
        "--eval-every",
        "1000",
        "--eval-episodes",
        "2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["scheduler"] == "async" and config["workers"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["env_steps"] >= 2000
    assert summary["virtual_time_s"] > 0
    assert len(summary["final_params_sha256"]) == 64
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {"train", "eval"} <= {r["kind"] for r in rows}
    assert all({"env_steps", "updates", "wall_s", "virtual_s"} <= set(r) for r in rows)
    assert any("sched/staleness_mean" in r for r in rows)


def test_wandb_style_arguments(tmp_path):
    out = tmp_path / "run"
    proc = hybrid_cli(
        "train",
        "--scheduler=sync",
        "--total_env_steps=500",
        "--workers=2",
        "--eval_every=500",
        "--eval_episodes=1",
        "--stop_when_solved=False",
        "--progress=false",
        f"--out={out}",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "config.json").read_text())["stop_when_solved"] is False


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--env", "NoSuchEnv-v9"], "env"),
        (["--scheduler", "lockstep"], "scheduler"),
        (["--total-env-steps", "0"], "total_env_steps"),
        (["--total-env-steps", "-5"], "total_env_steps"),
        (["--workers", "0"], "workers"),
        (["--staleness-bound", "-1"], "staleness_bound"),
        (["--head", "gaussian"], "head"),
        (["--env", "Pendulum-v1", "--head", "categorical"], "head"),
        (["--lr", "0"], "lr"),
        (["--workers", "many"], "--workers"),
        (["--no-such-flag", "1"], "--no-such-flag"),
        (["--workers", "-h"], "--workers"),  # -h as a flag's value is not a request for help
        (["--scheduler-arg", "-h"], "scheduler_arg"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, field, tmp_path):
    out = tmp_path / "never"
    proc = hybrid_cli("train", *args, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hybrid train: error: ")
    assert field in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert not (tmp_path / "runs").exists()


def test_refuses_a_non_empty_out_directory(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    proc = hybrid_cli("train", "--out", str(tmp_path / "taken"))
    assert proc.returncode == 2
    assert "out:" in proc.stderr


def test_help_documents_every_field():
    from dataclasses import fields

    from hybrid.config import TrainConfig

    proc = hybrid_cli("train", "--help")
    assert proc.returncode == 0
    for f in fields(TrainConfig):
        assert "--" + f.name.replace("_", "-") in proc.stdout, f.name


def test_demo_compares_every_scheduler(tmp_path):
    out = tmp_path / "demo"
    proc = hybrid_cli(
        "demo", "--seeds", "0", "--total-env-steps", "1500", "--out", str(out)
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for scheduler in ("sync", "async", "bounded", "hybrid", "fedavg"):
        assert (out / f"{scheduler}-s0" / "summary.json").exists()
        assert f"| {scheduler} |" in proc.stdout
    assert (out / "report" / "curves_env_steps.png").stat().st_size > 0
    rerun = hybrid_cli("demo", "--seeds", "0", "--total-env-steps", "1500", "--out", str(out))
    assert rerun.returncode == 0 and rerun.stdout.count("done before, kept") == 5
