"""The serial runtime on a measured machine: shared cores, a server queue, Hogwild!'s run-ahead.

``--cluster profile.json`` (written by ``hybrid calibrate``) replaces the cost model's
default constants with one machine's measured costs, and the clock imitates how the real
runtime the profile names (``processes`` or ``ray``) spends that machine's time:

Shared cores
    On a profile with a time slice (``quantum_s``, what the kernel gives a task while
    others wait) the C cores run the busy workers round-robin, as the kernel does: a
    worker whose task starts waits its turn in a first-come first-served queue; on a core
    it runs at full speed until its task ends or its slice runs out, and then, if another
    waits, goes to the back of the queue. A task shorter than what is left of its slice
    so runs whole, one per core: N short tasks on C cores end in waves of C. A task's span
    starts when it first holds a core (a real worker starts its task when it first runs).
    Without a slice (profiles written before it was modelled, and ray's) N workers share
    C cores by processor sharing instead: while n of them are busy each advances at
    min(1, C / n) CPU-seconds per second. Either way the main process, asleep between
    updates, takes a core the moment it has work (Linux lets a task that has slept
    preempt a busy one): the worker that got its core last waits meanwhile (sharing: the
    workers share the other C − 1); with ``main_preempts`` false it is one more job
    instead. A task is CPU work W = (env steps × step cost + task overhead [+ apply under
    Hogwild!]) × factor × growth, the factor drawn from the measured distribution and
    the growth the profile's for N workers on C cores (``ClusterProfile.cost_growth``:
    the contention up to C, past it the cost measured at 2C and 4C, interpolated); it
    ends when that much work is done.
The server is one queue
    The main process handles one thing at a time, in order: an update that finishes
    while it is busy waits. Per update it spends ``receive_s``; per optimizer step it
    takes, ``apply_s``; per new version it dispatches, ``snapshot_s``; per task it sends,
    ``dispatch_s``. A worker's next task starts when its dispatch has been sent, so what
    the server spends is time the worker waits.
Hogwild! (processes, async, lock-free, no codec)
    A worker applies its own update (``apply_s`` is part of its task) and starts its next
    task the moment it has (run-ahead): its read of θ is its previous finish, whatever the
    main process is doing. On time slices it never sleeps: it keeps its core and its
    slice from one task to the next, the read delay spent there. The main process only
    counts and logs. A task cannot be applied before the main process has claimed it
    (dispatched the worker again): a started-ahead task that is done before its claim
    ends at the claim.

Edge clients (``--clients K``, ``ProfiledClientsRuntime``)
    The K clients take turns on the ``workers`` executors, as on the real runtimes: a
    dispatched client waits for the server to send its task, then for a free executor.
    Its local training costs what the profile says that many env steps and optimizer steps
    cost in a worker, each step's cost drawn from the measured distribution, times the
    client's slowness (its federated profile or trace); its link adds θ's download and its
    Δ's upload, as on a built-in cluster. Round deadlines apply as they do there. The
    server spends ``receive_s`` per update, ``apply_s`` per step, ``snapshot_s`` per
    version and ``dispatch_s`` per task; each executor is taken to hold a core of its own.

Tasks are still computed when the loop dispatches them (from the θ the loop holds then)
and their updates handed to the loop in the order they finish, so the run stays
bit-for-bit reproducible: nothing here reads a wall clock.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.checkpoint import update_from_state, update_to_state
from hybrid.clients import ClientCostModel, ClientSettings
from hybrid.cluster_profile import ClusterProfile
from hybrid.envs import EnvInfo
from hybrid.protocol import CollectExperience, Payload, Snapshot, TrainLocally, Update
from hybrid.runtimes.pool import EdgeClients
from hybrid.runtimes.serial import JITTER, SPEEDS, SerialRuntime
from hybrid.seeding import CLOCK, stream

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
        self.waking: dict[int, tuple[float, float | None]] = {}
        """Jobs that start later without holding a core meanwhile (a process still being
        woken): job -> (when, work)."""

    def rate(self, job: int) -> float:
        """CPU-seconds ``job`` gets per second, now."""
        if self.favored is None or self.favored not in self.work:
            return min(1.0, self.cores / len(self.work))
        if job == self.favored:
            return 1.0
        others = len(self.work) - 1
        return min(1.0, (self.cores - 1) / others)

    def start(self, job: int, work: float | None = None, at: float | None = None) -> None:
        """Start ``job`` now, or at ``at`` (it holds no core until then)."""
        if job in self.work or job in self.waking:
            raise ValueError(f"job {job} is already running")
        if at is not None and at > self.now:
            self.waking[job] = (at, work)
            return
        self.work[job] = work
        self.done[job] = 0.0

    def set_work(self, job: int, work: float) -> None:
        if job in self.waking:
            self.waking[job] = (self.waking[job][0], work)
        else:
            self.work[job] = work

    def next_wake(self) -> float | None:
        """When the first waking job starts, if any."""
        return min((at for at, _ in self.waking.values()), default=None)

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
        for job, (at, work) in sorted(self.waking.items(), key=lambda item: item[1][0]):
            if at <= until:  # woken: from now on it shares the cores
                del self.waking[job]
                self.work[job] = work
                self.done[job] = 0.0

    def next_change(self) -> float | None:
        """When the cores next change hands without a job starting or ending (a time
        slice running out): never, under processor sharing."""
        return None

    def first_ran(self, job: int) -> float | None:
        """When ``job`` first held a core, where that differs from its start (a job that
        waited its turn); None: it ran from its start."""
        del job
        return None

    def finish(self, job: int) -> None:
        del self.work[job], self.done[job]

    def state_dict(self) -> dict[str, Any]:
        # a list of jobs, in start order: the order breaks ties
        return {
            "now": self.now,
            "jobs": [[j, w, self.done[j]] for j, w in self.work.items()],
            "waking": [[j, at, w] for j, (at, w) in self.waking.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.now = float(state["now"])
        self.work = {int(job): work for job, work, _ in state["jobs"]}
        self.done = {int(job): float(done) for job, _, done in state["jobs"]}
        self.waking = {int(job): (float(at), work) for job, at, work in state.get("waking", [])}


SLICE_EPSILON_S = 1e-12
"""Below this, what is left of a slice or a task is taken as none: float sums of task
costs would otherwise leave a task a rounding error short of its end at its slice's."""


class TimeSlicedCores(SharedCores):
    """Jobs on ``cores`` cores taking turns, as the kernel's scheduler runs them: a job on a
    core runs at full speed for up to ``quantum`` seconds, then goes to the back of the
    queue of runnable jobs if one waits (otherwise it keeps its core for another slice); a
    job that ends within what is left of its slice ends then; a job that starts waits in
    that queue, first come first served, for a free core. The ``favored`` job (the main
    process) takes a core the moment it starts: the job that got its core last waits at
    the front of the queue, keeping what was left of its slice.
    """

    def __init__(self, cores: int, quantum: float, favored: int | None = None) -> None:
        super().__init__(cores, favored)
        if not quantum > 0:
            raise ValueError(f"quantum must be > 0 seconds, got {quantum}")
        self.quantum = quantum
        self.running: list[int] = []
        """Jobs holding a core, in the order they got it."""
        self.queue: list[int] = []
        """Runnable jobs waiting for a core, first in line first."""
        self.slice_left: dict[int, float] = {}
        """What is left of a job's slice (on a core, or preempted by the favored job)."""
        self.ran_since: dict[int, float] = {}
        """When each job first held a core."""

    def start(self, job: int, work: float | None = None, at: float | None = None) -> None:
        super().start(job, work, at)
        if job in self.work:
            self._enqueue(job)

    def _enqueue(self, job: int) -> None:
        if job == self.favored:  # takes a core now; the last to get one gives it up
            self.running.append(job)
            self._give_core(job)
            workers = [j for j in self.running if j != job]
            if len(self.running) > self.cores and workers:
                paused = workers[-1]
                self.running.remove(paused)
                self.queue.insert(0, paused)
        else:
            self.queue.append(job)
        self._fill()

    def _give_core(self, job: int) -> None:
        self.ran_since.setdefault(job, self.now)
        self.slice_left.setdefault(job, self.quantum)

    def _fill(self) -> None:
        while self.queue and len(self.running) < self.cores:
            job = self.queue.pop(0)
            self.running.append(job)
            self._give_core(job)

    def _left(self, job: int) -> float | None:
        work = self.work[job]
        return None if work is None else max(work - self.done[job], 0.0)

    def _tolerance(self) -> float:
        """What counts as no time at all now: late in a long run the clock's own rounding
        (a few units in the last place) is above SLICE_EPSILON_S."""
        return max(SLICE_EPSILON_S, 8 * math.ulp(self.now))

    def _ends_in_slice(self, job: int) -> bool:
        left = self._left(job)
        if left is None:
            return False
        return job == self.favored or left <= self.slice_left[job] + self._tolerance()

    def next_finish(self) -> tuple[float, int] | None:
        best: tuple[float, int] | None = None
        for job in self.work:  # start order: ties go to the job started first
            left = self._left(job)
            if left is None:
                continue
            if job in self.running and (self._ends_in_slice(job) or not self.queue):
                # (nobody waits: its slices are renewed in place until it ends)
                end = self.now + left
            elif left <= self._tolerance():  # its work was done before anybody set it
                end = self.now
            else:
                continue
            if best is None or end < best[0]:
                best = (end, job)
        return best

    def next_change(self) -> float | None:
        if not self.queue:
            return None  # nobody waits: a slice that runs out is renewed in place
        ends = [
            self.now + max(self.slice_left[job], 0.0)
            for job in self.running
            if job != self.favored and not self._ends_in_slice(job)
        ]
        return min(ends, default=None)

    def advance(self, until: float) -> None:
        if until < self.now:
            raise ValueError(f"time runs forward: {until} < {self.now}")
        elapsed = until - self.now
        for job in self.running:
            self.done[job] += elapsed
            self.slice_left[job] -= elapsed
        self.now = until
        tolerance = self._tolerance()
        turns = [j for j in self.running if j != self.favored and not self._finishing(j)]
        for job in turns:
            if self.slice_left[job] < -tolerance:
                # its slices ran out while nobody waited: renewed in place, in phase
                overrun = -self.slice_left[job]
                self.slice_left[job] = self.quantum - overrun % self.quantum
        for job, (at, work) in sorted(self.waking.items(), key=lambda item: item[1][0]):
            if at <= until:  # woken: it joins the queue
                del self.waking[job]
                self.work[job] = work
                self.done[job] = 0.0
                self._enqueue(job)
        for job in turns:
            if job not in self.running or self.slice_left[job] > tolerance:
                continue
            if self.queue:  # its turn is over: to the back of the queue
                self.running.remove(job)
                del self.slice_left[job]
                self.queue.append(job)
            else:  # nobody waits: another slice
                self.slice_left[job] = self.quantum
        self._fill()

    def _finishing(self, job: int) -> bool:
        """Its work is done: it ends now (``finish`` takes it off its core)."""
        left = self._left(job)
        return left is not None and left <= self._tolerance()

    def first_ran(self, job: int) -> float | None:
        return self.ran_since.get(job)

    def restart(self, job: int) -> None:
        """``job`` goes on to new work not known yet without giving up its place (a
        Hogwild! worker runs ahead without sleeping: it keeps its core and its slice)."""
        self.work[job] = None
        self.done[job] = 0.0
        if job in self.running:
            self.ran_since[job] = self.now
        else:
            self.ran_since.pop(job, None)

    def finish(self, job: int) -> None:
        super().finish(job)
        if job in self.running:
            self.running.remove(job)
        elif job in self.queue:
            self.queue.remove(job)
        self.slice_left.pop(job, None)
        self.ran_since.pop(job, None)
        self._fill()

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {
            "running": list(self.running),
            "queue": list(self.queue),
            "slice_left": sorted(self.slice_left.items()),
            "ran_since": sorted(self.ran_since.items()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.running = [int(job) for job in state["running"]]
        self.queue = [int(job) for job in state["queue"]]
        self.slice_left = {int(job): float(left) for job, left in state["slice_left"]}
        self.ran_since = {int(job): float(at) for job, at in state["ran_since"]}


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
        favored = SERVER if profile.main_preempts else None
        self.cores = (
            TimeSlicedCores(profile.cores, profile.quantum_s, favored)
            if profile.quantum_s > 0
            else SharedCores(profile.cores, favored)
        )
        self._running: dict[int, Update] = {}
        """Tasks on the cores, computed at dispatch, by worker."""
        self._started_ahead: dict[int, float] = {}
        """Hogwild!: workers running a task the loop has not dispatched yet, since when."""
        self._arrived: list[tuple[float, int, Update]] = []
        """Finished tasks the server has not taken yet, earliest first."""
        self._delivering: list[tuple[float, int, int, Update]] = []
        """Hogwild!: finished tasks whose result reaches the loop after the read delay."""
        # cost growth beyond fair sharing, measured with N workers on C cores
        self.growth = profile.cost_growth(settings.workers)
        self._charged_version = version()
        self._unlearned_env_steps = 0
        """Env steps of the experience received since the last optimizer step, which the
        main process's learner trains on at its next (``learn_s`` each)."""
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
        # a federated round's task takes local_steps optimizer steps, each with its overhead;
        # an actor's only acts and sends (the learner's loss is the main process's work)
        task = snapshot.task
        steps = task.steps if isinstance(task, TrainLocally) else 1
        overhead = profile.task_overhead_s
        if isinstance(task, CollectExperience) and profile.collect_overhead_s is not None:
            overhead = profile.collect_overhead_s
        work = update.env_steps * profile.step_cost_s + steps * overhead
        if self.hogwild:
            work += profile.apply_s  # the worker steps the shared θ itself
        work *= self.growth * self._cost_factor(worker_id)
        if worker_id in self._started_ahead:  # this dispatch is the claim of a running task
            update.started_s = self._started_ahead.pop(worker_id)
            self.cores.set_work(worker_id, work)
        else:
            # the worker, asleep on its pipe, starts once woken: latency, not CPU
            update.started_s = self.cores.now + self._wake_s(worker_id)
            self.cores.start(worker_id, work, at=update.started_s)
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
        while not self._arrived:
            if not self._next_event():
                raise RuntimeError("no task in flight and none started: the scheduler stalled")
        _, _, update = heapq.heappop(self._arrived)
        self._serve(self.profile.receive_s)
        if update.kind is Payload.TRAJECTORY:  # the learner trains on it when its batch is full
            self._unlearned_env_steps += update.env_steps
        self._mark_free(update.worker_id)
        self.bookkeeping_s += time.perf_counter() - started
        return update

    def virtual_time(self) -> float | None:
        return self.cores.now

    def summary_fields(self) -> dict[str, Any]:
        """What summary.json cites of the machine the clock ran on: the profile's hash and
        how far its clock was from the real runs it was checked against."""
        return {
            "cluster_profile_sha256": self.profile.digest(),
            "cluster_profile_errors": self.profile.fit.get("residuals"),
        }

    # -- what a task costs --

    def _cost_factor(self, worker_id: int) -> float:
        """A task's cost over the mean: drawn from the measured quantiles (inverse CDF,
        linear between them) or the lognormal of mean 1."""
        rng = self.cost.jitter[worker_id]
        quantiles = self.profile.task_cost_quantiles
        if quantiles:
            return _inverse_cdf(quantiles, float(rng.random()))
        sigma = self.profile.jitter_sigma
        if sigma:  # a lognormal factor of mean 1: the measured costs are means
            return float(rng.lognormal(-sigma * sigma / 2, sigma))
        return 1.0

    def _wake_s(self, worker_id: int) -> float:
        quantiles = self.profile.wake_s_quantiles
        if not quantiles:
            return 0.0
        return _inverse_cdf(quantiles, float(self.cost.jitter[worker_id].random()))

    # -- the server and the cores --

    def _next_event(self) -> bool:
        """Let time pass to the next event (a task ends, a worker wakes, a Hogwild! result
        reaches the main process) and handle it; False when nothing is pending."""
        upcoming = self.cores.next_finish()
        events: list[tuple[float, int, int]] = []  # (when, priority, job): ends first on a tie
        if upcoming is not None:
            events.append((upcoming[0], 0, upcoming[1]))
        if (wake := self.cores.next_wake()) is not None:
            events.append((wake, 1, 0))
        if self._delivering:
            events.append((self._delivering[0][0], 2, 0))
        if (change := self.cores.next_change()) is not None:
            events.append((change, 3, 0))  # a slice runs out: advancing hands the core on
        if not events:
            return False
        when, kind, job = min(events)
        self.cores.advance(when)
        if kind == 0:
            if job == SERVER:
                self.cores.finish(SERVER)
            else:
                self._finished(job)
        elif kind == 2:
            _, _, worker_id, update = heapq.heappop(self._delivering)
            self._deliver(worker_id, update)
        return True

    def _serve(self, seconds: float) -> None:
        """The main process spends ``seconds`` of CPU now; tasks that end meanwhile queue."""
        if seconds <= 0:
            return
        self.cores.start(SERVER, seconds)
        while SERVER in self.cores.work:
            self._next_event()

    def _finished(self, worker_id: int) -> None:
        update = self._running.pop(worker_id)
        ran = self.cores.first_ran(worker_id)
        if ran is not None:  # a real span starts when the worker process first runs
            update.started_s = max(update.started_s, ran)
        if self.hogwild and isinstance(self.cores, TimeSlicedCores):
            # it claims, applies and reads on its core, then runs on: it keeps its turn
            self.cores.restart(worker_id)
        else:
            self.cores.finish(worker_id)
        now = self.cores.now
        delay = self.profile.read_delay_s if self.hogwild else 0.0
        if delay > 0:  # the result reaches the loop, and the worker reads θ, a moment later
            heapq.heappush(self._delivering, (now + delay, self._sequence, worker_id, update))
            self._sequence += 1
        else:
            self._deliver(worker_id, update)

    def _deliver(self, worker_id: int, update: Update) -> None:
        now = self.cores.now
        # A task's span ends when its result reaches the loop: for a Hogwild! worker, as in
        # the real runtime's spans, after the read delay (the claim and its own apply)
        update.cost_s = now - update.started_s
        heapq.heappush(self._arrived, (now, self._sequence, update))
        self._sequence += 1
        if self.hogwild:  # run-ahead: the next task starts now, before the loop knows of it
            if isinstance(self.cores, TimeSlicedCores):
                self.cores.restart(worker_id)  # the read delay was spent on its core
            else:
                self.cores.start(worker_id)
            self._started_ahead[worker_id] = now

    def _charge_applies(self) -> None:
        """The optimizer steps the loop took since we last looked were the server's work."""
        version = self.version()
        steps = version - self._charged_version
        self._charged_version = version
        if steps > 0 and not self.hogwild:  # under Hogwild! the workers applied them
            # a learner's steps trained on the experience received since the last ones
            learning = self.profile.learn_s * self._unlearned_env_steps
            self._unlearned_env_steps = 0
            self._serve(steps * self.profile.apply_s + learning)

    # -- checkpoints --

    def state_dict(self) -> dict[str, Any]:
        return {
            "cores": self.cores.state_dict(),
            "busy": list(self.busy),
            "sequence": self._sequence,
            "running": [(w, update_to_state(u)) for w, u in self._running.items()],
            "started_ahead": sorted(self._started_ahead.items()),
            "arrived": [(t, seq, update_to_state(u)) for t, seq, u in self._arrived],
            "delivering": [(t, seq, w, update_to_state(u)) for t, seq, w, u in self._delivering],
            "charged_version": self._charged_version,
            "unlearned_env_steps": self._unlearned_env_steps,
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
        self._delivering = [
            (t, seq, int(w), update_from_state(u)) for t, seq, w, u in state.get("delivering", [])
        ]
        heapq.heapify(self._delivering)
        self._charged_version = int(state["charged_version"])
        self._unlearned_env_steps = int(state.get("unlearned_env_steps", 0))  # older: none
        self._published_version = state["published_version"]
        self.cost.jitter = list(state["jitter"])
        for i, (worker, worker_state) in enumerate(
            zip(self.workers, state["workers"], strict=True)
        ):
            worker.load_state_dict(worker_state, f"runtime.workers[{i}]")


CLIENT_COSTS = max(SPEEDS, JITTER) + 1
"""The clock's stream of a client task's cost draws on a profile, beside serial.py's."""


class ProfiledClientCost(ClientCostModel):
    """A client task's virtual duration on a measured profile: download θ, train, upload Δ.

    train = Σ over its optimizer steps of (that step's env steps × step cost + task
    overhead) × a cost factor drawn from the profile's measured distribution (the
    lognormal of mean 1 without one), times the client's slowness; a wake-up latency
    drawn from the profile's round trips comes first. Links as ``ClientCostModel``'s. A
    (client, version) pair has its own stream: no per-client state is kept.
    """

    def __init__(self, settings: ClientSettings, profile: ClusterProfile) -> None:
        super().__init__(settings)
        self.profile = profile

    def duration(
        self,
        client_id: int,
        env_steps: int,
        nbytes: int,
        download_nbytes: int,
        updates: int,
        version: int,
    ) -> tuple[float, float]:
        """(wake-up + download + training seconds, upload seconds) of one task."""
        profile, client = self.profile, self.profiles[client_id]
        seq = stream(self.settings.seed, CLOCK, CLIENT_COSTS, client_id, max(version, 0))
        rng = np.random.Generator(np.random.PCG64(seq))
        steps = max(updates, 1)
        # each local step is one worker task's worth of work: its own draw of the cost
        if profile.task_cost_quantiles:
            factors = [_inverse_cdf(profile.task_cost_quantiles, u) for u in rng.random(steps)]
            factor = float(np.mean(factors))
        elif profile.jitter_sigma:
            sigma = profile.jitter_sigma
            factor = float(np.mean(rng.lognormal(-sigma * sigma / 2, sigma, size=steps)))
        else:
            factor = 1.0
        work = env_steps * profile.step_cost_s + updates * profile.task_overhead_s
        wake = (
            _inverse_cdf(profile.wake_s_quantiles, float(rng.random()))
            if profile.wake_s_quantiles
            else 0.0
        )
        download = download_nbytes * 8 / (client.downlink_mbps * 1e6)
        upload = nbytes * 8 / (client.uplink_mbps * 1e6)
        return float(wake + download + work * factor * client.slowness), float(upload)


class ProfiledClientsRuntime(SerialRuntime):
    """Edge clients on a measured profile: the serial runtime's events (deadlines included),
    with the profile's task costs, its server's costs and ``workers`` executors (see the
    module docstring)."""

    def __init__(
        self,
        settings: RuntimeSettings,
        info: EnvInfo,
        pool: EdgeClients,
        profile: ClusterProfile,
        version: Callable[[], int],
    ) -> None:
        super().__init__(settings, info, pool)
        self.profile = profile
        self.version = version
        self.client_cost = ProfiledClientCost(pool.clients, profile)
        self.server_free = 0.0
        """When the main process is done with what it was given so far."""
        self.executor_free = [0.0] * settings.workers
        """When each executor is done with the client task it was given last."""
        self._charged_version = version()
        self._published_version: int | None = None

    def _task_start(self, snapshot: Snapshot, duration_s: float) -> float:
        self._charge_applies()
        profile = self.profile
        server = max(self.clock, self.server_free)
        if snapshot.version != self._published_version:
            server += profile.snapshot_s
            self._published_version = snapshot.version
        self.server_free = server = server + profile.dispatch_s
        # the waiting clients go to the first executor free, in the order they were sent
        executor = min(range(len(self.executor_free)), key=self.executor_free.__getitem__)
        start = max(server, self.executor_free[executor])
        self.executor_free[executor] = start + duration_s
        return start

    def next_update(self) -> Update:
        if not self._queue:
            raise RuntimeError("no task in flight and none started: the scheduler stalled")
        self._charge_applies()
        started = time.perf_counter()
        finish, _, update = heapq.heappop(self._queue)
        # one server: a result that arrives while it is busy waits its turn
        self.server_free = max(finish, self.server_free, self.clock) + self.profile.receive_s
        self.clock = self.server_free
        self._mark_free(update.worker_id)
        self.bookkeeping_s += time.perf_counter() - started
        return update

    def _charge_applies(self) -> None:
        """The optimizer steps the loop took since we last looked were the server's work."""
        version = self.version()
        steps = version - self._charged_version
        self._charged_version = version
        if steps > 0:
            self.server_free = max(self.server_free, self.clock) + steps * self.profile.apply_s

    def summary_fields(self) -> dict[str, Any]:
        return {
            "cluster_profile_sha256": self.profile.digest(),
            "cluster_profile_errors": self.profile.fit.get("residuals"),
        }

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {
            "server_free": self.server_free,
            "executor_free": list(self.executor_free),
            "charged_version": self._charged_version,
            "published_version": self._published_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.server_free = float(state["server_free"])
        self.executor_free = [float(t) for t in state["executor_free"]]
        self._charged_version = int(state["charged_version"])
        self._published_version = state["published_version"]


def _inverse_cdf(quantiles: tuple[float, ...], u: float) -> float:
    """The value at probability ``u`` of a distribution given by evenly spaced quantiles
    (the first at 0, the last at 1), linear between them."""
    position = u * (len(quantiles) - 1)
    low = min(int(position), len(quantiles) - 2)
    weight = position - low
    return quantiles[low] * (1 - weight) + quantiles[low + 1] * weight


__all__ = [
    "ProfiledClientCost",
    "ProfiledClientsRuntime",
    "ProfiledSerialRuntime",
    "SharedCores",
    "TimeSlicedCores",
]
