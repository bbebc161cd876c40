"""One staleness on every runtime: τ = updates applied to θ between a worker's read and its apply.

Scripted interleavings give known τ values (serial: from the virtual clock's spans;
processes under Hogwild!: workers driven message by message; the loop's own rule for
runtimes where the main process applies), and a lone worker has τ = 0 everywhere. A late
federated Δ's τ at apply: tests/test_federated.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import torch.multiprocessing as mp
from conftest import make_update
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

import hybrid
from hybrid.assembly import env_settings, global_model, runtime_settings, worker_pool
from hybrid.config import TrainConfig
from hybrid.core.loop import staleness
from hybrid.envs import describe, register_env
from hybrid.protocol import ComputeGradient
from hybrid.runtimes.processes import _worker_main
from hybrid.trainer import initial_params

# --- the rule ----------------------------------------------------------------------------------


def test_tau_is_versions_applied_since_the_read_unless_the_applier_measured_it():
    assert staleness(make_update(0, base_version=3, values=[0.0]), version=7) == 4
    assert staleness(make_update(0, base_version=7, values=[0.0]), version=7) == 0
    # A Hogwild! worker applied it itself and counted the applies in between.
    measured = make_update(0, base_version=3, values=[0.0], staleness=1)
    assert staleness(measured, version=7) == 1


def _spans(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "spans.jsonl").read_text().splitlines()]


# --- serial: the virtual clock's interleaving ---------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"scheduler": "async", "cluster": "stragglers", "straggler_fraction": 0.5},
        {"scheduler": "async", "cluster": "heterogeneous", "workers": 4},
        {"scheduler": "bounded", "staleness_bound": 1, "cluster": "heterogeneous", "workers": 4},
    ],
)
def test_serial_tau_counts_the_applies_inside_each_task(tiny_config, changes):
    """On the virtual clock an update is applied the instant it arrives, so the applies
    between a task's read (its start) and its own apply (its end) are the other spans that
    end inside it: an independent count from the timeline, which τ must equal."""
    cfg = tiny_config(**({"workers": 2, "jitter_sigma": 0.0, "stop_when_solved": False} | changes))
    result = hybrid.train(cfg)
    spans = [s for s in _spans(result.run_dir) if s["verdict"] == "buffer"]
    ends = sorted(s["end"] for s in spans)
    assert len(set(ends)) == len(ends), "ties would make the order ambiguous"
    expected = [sum(s["start"] < e < s["end"] for e in ends) for s in spans]
    measured = [s["staleness"] for s in spans]
    assert measured == expected
    assert max(measured) >= 1  # the interleaving really is asynchronous
    histogram = result.summary["staleness_histogram"]
    assert sum(histogram) == len(spans)
    assert [measured.count(k) for k in range(len(histogram))] == histogram
    assert result.summary["staleness_unit"] == "updates"


# --- processes under Hogwild!: workers driven message by message --------------------------------

GATE_ENV = "HybridGatedCartPole-v0"


class GatedCartPole(CartPoleEnv):
    """CartPole whose steps wait, in a worker process, while ``<dir>/<pid>.closed`` exists.

    It writes ``<pid>.waiting`` when it stops: the worker has then read θ for its task (the
    read comes before the first env step), which the test needs to know to script the
    interleaving without timing.
    """

    def step(self, action):
        gate = os.environ.get("HYBRID_TEST_GATE_DIR")
        if gate:
            closed = Path(gate) / f"{os.getpid()}.closed"
            if closed.exists():
                (Path(gate) / f"{os.getpid()}.waiting").touch()
                while closed.exists():
                    time.sleep(0.001)
        return super().step(action)


def make_gated() -> gym.Env:
    """The gated env. Registered with hybrid.envs.register_env, it travels to a worker
    process pickled by reference, inside the env description: unpickling it there imports
    this module (workers receive their settings, not the config)."""
    return gym.wrappers.TimeLimit(GatedCartPole(), max_episode_steps=500)


register_env(GATE_ENV, make_gated)


def _wait_for(path: Path, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.002)


def test_hogwild_workers_measure_tau_on_the_shared_apply_counter(tmp_path, monkeypatch):
    """Two Hogwild! workers, A and B, and the main process's side of the pipe played by hand.

    Script (applies happen only when the worker's claim arrives, which the test sends):
      A and B read θ (0 applied); A applies (τ 0); B applies (τ 1: A's apply is in between)
      and starts its next task at once, reading 2; A starts a task, reading 2; B applies its
      second (τ 0: nothing in between; its own first update is in θ, not staleness); A
      applies (τ 1: B's second).
    """
    monkeypatch.setenv("HYBRID_TEST_GATE_DIR", str(tmp_path))
    cfg = TrainConfig(env=GATE_ENV, workers=2, envs_per_worker=1, rollout_steps=5, progress=False)
    info = describe(cfg.env, env_settings(cfg))
    model = global_model(cfg, initial_params(cfg, info))
    shared = model.share_memory()
    theta = shared["param"]
    meta = torch.zeros(3, dtype=torch.int64).share_memory_()
    grads = torch.zeros(2, theta.numel()).share_memory_()
    applied = torch.zeros(2, dtype=torch.int64).share_memory_()
    ctx = mp.get_context("spawn")
    conns, pids, processes = [], [], []
    try:
        for worker_id in range(2):
            ours, theirs = ctx.Pipe(duplex=True)
            process = ctx.Process(
                target=_worker_main,
                args=(
                    worker_id,
                    0,
                    runtime_settings(cfg),
                    info,
                    theirs,
                    theta,
                    meta,
                    grads,
                    applied,
                    False,
                    shared,
                    worker_pool(cfg, info),
                ),
                daemon=True,
            )
            process.start()
            theirs.close()
            processes.append(process)
            conns.append(ours)
        for conn in conns:
            kind, pid = conn.recv()
            assert kind == "ready"
            pids.append(pid)
        gate = {w: tmp_path / f"{pids[w]}.closed" for w in range(2)}
        waiting = {w: tmp_path / f"{pids[w]}.waiting" for w in range(2)}
        task = ("task", ComputeGradient(), None, 0.0)

        def claim(worker: int, following=None) -> int:
            conns[worker].send(("claim", 0.0, following))
            kind, record = conns[worker].recv()
            assert kind == "result"
            return record["staleness"]

        def start(worker: int) -> None:
            """Send a task and return once the worker has read θ for it."""
            waiting[worker].unlink(missing_ok=True)
            gate[worker].touch()
            conns[worker].send(task)
            _wait_for(waiting[worker])
            gate[worker].unlink()

        start(0)
        start(1)
        taus = [claim(0), claim(1, following=task)]  # B's next task reads at once: 2 applied
        start(0)
        taus += [claim(1), claim(0)]
        assert taus == [0, 1, 0, 1]
        assert applied.tolist() == [2, 2]
    finally:
        for conn in conns:
            conn.send(None)
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()


# --- a lone worker is never stale ----------------------------------------------------------------


@pytest.mark.parametrize(
    "runtime,scheduler,lock_free",
    [
        ("serial", "sync", True),
        ("serial", "async", True),
        ("serial", "bounded", True),
        ("processes", "sync", True),
        ("processes", "async", True),  # Hogwild!: the worker runs ahead and applies itself
        ("processes", "async", False),
        ("processes", "bounded", True),
    ],
)
def test_one_worker_has_zero_staleness(tiny_config, runtime, scheduler, lock_free):
    bound = {"staleness_bound": 1} if scheduler == "bounded" else {}
    cfg = tiny_config(
        runtime=runtime,
        scheduler=scheduler,
        workers=1,
        lock_free=lock_free,
        total_env_steps=1_000,
        stop_when_solved=False,
        **bound,
    )
    summary = hybrid.train(cfg).summary
    assert summary["updates"] > 0
    assert summary["staleness_histogram"] == [summary["updates"]]
    assert summary["staleness_max"] == 0 and summary["staleness_mean"] == 0.0
