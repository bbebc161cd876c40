"""Checkpoints: bit-exact resume, safe loading, signals, divergence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import crash_copy, metric_rows

import hybrid
from hybrid import ConfigError
from hybrid.assembly import env_settings, worker_settings
from hybrid.checkpoint import CheckpointError, from_plain, list_checkpoints, load, to_plain
from hybrid.core.loop import Diverged
from hybrid.core.worker import Worker
from hybrid.envs import describe


def _spans(run_dir):
    return (run_dir / "spans.jsonl").read_text()


@pytest.mark.parametrize(
    "changes",
    [
        {"scheduler": "async", "cluster": "heterogeneous"},
        {"scheduler": "sync", "codec": "topk"},
        {"scheduler": "async", "algo": "ppo", "value_norm": True},
        {"scheduler": "bounded", "staleness_bound": 1, "cluster": "stragglers", "codec": "int8"},
        {
            "scheduler": "hybrid",
            "algo": "nstep_q",
            "learning_starts": 100,
            "checkpoint_replay": True,
        },
    ],
    ids=["async", "sync-topk", "ppo-value-norm", "bounded-int8", "apex-replay"],
)
def test_resume_is_bit_exact(tiny_config, tmp_path, changes):
    cfg = tiny_config(
        total_env_steps=1_500,
        checkpoint_every=7,
        keep_checkpoints=100,
        stop_when_solved=False,
        eval_every=700,
        **changes,
    )
    full = hybrid.train(cfg)
    checkpoints = list_checkpoints(full.run_dir)
    assert len(checkpoints) >= 4
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)
    assert _spans(crashed) == _spans(full.run_dir)
    for key in ("env_steps", "updates", "staleness_histogram", "final_eval_return", "tasks"):
        assert resumed.summary[key] == full.summary[key], key


def test_a_truncated_checkpoint_is_reported_with_the_previous_good_one(tiny_config, tmp_path):
    run = hybrid.train(tiny_config(checkpoint_every=10, stop_when_solved=False))
    (run.run_dir / "summary.json").unlink()
    newest, previous = list_checkpoints(run.run_dir)[-1], list_checkpoints(run.run_dir)[-2]
    newest.write_bytes(newest.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load(newest)
    with pytest.raises(ConfigError, match=f"previous good checkpoint is .*{previous.name}"):
        hybrid.train(resume=str(run.run_dir))
    newest.unlink()
    assert hybrid.train(resume=str(run.run_dir)).summary["env_steps"] >= 600


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "ckpt-000000001.pt"
    torch.save({"format": 1, "payload": _RunsCode()}, path)
    with pytest.raises(CheckpointError, match="refused: loading it would run code"):
        load(path)


def test_checkpoint_writes_are_atomic(tiny_config):
    run = hybrid.train(tiny_config(checkpoint_every=5, keep_checkpoints=2))
    names = sorted(p.name for p in (run.run_dir / "checkpoints").iterdir())
    assert len(names) == 2 and not any(n.endswith(".tmp") for n in names)


def test_a_diverging_run_stops_with_a_clear_message(tiny_config, monkeypatch):
    original = Worker.encode

    def always_nan(self, vector):
        return original(self, torch.full_like(vector, float("nan")))

    monkeypatch.setattr(Worker, "encode", always_nan)
    cfg = tiny_config(scheduler="async", total_env_steps=5_000, checkpoint_every=10)
    with pytest.raises(Diverged, match=r"diverged at .* updates in a row"):
        hybrid.train(cfg)


def test_sigterm_checkpoints_flushes_and_resumes_to_the_same_result(tmp_path):
    common = [
        "--scheduler",
        "async",
        "--workers",
        "4",
        # SIGTERM goes out at the first checkpoint (50 updates of 20 steps, ~1,000 steps):
        # the run is then a quarter through, with an evaluation still ahead of it
        "--total-env-steps",
        "4000",
        "--no-stop-when-solved",
        "--eval-every",
        "2000",
        "--checkpoint-every",
        "50",
        "--progress=False",
    ]
    env = dict(os.environ, WANDB_MODE="offline")
    reference = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", *common, "--out", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybrid.cli", "train", *common, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    metrics = out / "metrics.jsonl"
    while time.monotonic() < deadline and not (
        list_checkpoints(out) and metrics.exists() and metrics.stat().st_size > 0
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("the run finished before SIGTERM arrived; raise the budget")
    assert proc.returncode == 143, stderr
    assert "stopped by SIGTERM" in stderr and "--resume" in stderr
    assert not (out / "summary.json").exists()
    json.loads(metrics.read_text().splitlines()[-1])  # flushed, whole lines

    resumed = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--resume", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "summary.json").read_text())
    expected = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert final["final_params_sha256"] == expected["final_params_sha256"]


def _collect_after_load(cfg, state, params):
    """30 steps of a fresh worker with ``params`` after loading ``state`` (as checkpointed)."""
    worker = Worker(0, worker_settings(cfg), describe(cfg.env, env_settings(cfg)))
    worker.flat.load(params)
    worker.load_state_dict(from_plain(to_plain(state)))
    try:
        return worker.runner.collect(worker.model, 30, worker.generator)
    finally:
        worker.close()


def test_a_runners_state_round_trip_continues_the_same_rollout(tiny_config):
    cfg = tiny_config(env="Pendulum-v1", normalize_obs=True, normalize_reward=True)
    original = Worker(0, worker_settings(cfg), describe(cfg.env, env_settings(cfg)))
    original.runner.collect(original.model, 230, original.generator)  # across an episode end
    state = original.state_dict()
    assert set(state) == {"tasks_done", "generator", "codec", "algorithm", "runner"}
    assert state["runner"]["reward_scaler"] and state["runner"]["obs_norm"]
    resumed = _collect_after_load(cfg, state, original.flat.flat)
    expected = original.runner.collect(original.model, 30, original.generator)
    original.close()
    for name in ("obs", "actions", "rewards", "last_obs"):
        assert torch.equal(getattr(resumed, name), getattr(expected, name)), name


def test_a_worker_state_from_before_runners_owned_theirs_still_loads(tiny_config):
    cfg = tiny_config()
    original = Worker(0, worker_settings(cfg), describe(cfg.env, env_settings(cfg)))
    original.runner.collect(original.model, 17, original.generator)
    state = original.state_dict()
    runner = state.pop("runner")
    del runner["obs_norm"]  # the old flat layout: the runner's entries in the worker's dict
    old_layout = state | runner
    resumed = _collect_after_load(cfg, old_layout, original.flat.flat)
    expected = original.runner.collect(original.model, 30, original.generator)
    original.close()
    assert torch.equal(resumed.obs, expected.obs) and torch.equal(resumed.actions, expected.actions)


def test_resume_errors(tmp_path, tiny_config):
    with pytest.raises(ConfigError, match=r"^resume: .* not a run directory"):
        hybrid.train(resume=str(tmp_path / "nothing"))
    done = hybrid.train(tiny_config(checkpoint_every=10))
    with pytest.raises(ConfigError, match="already finished"):
        hybrid.train(resume=str(done.run_dir))
