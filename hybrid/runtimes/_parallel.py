"""What the real parallel runtimes (processes, ray) share: the ``Supervisor`` (busy ids, task
placement, result order, restarts, fault counters, checkpoints), core counts, warm-up, wire helpers.

Nothing here imports ``multiprocessing`` or ``ray``; the runtimes that do import
this module, so the restart policy and the fault model are one piece of code.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import heapq
import logging
import math
import pickle
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hybrid.cluster_profile import physical_cores
from hybrid.core.worker import Worker
from hybrid.protocol import CollectExperience, Payload, Snapshot, TrainLocally, Update
from hybrid.runtimes import RuntimeDefaults
from hybrid.seeding import FAULTS, stream
from hybrid.traces import Trace, emulated_duration, load_trace

if TYPE_CHECKING:
    from hybrid.runtimes.pool import WorkerPool
    from hybrid.runtimes.settings import RuntimeSettings

log = logging.getLogger("hybrid.runtimes")


MAX_CONSECUTIVE_FAILURES = 3
"""A worker that fails this many times in a row without finishing a task is a bug, not bad luck:
the run stops with the worker's last error instead of restarting it forever. Kills injected on
purpose (``inject_worker_faults``, ``kill_worker``) do not count."""


def warn_if_oversubscribed(workers: int, runtime: str) -> None:
    cores = physical_cores()
    if workers > cores:
        warnings.warn(
            f"workers={workers} on the {runtime} runtime exceeds the {cores} physical cores of "
            "this machine: each worker is a busy process, so the extra ones time-share cores. "
            "Every context switch evicts a worker's model and envs from the cache and queues "
            "it behind the others, so env steps per second do not grow while staleness does. "
            f"Use --workers {cores} for throughput, or the serial runtime to simulate more "
            "workers.",
            RuntimeWarning,
            stacklevel=3,
        )


def warm_up(worker: Worker) -> None:
    """Run one throw-away task so lazy initialisation is paid before any clock starts.

    A fresh process pays on its first task for the autograd engine, the allocator and the
    envs' first steps. The task's update is discarded and the worker's task count reset,
    so the first real update is still task 0.
    """
    worker.run_task(Snapshot(worker.flat.flat.clone(), -1))
    worker.tasks_done = 0


def update_record(update: Update) -> dict[str, Any]:
    """An Update's fields but the payload, which each runtime moves its own way."""
    return {
        f.name: getattr(update, f.name) for f in dataclasses.fields(Update) if f.name != "payload"
    }


class FaultInjector:
    """Decides, seeded by the run's seed, whether a task's worker is SIGKILLed (fault studies)."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = np.random.default_rng(stream(seed, FAULTS))

    def strike(self) -> bool:
        return self.rate > 0 and bool(self.rng.random() < self.rate)


@dataclasses.dataclass
class FaultCounters:
    """The figures a parallel runtime adds to every training row."""

    restarts: int = 0
    lost_updates: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {"sched/worker_restarts": self.restarts, "sched/lost_updates": self.lost_updates}


def check_failures(worker_id: int, failures: int, last_error: str) -> None:
    """Raise once a worker has failed too often in a row to be worth restarting again."""
    if failures >= MAX_CONSECUTIVE_FAILURES:
        raise RuntimeError(
            f"worker {worker_id} failed {failures} times in a row without finishing a task; "
            f"giving up. Last error:\n{last_error or '(none reported: the process died)'}"
        )


def log_restart(worker_id: int, incarnation: int, reason: str, lost: bool) -> None:
    what = "its in-flight update is lost and the task re-runs" if lost else "it was idle"
    log.warning(
        "worker %d (incarnation %d) %s; restarted as incarnation %d with a fresh seed stream; %s",
        worker_id,
        incarnation,
        reason,
        incarnation + 1,
        what,
    )


def dumps_message(message: Any) -> bytes:
    """A task or a result, for a worker's pipe or connection: plain pickle, as they hold no
    tensors (``pack`` turns them into numpy arrays).

    ``Connection.send`` builds a ``ForkingPickler`` per message (~3 µs against ~1 µs),
    whose only gain, moving tensors into shared memory, these messages never need.
    """
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def payload_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor that owns a writable copy of ``array`` (an array may come read-only, from
    Ray's object store, or share the buffer of the message it arrived in)."""
    return torch.from_numpy(np.array(array, copy=True))


@dataclasses.dataclass(frozen=True)
class TensorWire:
    """A tensor on its way to another process, as a numpy array.

    Plain pickling of an array is a memcpy; a pickled tensor would instead be moved into
    a new shared-memory segment and its file descriptor passed over a socket (torch's
    multiprocessing reducers), which costs far more for the small arrays sent here.
    """

    array: np.ndarray


def pack(obj: Any) -> Any:
    """``obj`` with every tensor inside it (dicts, lists, tuples, dataclasses) as a TensorWire."""

    def to_wire(tensor: torch.Tensor) -> Any:
        try:
            return TensorWire(tensor.detach().numpy())
        except TypeError:  # a dtype numpy lacks (bfloat16): let torch pickle it
            return tensor

    return _map(obj, torch.Tensor, to_wire)


def unpack(obj: Any) -> Any:
    """The inverse of ``pack``; every array is copied, so the tensors own writable memory."""
    return _map(obj, TensorWire, lambda wire: payload_tensor(wire.array))


def _map(obj: Any, kind: type, fn: Any) -> Any:
    if isinstance(obj, kind):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: _map(value, kind, fn) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_map(value, kind, fn) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map(value, kind, fn) for value in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: _map(getattr(obj, f.name), kind, fn) for f in dataclasses.fields(obj) if f.init
        }
        return dataclasses.replace(obj, **changes)
    return obj


# --- supervision: what processes and ray share -------------------------------------------------


@dataclass
class Outstanding:
    """A dispatched task with a deadline or a traced client, as the server times it: from
    its dispatch (an edge client's wait for a free executor included), on the runtime's clock."""

    dispatched_at: float
    deadline_s: float
    deadline_at: float
    """When the server stops waiting (inf: no deadline, or already told)."""
    told_late: bool
    base_version: int
    kind: Payload
    download_nbytes: int


def _payload_kind(snapshot: Snapshot) -> Payload:
    if isinstance(snapshot.task, TrainLocally):
        return Payload.DELTA
    if isinstance(snapshot.task, CollectExperience):
        return Payload.TRAJECTORY
    return Payload.GRADIENT


@dataclass(eq=False)  # identity: one executor
class Executor:
    """One worker process or actor as the main process sees it, across its incarnations: a
    persistent worker's own, or one that runs whichever edge client's task it is given."""

    worker_id: int
    """Its index; for persistent workers, also the id of the worker it runs."""
    incarnation: int = 0
    assigned: bool = False
    """The loop dispatched a task to it whose result has not come back; the task re-runs on
    a replacement if it fails."""
    task: Any = None
    """That task, as the backend sends it."""
    failures: int = 0
    """Unexpected failures since the last finished task."""
    killed_on_purpose: bool = False
    last_error: str = ""


class Supervisor(RuntimeDefaults, abc.ABC):
    """The part of a parallel runtime that is not about transport: which ids are busy, which
    executor runs a task, the order results are handed to the loop, restarts, fault counters,
    checkpoints. The processes and ray runtimes subclass it and supply their transport:

    - ``_spawn(e)``: start executor ``e``'s current incarnation (it reports ready later);
    - ``_send(e)``: send ``e.task`` (or hold it until ``e`` is ready);
    - ``_poll(timeout)``: wait for events (at most ``timeout`` s), hand each result to
      ``_deliver``, return those that failed;
    - ``_stop(e)``, ``_kill(e)``, ``_await_startup()``, ``close()``;
    - ``_prepare(snapshot)`` (at dispatch) and ``_task_for(prepared, client)`` (when an
      executor takes it): the task as it travels; ``_free(e)``: ready for a task;
      ``_lost(e)``: whether ``e`` died with a task under way; ``_died(e)``: why it stopped.

    Persistent workers (``pool.persistent``) each have an executor of their own, worker id
    = index. Edge clients (ids 0..K-1) share the ``workers`` executors: a dispatched client
    waits in a queue until an executor is free.
    """

    executors: list[Any]

    def __init__(self, settings: RuntimeSettings, pool: WorkerPool, clock: Any) -> None:
        self.settings, self.pool = settings, pool
        self.executors = []
        self._clock = clock
        self._busy: set[int] = set()
        """Worker ids dispatched whose update is not yet handed to the loop (the scheduler's
        view): executor indices for persistent workers, client ids for edge clients."""
        self._waiting: collections.deque[tuple[Any, int]] = collections.deque()
        """Edge-client tasks (prepared snapshot, client) waiting for a free executor."""
        self._arrived: list[tuple[float, int, Update]] = []
        self._sequence = 0  # ties in finish time resolve in arrival order
        self._faults = FaultInjector(settings.inject_worker_faults, settings.seed)
        self.counters = FaultCounters()
        self._origin = clock()  # reset once the workers are warm: the run begins
        self._outstanding: dict[int, Outstanding] = {}
        """Tasks timed from their dispatch: those with a deadline, and every traced client's."""
        self._held: list[tuple[float, int, Update]] = []
        """Finished results of traced clients, held until their traced duration has passed."""
        self._trace: Trace | None = None
        clients = getattr(pool, "clients", None)
        if not pool.persistent and clients is not None and clients.client_trace:
            self._trace = load_trace(clients.client_trace, pool.size)

    # -- the Runtime protocol --

    def idle_workers(self) -> list[int]:
        busy = self._busy
        return [w for w in range(self.pool.size) if w not in busy]

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        if worker_id in self._busy:
            raise RuntimeError(f"worker {worker_id} is busy; dispatch only idle workers")
        self._busy.add(worker_id)
        deadline_s = snapshot.task.deadline_s
        if deadline_s > 0 or self._trace is not None:
            now = self._clock()
            self._outstanding[worker_id] = Outstanding(
                dispatched_at=now,
                deadline_s=deadline_s,
                deadline_at=now + deadline_s if deadline_s > 0 else float("inf"),
                told_late=False,
                base_version=snapshot.version,
                kind=_payload_kind(snapshot),
                download_nbytes=snapshot.params.numel() * snapshot.params.element_size(),
            )
        prepared = self._prepare(snapshot)
        if self.pool.persistent:
            self._assign(self.executors[worker_id], self._task_for(prepared, None))
        else:  # an edge client: on the first free executor, or when one frees up
            self._waiting.append((prepared, worker_id))
            self._assign_waiting()

    def next_update(self) -> Update:
        """The earliest result; or, once a task's deadline has passed without its result, a
        stand-in that says so (``Update.overdue``): the scheduler closes the round without it
        while the worker computes on, and its result follows as an update of its own. The
        wait blocks until a result, the earliest deadline or a held result's release."""
        while True:
            now = self._clock()
            while self._held and self._held[0][0] <= now:
                released_at, sequence, held = heapq.heappop(self._held)
                heapq.heappush(self._arrived, (released_at, sequence, held))
            if self._arrived:
                break
            overdue = self._overdue(now)
            if overdue is not None:
                return overdue
            if not self._busy:
                raise RuntimeError("no task in flight and none started: the scheduler stalled")
            wakes = [task.deadline_at for task in self._outstanding.values()]
            if self._held:
                wakes.append(self._held[0][0])
            wake = min(wakes, default=float("inf"))
            timeout = None if wake == float("inf") else max(wake - now, 0.0)
            for executor in self._poll(timeout):
                self._restart(executor)
        _, _, update = heapq.heappop(self._arrived)
        self._busy.discard(update.worker_id)
        self._outstanding.pop(update.worker_id, None)
        return update

    def _overdue(self, now: float) -> Update | None:
        """The stand-in for the first task whose deadline has passed (told once)."""
        for worker_id, task in self._outstanding.items():
            if task.deadline_at <= now:
                task.deadline_at, task.told_late = float("inf"), True
                waited = self._past_deadline(now - task.dispatched_at, task)
                return Update(
                    worker_id=worker_id,
                    base_version=task.base_version,
                    payload=None,
                    env_steps=0,
                    kind=task.kind,
                    started_s=task.dispatched_at - self._origin,
                    cost_s=waited,
                    overdue=True,
                )
        return None

    def virtual_time(self) -> float | None:
        return None

    def metrics(self) -> dict[str, float]:
        return self.counters.as_metrics()

    # -- checkpoints --

    def worker_count(self) -> int:
        return len(self.executors)

    def state_dict(self) -> dict[str, Any]:
        """The counters and every executor's incarnation. Tasks in flight are not saved:
        after a resume every worker is idle, and the scheduler starts again what its state
        says is missing (a sync round's pending workers, for one)."""
        return {
            "incarnations": [e.incarnation for e in self.executors],
            "restarts": self.counters.restarts,
            "lost_updates": self.counters.lost_updates,
            "elapsed_s": self._clock() - self._origin,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the counters; replace every executor by its next incarnation: those
        started by ``__init__`` would replay the seed streams the run already used."""
        self.counters = FaultCounters(int(state["restarts"]), int(state["lost_updates"]))
        for executor, incarnation in zip(self.executors, state["incarnations"], strict=True):
            self._stop(executor)
            self._renew(executor, int(incarnation) + 1)
        self._await_startup()
        # the run's clock goes on where the checkpoint left it (a trace is read on it)
        self._origin = self._clock() - float(state.get("elapsed_s", 0.0))
        self._outstanding.clear()
        self._held.clear()

    # -- fault tests --

    def kill_worker(self, worker_id: int) -> None:
        """Kill executor ``worker_id`` now (fault injection); it is restarted when noticed."""
        executor = self.executors[worker_id]
        executor.killed_on_purpose = True
        self._kill(executor)

    # -- for the backends --

    def _assign(self, executor: Any, task: Any) -> None:
        executor.task = task
        executor.assigned = True
        self._send(executor)
        if self._faults.strike():
            self.kill_worker(executor.worker_id)

    def _assign_waiting(self) -> None:
        """Edge clients: hand waiting tasks to the executors that are free."""
        for executor in self.executors:
            if not self._waiting:
                return
            if not executor.assigned and self._free(executor):
                prepared, client = self._waiting.popleft()
                self._assign(executor, self._task_for(prepared, client))

    def _deliver(self, executor: Any, update: Update, finished_at: float) -> None:
        """A result came back from ``executor``: queue it for the loop, earliest finished
        first (unless nobody asked for it: a Hogwild! task discarded at the end)."""
        executor.failures = 0
        if not executor.assigned:
            return
        executor.assigned = False
        task = self._outstanding.get(update.worker_id)
        if task is not None:
            finished_at = self._time_from_dispatch(update, task, finished_at)
        queue = self._held if update.held_s > 0 else self._arrived
        heapq.heappush(queue, (finished_at, self._sequence, update))
        self._sequence += 1
        if not self.pool.persistent:
            self._assign_waiting()

    def _time_from_dispatch(self, update: Update, task: Outstanding, finished_at: float) -> float:
        """Time ``update`` as the server does, from its dispatch, so that it is late exactly
        when its deadline passed first; a traced client's result is held until its traced
        duration (measured compute / its speed + its links' transfers) has passed. Returns
        when the loop may have it."""
        received_at = self._clock()
        arrives_at = received_at
        if self._trace is not None:
            computed_s = finished_at - (update.started_s + self._origin)
            traced_s, upload_s = emulated_duration(
                self._trace.clients[update.worker_id],
                computed_s,
                update.nbytes,
                task.download_nbytes,
            )
            arrives_at = max(received_at, task.dispatched_at + traced_s)
            update.held_s = arrives_at - received_at
            update.upload_s = min(upload_s, arrives_at - task.dispatched_at)
        update.started_s = task.dispatched_at - self._origin
        update.cost_s = arrives_at - task.dispatched_at
        if task.told_late:
            update.cost_s = self._past_deadline(update.cost_s, task)
        return arrives_at

    @staticmethod
    def _past_deadline(waited_s: float, task: Outstanding) -> float:
        """``waited_s``, made strictly more than the deadline: the scheduler's rule for late
        is ``cost_s > deadline_s``, and a coarse clock may read exactly the deadline."""
        return max(waited_s, math.nextafter(task.deadline_s, math.inf))

    def _restart(self, executor: Any) -> None:
        """Count, log and replace a failed executor; its task re-runs on the replacement."""
        self._stop(executor)
        lost = self._lost(executor)
        reason = "was killed on purpose" if executor.killed_on_purpose else self._died(executor)
        self.counters.restarts += 1
        self.counters.lost_updates += lost
        log_restart(executor.worker_id, executor.incarnation, reason, lost)
        if not executor.killed_on_purpose:
            executor.failures += 1
            check_failures(executor.worker_id, executor.failures, executor.last_error)
        self._renew(executor, executor.incarnation + 1)

    def _renew(self, executor: Any, incarnation: int) -> None:
        executor.killed_on_purpose = False
        executor.last_error = ""
        executor.incarnation = incarnation
        self._spawn(executor)

    # -- what a backend supplies --

    @abc.abstractmethod
    def _prepare(self, snapshot: Snapshot) -> Any:
        """The snapshot as the backend keeps it for its tasks (at dispatch)."""

    @abc.abstractmethod
    def _task_for(self, prepared: Any, client: int | None) -> Any:
        """The task an executor is sent: the prepared snapshot, for ``client`` (None: the
        executor's own worker)."""

    @abc.abstractmethod
    def _spawn(self, executor: Any) -> None:
        """Start ``executor``'s current incarnation; it takes tasks once it reports ready."""

    @abc.abstractmethod
    def _send(self, executor: Any) -> None:
        """Send ``executor.task``, or hold it until ``executor`` is ready."""

    @abc.abstractmethod
    def _poll(self, timeout: float | None = None) -> list[Any]:
        """Wait for events (at most ``timeout`` seconds; None: until one), hand each result to
        ``_deliver``; return the executors that failed."""

    @abc.abstractmethod
    def _free(self, executor: Any) -> bool:
        """Whether ``executor`` can take a task now (started, warm, connected)."""

    @abc.abstractmethod
    def _lost(self, executor: Any) -> bool:
        """Whether ``executor`` failed with a task under way (counted as a lost update)."""

    @abc.abstractmethod
    def _died(self, executor: Any) -> str:
        """Why ``executor`` stopped, for the log (it was not killed on purpose)."""

    @abc.abstractmethod
    def _stop(self, executor: Any) -> None:
        """Make sure ``executor`` is gone and stop watching it."""

    @abc.abstractmethod
    def _kill(self, executor: Any) -> None:
        """Kill ``executor`` now (fault injection)."""

    @abc.abstractmethod
    def _await_startup(self) -> None:
        """Wait until every executor is ready (at start and on resume)."""
