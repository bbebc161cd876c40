"""The serial runtime on a measured machine: shared cores, a server queue, Hogwild!'s run-ahead.

``--cluster profile.json`` (written by ``hybrid calibrate``) replaces the cost model's
default constants with one machine's measured costs, and the clock imitates how the real
runtime the profile names (``processes`` or ``ray``) spends that machine's time:

Shared cores
    N workers share C cores by processor sharing: while n of them are busy, each advances
    at min(1, C / n) CPU-seconds per second. The main process, asleep between updates,
    takes a core the moment it has work (Linux lets a task that has slept preempt a busy
    one), and meanwhile the workers share the other C − 1; with ``main_preempts`` false
    it is one more of the n instead. A task is CPU work
    W = (env steps × step cost + task overhead [+ apply under Hogwild!]) × jitter (a
    lognormal factor of mean 1); it ends when that much work is done, so every start or
    end re-times the tasks in flight.
The server is one queue
    The main process handles one thing at a time, in order: an update that finishes
    while it is busy waits. Per update it spends ``receive_s``; per optimizer step it
    takes, ``apply_s``; per new version it dispatches, ``snapshot_s``; per task it sends,
    ``dispatch_s``. A worker's next task starts when its dispatch has been sent, so what
    the server spends is time the worker waits.
Hogwild! (processes, async, lock-free, no codec)
    A worker applies its own update (``apply_s`` is part of its task) and starts its next
    task the moment it has (run-ahead): its read of θ is its previous finish, whatever the
    main process is doing. The main process only counts and logs. A task cannot be
    applied before the main process has claimed it (dispatched the worker again): a
    started-ahead task that is done before its claim ends at the claim.

Tasks are still computed when the loop dispatches them (from the θ the loop holds then)
and their updates handed to the loop in the order they finish, so the run stays
bit-for-bit reproducible: nothing here reads a wall clock.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hybrid.checkpoint import update_from_state, update_to_state
from hybrid.cluster_profile import ClusterProfile
from hybrid.envs import EnvInfo
from hybrid.protocol import Snapshot, TrainLocally, Update
from hybrid.runtimes.serial import SerialRuntime

if TYPE_CHECKING:
    from hybrid.runtimes.pool import WorkerPool
    from hybrid.runtimes.settings import RuntimeSettings

SERVER = -1
"""The main process's job key among the workers' (0..N-1) on the shared cores."""


class SharedCores:
    """Jobs (integer keys) on ``cores`` cores under processor sharing.

    A job holds CPU work to do; with n jobs present each advances at min(1, cores / n)
    CPU-seconds per second of virtual time. A ``favored`` job (the main process, which
    sleeps between updates) instead runs at full speed whenever it has work, as Linux's
    scheduler lets a task that has slept preempt one that has not; the others share the
    cores left. A job may start without a known amount of work (a task started before
    anybody knows what it is): it advances like the others and cannot end until its work
    is set.
    """

    def __init__(self, cores: int, favored: int | None = None) -> None:
        self.cores = cores
        self.favored = favored
        self.now = 0.0
        self.work: dict[int, float | None] = {}
        self.done: dict[int, float] = {}

    def rate(self, job: int) -> float:
        """CPU-seconds ``job`` gets per second, now."""
        if self.favored is None or self.favored not in self.work:
            return min(1.0, self.cores / len(self.work))
        if job == self.favored:
            return 1.0
        others = len(self.work) - 1
        return min(1.0, (self.cores - 1) / others)

    def start(self, job: int, work: float | None = None) -> None:
        if job in self.work:
            raise ValueError(f"job {job} is already running")
        self.work[job] = work
        self.done[job] = 0.0

    def set_work(self, job: int, work: float) -> None:
        self.work[job] = work

    def next_finish(self) -> tuple[float, int] | None:
        """When the job that ends first ends, if nothing starts meanwhile, and which it is.

        Ties go to the job started first (dicts keep insertion order).
        """
        best: tuple[float, int] | None = None
        for job, work in self.work.items():
            if work is None:
                continue
            left = max(work - self.done[job], 0.0)
            rate = self.rate(job)
            if left > 0 and rate <= 0:
                continue  # waits for a core: ends after the favored job has
            end = self.now + (left / rate if left > 0 else 0.0)
            if best is None or end < best[0]:
                best = (end, job)
        return best

    def advance(self, until: float) -> None:
        """Let time pass to ``until`` (no later than ``next_finish``: nobody ends meanwhile)."""
        if until < self.now:
            raise ValueError(f"time runs forward: {until} < {self.now}")
        elapsed = until - self.now
        rates = {job: self.rate(job) for job in self.done}
        for job, rate in rates.items():
            self.done[job] += elapsed * rate
        self.now = until

    def finish(self, job: int) -> None:
        del self.work[job], self.done[job]

    def state_dict(self) -> dict[str, Any]:
        # a list of jobs, in start order: the order breaks ties
        return {"now": self.now, "jobs": [[j, w, self.done[j]] for j, w in self.work.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.now = float(state["now"])
        self.work = {int(job): work for job, work, _ in state["jobs"]}
        self.done = {int(job): float(done) for job, _, done in state["jobs"]}


class ProfiledSerialRuntime(SerialRuntime):
    """The serial runtime whose clock charges a measured profile (see the module docstring)."""

    def __init__(
        self,
        settings: RuntimeSettings,
        info: EnvInfo,
        pool: WorkerPool,
        profile: ClusterProfile,
        version: Callable[[], int],
        workers_apply: bool,
    ) -> None:
        """``version``: the global model's version now (the server is charged one apply per
        new version); ``workers_apply``: the scheduler lets every update be applied alone,
        so on the processes runtime, lock-free and without a codec, workers run Hogwild!."""
        super().__init__(settings, info, pool)
        self.profile = profile
        self.version = version
        self.hogwild = (
            profile.runtime == "processes"
            and workers_apply
            and settings.lock_free
            and settings.codec == "none"
        )
        self.cores = SharedCores(profile.cores, SERVER if profile.main_preempts else None)
        self._running: dict[int, Update] = {}
        """Tasks on the cores, computed at dispatch, by worker."""
        self._started_ahead: dict[int, float] = {}
        """Hogwild!: workers running a task the loop has not dispatched yet, since when."""
        self._arrived: list[tuple[float, int, Update]] = []
        """Finished tasks the server has not taken yet, earliest first."""
        self._charged_version = version()
        self._published_version: int | None = None

    # -- the Runtime protocol --

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        self._charge_applies()
        profile = self.profile
        if not self.hogwild and snapshot.version != self._published_version:
            self._serve(profile.snapshot_s)  # Hogwild!'s θ is live: nothing to copy
            self._published_version = snapshot.version
        self._serve(profile.dispatch_s)
        update = self.workers[worker_id].run_task(snapshot)
        started = time.perf_counter()
        # a federated round's task takes local_steps optimizer steps, each with its overhead
        task = snapshot.task
        steps = task.steps if isinstance(task, TrainLocally) else 1
        work = update.env_steps * profile.step_cost_s + steps * profile.task_overhead_s
        if self.hogwild:
            work += profile.apply_s  # the worker steps the shared θ itself
        sigma = profile.jitter_sigma
        if sigma:  # a lognormal factor of mean 1: the measured costs are means
            work *= float(self.cost.jitter[worker_id].lognormal(-sigma * sigma / 2, sigma))
        if worker_id in self._started_ahead:  # this dispatch is the claim of a running task
            update.started_s = self._started_ahead.pop(worker_id)
            self.cores.set_work(worker_id, work)
        else:
            update.started_s = self.cores.now
            self.cores.start(worker_id, work)
        update.upload_s = 0.0  # sending is CPU work, in the overhead
        self._running[worker_id] = update
        self._mark_busy(worker_id)
        self.bookkeeping_s += time.perf_counter() - started

    def dispatch_group(self, worker_ids: list[int], snapshot: Snapshot) -> None:
        # One task at a time: each is charged to the measured cores as it starts.
        for worker_id in worker_ids:
            self.dispatch(worker_id, snapshot)

    def next_update(self) -> Update:
        started = time.perf_counter()
        self._charge_applies()
        if not self._arrived:
            upcoming = self.cores.next_finish()
            if upcoming is None:
                raise RuntimeError("no task in flight and none started: the scheduler stalled")
            finish, worker_id = upcoming
            self.cores.advance(finish)
            self._finished(worker_id)
        _, _, update = heapq.heappop(self._arrived)
        self._serve(self.profile.receive_s)
        self._mark_free(update.worker_id)
        self.bookkeeping_s += time.perf_counter() - started
        return update

    def virtual_time(self) -> float | None:
        return self.cores.now

    # -- the server and the cores --

    def _serve(self, seconds: float) -> None:
        """The main process spends ``seconds`` of CPU now; tasks that end meanwhile queue."""
        if seconds <= 0:
            return
        self.cores.start(SERVER, seconds)
        while True:
            upcoming = self.cores.next_finish()
            assert upcoming is not None  # the server's own job has known work
            finish, job = upcoming
            self.cores.advance(finish)
            if job == SERVER:
                self.cores.finish(SERVER)
                return
            self._finished(job)

    def _finished(self, worker_id: int) -> None:
        self.cores.finish(worker_id)
        update = self._running.pop(worker_id)
        now = self.cores.now
        update.cost_s = now - update.started_s
        heapq.heappush(self._arrived, (now, self._sequence, update))
        self._sequence += 1
        if self.hogwild:  # run-ahead: the next task starts now, before the loop knows of it
            self.cores.start(worker_id)
            self._started_ahead[worker_id] = now

    def _charge_applies(self) -> None:
        """The optimizer steps the loop took since we last looked were the server's work."""
        version = self.version()
        steps = version - self._charged_version
        self._charged_version = version
        if steps > 0 and not self.hogwild:  # under Hogwild! the workers applied them
            self._serve(steps * self.profile.apply_s)

    # -- checkpoints --

    def state_dict(self) -> dict[str, Any]:
        return {
            "cores": self.cores.state_dict(),
            "busy": list(self.busy),
            "sequence": self._sequence,
            "running": [(w, update_to_state(u)) for w, u in self._running.items()],
            "started_ahead": sorted(self._started_ahead.items()),
            "arrived": [(t, seq, update_to_state(u)) for t, seq, u in self._arrived],
            "charged_version": self._charged_version,
            "published_version": self._published_version,
            "jitter": list(self.cost.jitter),
            "workers": [w.state_dict() for w in self.workers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cores.load_state_dict(state["cores"])
        self.busy = [bool(b) for b in state["busy"]]
        self._reset_idle()
        self._sequence = int(state["sequence"])
        self._running = {int(w): update_from_state(u) for w, u in state["running"]}
        self._started_ahead = {int(w): float(t) for w, t in state["started_ahead"]}
        self._arrived = [(t, seq, update_from_state(u)) for t, seq, u in state["arrived"]]
        heapq.heapify(self._arrived)
        self._charged_version = int(state["charged_version"])
        self._published_version = state["published_version"]
        self.cost.jitter = list(state["jitter"])
        for worker, worker_state in zip(self.workers, state["workers"], strict=True):
            worker.load_state_dict(worker_state)


__all__ = ["ProfiledSerialRuntime", "SharedCores"]
