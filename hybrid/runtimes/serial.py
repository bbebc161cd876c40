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
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid import checkpoint as check
from hybrid.checkpoint import update_from_state, update_to_state
from hybrid.core.worker import (
    Worker,
    groups_gradients,
    groups_local_training,
    run_group,
    run_local_group,
)
from hybrid.envs import EnvInfo
from hybrid.protocol import Snapshot, TrainLocally, Update
from hybrid.runtimes import RuntimeDefaults
from hybrid.runtimes.pool import EdgeClients, WorkerPool
from hybrid.seeding import CLOCK, stream

if TYPE_CHECKING:
    from hybrid.runtimes.settings import RuntimeSettings

SPEEDS, JITTER = range(2)


class CostModel:
    """Task duration = (env steps × step cost + overhead) × worker slowness × jitter + upload."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self.slowness = cluster_slowness(settings)
        self.jitter = [
            np.random.default_rng(stream(settings.seed, CLOCK, JITTER, w))
            for w in range(settings.workers)
        ]

    def duration(
        self, worker_id: int, env_steps: int, nbytes: int, updates: int = 1
    ) -> tuple[float, float]:
        """(compute seconds, upload seconds) of one task of ``updates`` optimizer steps."""
        clock = self.settings.clock
        jitter = (
            self.jitter[worker_id].lognormal(0.0, clock.jitter_sigma) if clock.jitter_sigma else 1.0
        )
        work = env_steps * clock.step_cost_s + updates * clock.task_overhead_s
        compute = work * self.slowness[worker_id]
        upload = nbytes * 8 / (clock.bandwidth_mbps * 1e6)
        return float(compute * jitter), float(upload)


def cluster_slowness(settings: RuntimeSettings) -> np.ndarray:
    """Per-worker time factors (1 = nominal) of the named cluster profile."""
    rng = np.random.default_rng(stream(settings.seed, CLOCK, SPEEDS))
    n, clock = settings.workers, settings.clock
    if clock.cluster == "heterogeneous":
        return rng.lognormal(0.0, clock.speed_sigma, size=n)
    slowness = np.ones(n)
    if clock.cluster == "stragglers":
        count = round(clock.straggler_fraction * n)
        slowness[rng.choice(n, size=count, replace=False)] = clock.straggler_slowdown
    return slowness


class SerialRuntime(RuntimeDefaults):
    def __init__(self, settings: RuntimeSettings, info: EnvInfo, pool: WorkerPool) -> None:
        self.settings, self.info = settings, info
        self.pool = pool
        # Edge clients (an on-demand pool) hold no env or model between tasks: each task
        # builds its client, then releases it, so memory grows with the tasks in flight,
        # not with the number of clients.
        self.on_demand = not self.pool.persistent
        self.workers = [] if self.on_demand else self._build_workers(self.pool)
        self._client_models: list[Any] = []  # one network lent to every client (run one at a time)
        self.cost = CostModel(settings)
        self.client_cost = self.pool.cost_model()
        self.clock = 0.0
        self.busy = [False] * self.pool.size
        self.busy_until: dict[int, float] = {}
        """Devices still computing a task the server stopped waiting for at its deadline."""
        self._idle = set(range(len(self.busy)))
        """Neither busy nor in busy_until: kept up to date so that finding the idle workers
        costs what is idle, not the population (thousands of simulated workers)."""
        self._queue: list[tuple[float, int, Update]] = []
        self._sequence = 0  # ties in finish time resolve in dispatch order
        self.bookkeeping_s = 0.0  # wall time spent on the clock itself, for the overhead figure

    @staticmethod
    def _build_workers(pool: WorkerPool) -> list[Worker]:
        """The persistent workers. Tasks run one after another here, so workers share one
        model where it holds no state of its own: a simulated worker then costs its envs,
        generator and normalizer, not a network."""
        first = pool.build(0)
        shared = (first.model, first.flat) if first.shares_model else None
        return [first] + [pool.build(w, shared_model=shared) for w in range(1, pool.size)]

    def idle_workers(self) -> list[int]:
        for w in [w for w, end in self.busy_until.items() if end <= self.clock]:
            del self.busy_until[w]
            if not self.busy[w]:
                self._idle.add(w)
        idle = sorted(self._idle)
        if not idle and not self._queue and self.busy_until:
            # Nothing is on its way to the server and nobody is free: time passes until the
            # first device still working past its deadline is done.
            self.clock = max(self.clock, min(self.busy_until.values()))
            return self.idle_workers()
        return idle

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        if self.on_demand:
            update = self.pool.run(worker_id, snapshot, self._client_models)
        else:
            update = self.workers[worker_id].run_task(snapshot)
        self._schedule(worker_id, snapshot, update)

    def dispatch_group(self, worker_ids: list[int], snapshot: Snapshot) -> None:
        """Start several workers on one snapshot, computed together where they can be: A2C
        gradient tasks (``run_group``) and federated clients' local steps
        (``run_local_group``; edge clients through ``EdgeClients.run_group``), one forward
        pass per env step and one backward pass per update for all of them; anything else
        one task at a time."""
        group = [] if self.on_demand else [self.workers[w] for w in worker_ids]
        if self.on_demand and len(worker_ids) > 1 and isinstance(snapshot.task, TrainLocally):
            assert isinstance(self.pool, EdgeClients)
            updates = self.pool.run_group(worker_ids, snapshot, self._client_models)
        elif groups_gradients(group, snapshot):
            updates = run_group(group, snapshot)
        elif groups_local_training(group, snapshot):
            updates = run_local_group(group, snapshot)
        else:
            for worker_id in worker_ids:
                self.dispatch(worker_id, snapshot)
            return
        for worker_id, update in zip(worker_ids, updates, strict=True):
            self._schedule(worker_id, snapshot, update)

    def _schedule(self, worker_id: int, snapshot: Snapshot, update: Update) -> None:
        """Give a computed task its virtual duration and queue it for its arrival."""
        started = time.perf_counter()
        task = snapshot.task
        updates = task.steps if isinstance(task, TrainLocally) else 1
        if self.client_cost is not None:
            theta_nbytes = snapshot.params.numel() * snapshot.params.element_size()
            compute_s, update.upload_s = self.client_cost.duration(
                worker_id, update.env_steps, update.nbytes, theta_nbytes, updates, snapshot.version
            )
        else:
            compute_s, update.upload_s = self.cost.duration(
                worker_id, update.env_steps, update.nbytes, updates
            )
        update.cost_s = compute_s + update.upload_s
        update.started_s = start = self._task_start(snapshot, update.cost_s)
        arrival = start + update.cost_s
        # A task's deadline, whatever the scheduler that set it.
        deadline_s = task.deadline_s
        if deadline_s and update.cost_s > deadline_s:
            # The server stops waiting at the deadline and learns then that the task is late
            # (the scheduler sees cost_s > deadline); the device works on until it finishes.
            self.busy_until[worker_id] = arrival
            arrival = start + deadline_s
        heapq.heappush(self._queue, (arrival, self._sequence, update))
        self._sequence += 1
        self._mark_busy(worker_id)
        self.bookkeeping_s += time.perf_counter() - started

    def _task_start(self, snapshot: Snapshot, duration_s: float) -> float:
        """When a task of ``duration_s`` dispatched now starts: at once, every worker or
        client being a device of its own (a measured machine's runtime waits for its server
        and its executors)."""
        del snapshot, duration_s
        return self.clock

    def _mark_busy(self, worker_id: int) -> None:
        self.busy[worker_id] = True
        self._idle.discard(worker_id)

    def _mark_free(self, worker_id: int) -> None:
        self.busy[worker_id] = False
        if worker_id not in self.busy_until:
            self._idle.add(worker_id)

    def _reset_idle(self) -> None:
        """The idle set from ``busy`` and ``busy_until`` (after a checkpoint is loaded)."""
        self._idle = {
            w for w, busy in enumerate(self.busy) if not busy and w not in self.busy_until
        }

    def next_update(self) -> Update:
        if not self._queue:
            raise RuntimeError("no task in flight and none started: the scheduler stalled")
        started = time.perf_counter()
        finish, _, update = heapq.heappop(self._queue)
        self.clock = finish
        self._mark_free(update.worker_id)
        self.bookkeeping_s += time.perf_counter() - started
        return update

    def settle(self) -> None:
        pass  # only the main process writes the global model

    def virtual_time(self) -> float | None:
        return self.clock

    def metrics(self) -> dict[str, float]:
        return {"perf/virtual_clock_s": self.bookkeeping_s}

    def worker_count(self) -> int:
        return len(self.workers)  # none kept for edge clients: each task builds its client

    def state_dict(self) -> dict[str, Any]:
        """The clock, the tasks in flight (already computed) and every worker's state."""
        return {
            "clock": self.clock,
            "busy": list(self.busy),
            "busy_until": sorted(self.busy_until.items()),
            "sequence": self._sequence,
            "queue": [(t, seq, update_to_state(u)) for t, seq, u in self._queue],
            "jitter": list(self.cost.jitter),
            "workers": [w.state_dict() for w in self.workers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict``'s; a damaged one (a field missing, of the wrong kind
        or for another number of workers) is a CheckpointError naming the field."""
        n = len(self.busy)  # the pool's workers (edge clients keep no worker object)
        clock = check.real(check.entry(state, "clock", "runtime"), "runtime.clock", 0.0)
        busy = check.items(check.entry(state, "busy", "runtime"), "runtime.busy", length=n)
        if not all(isinstance(b, bool) for b in busy):
            raise check.invalid("runtime.busy", "true or false per worker", busy)
        busy_until = {}
        for i, pair in enumerate(check.items(state.get("busy_until", []), "runtime.busy_until")):
            where = f"runtime.busy_until[{i}]"
            worker_id, until = check.items(pair, where, length=2)
            if check.count(worker_id, f"{where}[0]") >= n:
                raise check.invalid(f"{where}[0]", f"a worker id below {n}", worker_id)
            busy_until[worker_id] = check.real(until, f"{where}[1]", 0.0)
        sequence = check.count(check.entry(state, "sequence", "runtime"), "runtime.sequence")
        queue = []
        for i, task in enumerate(
            check.items(check.entry(state, "queue", "runtime"), "runtime.queue")
        ):
            where = f"runtime.queue[{i}]"
            finish, seq, update = check.items(task, where, length=3)
            update = update_from_state(update, f"{where}[2]")
            if update.worker_id >= n:
                raise check.invalid(
                    f"{where}[2].worker_id", f"a worker id below {n}", update.worker_id
                )
            queue.append(
                (check.real(finish, f"{where}[0]", 0.0), check.count(seq, f"{where}[1]"), update)
            )
        jitter = check.items(
            check.entry(state, "jitter", "runtime"), "runtime.jitter", length=len(self.cost.jitter)
        )
        if not all(isinstance(g, np.random.Generator) for g in jitter):
            raise check.invalid("runtime.jitter", "a random generator per worker", jitter)
        workers = check.items(
            check.entry(state, "workers", "runtime"), "runtime.workers", length=len(self.workers)
        )
        for i, worker_state in enumerate(workers):
            check.table(worker_state, f"runtime.workers[{i}]")

        self.clock, self.busy, self.busy_until = clock, busy, busy_until
        self._reset_idle()
        self._sequence = sequence
        self._queue = queue
        heapq.heapify(self._queue)
        self.cost.jitter = jitter
        for i, (worker, worker_state) in enumerate(zip(self.workers, workers, strict=True)):
            worker.load_state_dict(worker_state, f"runtime.workers[{i}]")

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
