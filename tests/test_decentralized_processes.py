"""Decentralized training on the processes runtime: the replicas are rows of shared memory,
AD-PSGD's workers average their pair and step their replica themselves (under a per-pair
lock, or lock-free), and no replica travels through a pipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_runtimes import _descendants, _eventually_empty, _shm

import hybrid
from hybrid.assembly import env_settings, make_task, runtime_settings, worker_pool
from hybrid.config import TrainConfig
from hybrid.core.global_model import GlobalModel
from hybrid.envs import describe
from hybrid.protocol import ComputeGradient
from hybrid.replicas import ReplicaApplier
from hybrid.runtimes import make_runtime
from hybrid.runtimes.shared_replicas import BROKEN_LOCKS
from hybrid.schedulers import AdPsgd, AdPsgdSettings
from hybrid.trainer import initial_params


def processes_run(**overrides) -> TrainConfig:
    return TrainConfig(
        env="CartPole-v1",
        runtime="processes",
        scheduler="ad-psgd",
        workers=4,
        total_env_steps=1_600,
        rollout_steps=5,
        envs_per_worker=2,
        eval_every=10**6,
        eval_episodes=2,
        stop_when_solved=False,
        progress=False,
        env_defaults=False,
    ).replace(**overrides)


@pytest.fixture
def no_leaks():
    """No worker process and no shared-memory segment outlives the test."""
    before_procs, before_shm = set(_descendants()), _shm()
    yield
    left = _eventually_empty(
        lambda: {p: c for p, c in _descendants().items() if p not in before_procs}
    )
    assert not left, f"processes left behind: {left}"
    assert not (_shm() - before_shm), "shared-memory segments left in /dev/shm"


def mix_without_steps(cfg: TrainConfig, tasks: int) -> tuple[torch.Tensor, ReplicaApplier, int]:
    """Drive AD-PSGD on processes as the loop does, with every step of size 0 (lr_scale 0) and
    replicas that start apart: only the workers' pair averages change the rows. Returns the
    replicas' mean before, the applier (its rows as the workers left them) and the locks
    found broken."""
    info = describe(cfg.env, env_settings(cfg))
    model = GlobalModel(initial_params(cfg, info))
    runtime = make_runtime(runtime_settings(cfg), info, model, False, worker_pool(cfg, info), True)
    scheduler = AdPsgd(cfg.workers, AdPsgdSettings(**cfg.scheduler_args))
    scheduler.bind(model.view(), np.random.default_rng(0))
    try:
        exchange = runtime.replica_exchange()
        applier = ReplicaApplier(model, cfg.workers, exchange, scheduler.pair_lock)
        generator = torch.Generator().manual_seed(0)
        applier.rows.copy_(torch.randn(applier.rows.shape, generator=generator))
        before = applier.rows.double().mean(dim=0)
        task = make_task(ComputeGradient, cfg)
        for _ in range(tasks):
            starting = scheduler.ready(runtime.idle_workers(), model.version)
            for ids, snapshot in applier.snapshots(model, task, 0.0, starting):
                runtime.dispatch(ids[0], snapshot)
            update = runtime.next_update()
            scheduler.admit(update, 0)
            step = scheduler.combine()
            assert step is not None
            step.lr_scale = 0.0  # the mixes alone
            applier.apply(model, step, 0.0)
        runtime.settle()  # every mix ordered has landed
        assert applier.shared is not None
        broken = int(applier.shared.counters[:, BROKEN_LOCKS].sum())
        return before, applier, broken
    finally:
        runtime.close()


@pytest.mark.parametrize("topology", ["ring", "complete"])
def test_locked_pair_averages_conserve_the_replicas_mean_and_never_deadlock(topology, no_leaks):
    """Averaging a pair conserves the replicas' mean; a pair update torn by a concurrent one
    that shares a row (lock-free) loses part of an average and moves it. Locks are taken in
    row order, so N=4 workers on a ring or the complete graph never wait on each other in a
    cycle: no lock is ever found held past its timeout, and the run finishes."""
    cfg = processes_run(hidden=256, scheduler_args={"topology": topology})
    before, applier, broken = mix_without_steps(cfg, tasks=300)
    after = applier.rows.double().mean(dim=0)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)  # rounding: ~1e-6
    assert broken == 0
    assert applier.mixes == 300
    assert consensus_spread(applier.rows) < consensus_spread(torch.randn(4, 8))  # they mixed


def consensus_spread(rows: torch.Tensor) -> float:
    return float((rows - rows.mean(dim=0)).norm(dim=1).mean() / rows.norm(dim=1).mean())


def test_lock_free_ad_psgd_runs_and_finishes(no_leaks, tmp_path):
    result = hybrid.train(
        processes_run(scheduler_args={"pair_lock": False}, out=str(tmp_path / "free"))
    )
    summary = result.summary
    assert summary["mixes"] == summary["updates"] == summary["tasks"] > 0
    assert summary["evaluated_model"] == "mean of the replicas"
    assert np.isfinite(result.params.numpy()).all()


def test_no_replica_travels_through_a_pipe(no_leaks, tmp_path):
    """A task message names the worker's row; the replica is read from shared memory. So the
    bytes sent to the workers per task are far below one replica's (4 bytes a parameter)."""
    result = hybrid.train(processes_run(hidden=256, out=str(tmp_path / "bytes")))
    row = result.metrics("train")[-1]
    replica_bytes = 4 * result.params.numel()
    per_task = row["sched/pipe_bytes_down"] / result.summary["tasks"]
    assert per_task < replica_bytes / 20, (per_task, replica_bytes)
    assert row["decentral/broken_locks"] == 0
