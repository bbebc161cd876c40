"""A federated run stopped and resumed ends where the uninterrupted run ends: DP-FedAvg's
noise stream, adaptive clip and accountant, and a trace's clock, all come back (serial
runtime, bit for bit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import crash_copy, metric_rows

import hybrid
from hybrid.checkpoint import list_checkpoints

EXAMPLE_TRACE = Path(__file__).parents[1] / "examples" / "traces" / "diurnal_20_clients.json"

DP = dict(
    scheduler="fedavg",
    clients=20,
    client_fraction=0.25,
    local_steps=2,
    dp_clip=0.5,
    dp_noise_multiplier=0.8,
    dp_adaptive_quantile=0.5,  # the clip moves each round: its value must come back too
    dp_count_noise=1.0,
    client_eval_clients=2,
)
TRACED = dict(
    scheduler="fedavg",
    clients=20,
    client_fraction=0.5,
    local_steps=2,
    client_trace=str(EXAMPLE_TRACE),
    round_deadline_s=0.04,  # some traced clients miss it
    late_policy="admit",
    client_eval_clients=2,
)


@pytest.mark.parametrize("settings", [DP, TRACED], ids=["dp", "trace"])
def test_a_resumed_federated_run_ends_as_the_uninterrupted_one(settings, tiny_config, tmp_path):
    cfg = tiny_config(
        **settings,
        total_env_steps=1_600,
        checkpoint_every=2,
        keep_checkpoints=100,
        log_every=40,  # rows between a checkpoint and the next round: the metrics come back
        eval_every=10**6,
        stop_when_solved=False,
    )
    full = hybrid.train(cfg)
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    keys = [k for k in full.summary if k.startswith(("dp_", "trace_", "late_"))]
    assert keys
    for key in [*keys, "virtual_time_s", "rounds", "dropped"]:
        assert resumed.summary[key] == full.summary[key], key
    assert metric_rows(crashed) == metric_rows(full.run_dir)


def test_a_dp_run_stopped_by_sigterm_resumes_to_the_same_epsilon_and_parameters(tmp_path):
    common = [
        *("--scheduler", "fedavg", "--clients", "20", "--client-fraction", "0.25"),
        *("--dp-clip", "0.5", "--dp-noise-multiplier", "0.8", "--dp-adaptive-quantile", "0.5"),
        *("--dp-count-noise", "1.0"),
        *("--client-eval-clients", "2", "--total-env-steps", "6000", "--eval-every", "100000"),
        *("--local-steps", "2", "--envs-per-worker", "2", "--rollout-steps", "5"),
        # 100 env steps a round: SIGTERM goes out at the first checkpoint, a sixth of the way
        *("--checkpoint-every", "10", "--no-stop-when-solved", "--progress=False"),
    ]
    env = dict(os.environ, WANDB_MODE="offline")
    train = [sys.executable, "-m", "hybrid.cli", "train"]
    reference = subprocess.run(
        [*train, *common, "--out", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [*train, *common, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list_checkpoints(out):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("the run finished before SIGTERM arrived; raise the budget")
    assert "stopped by SIGTERM" in stderr, stderr

    resumed = subprocess.run(
        [*train, "--resume", str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "summary.json").read_text())
    expected = json.loads((tmp_path / "ref" / "summary.json").read_text())
    for key in ("final_params_sha256", "dp_epsilon", "dp_rounds", "dp_clip"):
        assert final[key] == expected[key], key
