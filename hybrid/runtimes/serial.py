"""The serial runtime: every worker in one process, on a deterministic virtual clock.

A task runs the moment it is dispatched (its result depends only on the
snapshot and the worker's own state) and is delivered at its virtual
completion time. A seeded cost model gives each task its duration, so an
asynchronous run is bit-for-bit reproducible, any number of workers fits in
one process, and stragglers or slow links are a config line.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from hybrid.config import TrainConfig
from hybrid.core.update import Snapshot, Update
from hybrid.core.worker import Worker
from hybrid.envs import EnvInfo
from hybrid.seeding import CLOCK, stream

SPEEDS, JITTER = range(2)


class CostModel:
    """Task duration = (env steps × step cost + overhead) × worker slowness × jitter + upload."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.slowness = cluster_slowness(cfg)
        self.jitter = [
            np.random.default_rng(stream(cfg.seed, CLOCK, JITTER, w)) for w in range(cfg.workers)
        ]

    def duration(self, worker_id: int, env_steps: int, nbytes: int) -> tuple[float, float]:
        """(compute seconds, upload seconds) of one task."""
        cfg = self.cfg
        jitter = (
            self.jitter[worker_id].lognormal(0.0, cfg.jitter_sigma) if cfg.jitter_sigma else 1.0
        )
        compute = (env_steps * cfg.step_cost_s + cfg.task_overhead_s) * self.slowness[worker_id]
        upload = nbytes * 8 / (cfg.bandwidth_mbps * 1e6)
        return float(compute * jitter), float(upload)


def cluster_slowness(cfg: TrainConfig) -> np.ndarray:
    """Per-worker time factors (1 = nominal) of the named cluster profile."""
    rng = np.random.default_rng(stream(cfg.seed, CLOCK, SPEEDS))
    n = cfg.workers
    if cfg.cluster == "heterogeneous":
        return rng.lognormal(0.0, cfg.speed_sigma, size=n)
    slowness = np.ones(n)
    if cfg.cluster == "stragglers":
        count = round(cfg.straggler_fraction * n)
        slowness[rng.choice(n, size=count, replace=False)] = cfg.straggler_slowdown
    return slowness


class SerialRuntime:
    def __init__(self, cfg: TrainConfig, info: EnvInfo) -> None:
        self.workers = [Worker(w, cfg, info) for w in range(cfg.workers)]
        self.cost = CostModel(cfg)
        self.clock = 0.0
        self.busy = [False] * cfg.workers
        self._queue: list[tuple[float, int, Update]] = []
        self._sequence = 0  # ties in finish time resolve in dispatch order
        self.bookkeeping_s = 0.0  # wall time spent on the clock itself, for the overhead figure

    def idle_workers(self) -> list[int]:
        return [w for w, busy in enumerate(self.busy) if not busy]

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        update = self.workers[worker_id].run_task(snapshot)
        started = time.perf_counter()
        compute_s, update.upload_s = self.cost.duration(worker_id, update.env_steps, update.nbytes)
        update.started_s = self.clock
        update.cost_s = compute_s + update.upload_s
        heapq.heappush(self._queue, (self.clock + update.cost_s, self._sequence, update))
        self._sequence += 1
        self.busy[worker_id] = True
        self.bookkeeping_s += time.perf_counter() - started

    def next_update(self) -> Update:
        if not self._queue:
            raise RuntimeError("no task in flight and none started: the scheduler stalled")
        started = time.perf_counter()
        finish, _, update = heapq.heappop(self._queue)
        self.clock = finish
        self.busy[update.worker_id] = False
        self.bookkeeping_s += time.perf_counter() - started
        return update

    def virtual_time(self) -> float | None:
        return self.clock

    def metrics(self) -> dict[str, float]:
        return {"perf/virtual_clock_s": self.bookkeeping_s}

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
