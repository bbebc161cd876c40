"""Decentralized training on the processes runtime: the replicas are rows of shared memory,
AD-PSGD's workers average their pair and step their replica themselves (under a per-pair
lock, or lock-free), and no replica travels through a pipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_runtimes import no_leaks  # noqa: F401  (the fixture, used below)

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

# every test here: no worker process and no shared-memory segment outlives it
pytestmark = pytest.mark.usefixtures("no_leaks")


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
def test_locked_pair_averages_conserve_the_replicas_mean_and_never_deadlock(topology):
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


def test_lock_free_ad_psgd_runs_and_finishes(tmp_path):
    result = hybrid.train(
        processes_run(scheduler_args={"pair_lock": False}, out=str(tmp_path / "free"))
    )
    summary = result.summary
    assert summary["mixes"] == summary["updates"] == summary["tasks"] > 0
    assert summary["evaluated_model"] == "mean of the replicas"
    assert np.isfinite(result.params.numpy()).all()
    measured = [r["decentral/gossip_staleness_measured"] for r in result.metrics("train")]
    assert measured and all(m >= 0 for m in measured)  # others' averages while computing


def test_no_replica_travels_through_a_pipe(tmp_path):
    """A task message names the worker's row; the replica is read from shared memory. So the
    bytes sent to the workers per task are far below one replica's (4 bytes a parameter)."""
    result = hybrid.train(processes_run(hidden=256, out=str(tmp_path / "bytes")))
    row = result.metrics("train")[-1]
    replica_bytes = 4 * result.params.numel()
    per_task = row["sched/pipe_bytes_down"] / result.summary["tasks"]
    assert per_task < replica_bytes / 20, (per_task, replica_bytes)
    assert row["decentral/broken_locks"] == 0


def test_sgp_on_shared_rows_is_reproducible(tmp_path):
    """A round's maths does not depend on who arrives first, so SGP under a delay (push-sum
    weights away from 1, which each worker's read of its shared row de-biases) is
    bit-reproducible on processes."""
    cfg = processes_run(scheduler="sgp", scheduler_args={"delay": 1}, total_env_steps=1_000)
    first = hybrid.train(cfg.replace(out=str(tmp_path / "a")))
    again = hybrid.train(cfg.replace(out=str(tmp_path / "b")))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    assert first.summary["mixes"] > 2 and first.summary["consensus_distance"] > 0


def test_a_workers_read_of_its_shared_row_is_the_loops_de_biased_replica():
    """What a worker reads (``SharedReplicas.read``, told the row's push-sum weight by its
    task) is what the loop would have sent it: z_k = x_k / w_k, bit for bit."""
    import multiprocessing

    from hybrid import TrainConfig, assembly
    from hybrid.runtimes.shared_replicas import SharedReplicas

    class Exchange:
        def __init__(self) -> None:
            context = multiprocessing.get_context("spawn")
            self.shared_replicas = SharedReplicas.create(
                context, assembly.server_settings(TrainConfig()), 4, 6
            )

        def order_pair_mix(self, *args: object) -> None:
            raise AssertionError("SGP mixes in the loop")

    model = GlobalModel(torch.linspace(-1, 1, 6))
    shared = ReplicaApplier(model, 4, Exchange())
    local = ReplicaApplier(model, 4)
    for applier in (shared, local):
        applier.rows.copy_(torch.randn(4, 6, generator=torch.Generator().manual_seed(1)))
        applier.mix(np.full((4, 4), 0.25) + np.diag([0.5, 0, 0, 0]) - 0.125, push_sum=True)
    snapshots = shared.snapshots(model, make_task(ComputeGradient, TrainConfig()), 0.0, [1, 2])
    for ids, snapshot in snapshots:
        row, weight, locked = snapshot.extras["replica_read"]
        assert (row, locked) == (ids[0], True) and weight != 1.0
        read = torch.empty(6)
        assert shared.shared is not None
        shared.shared.read(row, read, weight, locked)
        assert torch.equal(read, local.debiased(row))


def test_ad_psgd_survives_killed_workers(tmp_path):
    """A worker SIGKILLed mid-task (or mid-mix, holding row locks: the others pass a lock
    held past its timeout) is restarted on the same shared rows and the run completes."""
    result = hybrid.train(
        processes_run(workers=2, inject_worker_faults=0.05, seed=3, out=str(tmp_path / "k"))
    )
    row = result.metrics("train")[-1]
    assert row["sched/worker_restarts"] >= 1
    assert result.summary["mixes"] == result.summary["updates"] > 0
    assert np.isfinite(result.params.numpy()).all()
