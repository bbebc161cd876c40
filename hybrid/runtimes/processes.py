"""The processes runtime: one spawned process per worker, global parameters in shared memory.

How a task flows
----------------
The main process runs the one loop and owns the ``GlobalModel`` and its optimizer.
Three shared-memory tensors are created once and handed to every worker process:

``theta``  the published global parameters (flat float32),
``meta``   a seqlock word and the version of what ``theta`` holds,
``grads``  one gradient slot per worker.

``dispatch`` publishes the snapshot into ``theta`` (a 36 KB copy, once per version, so
the N workers of a ``sync`` round share one publication) and sends the worker a
one-word message through its pipe. The worker reads θ *from shared memory* when it
starts, tags its update with the version it read, writes the gradient into its own
slot and sends back a small record (env steps, episode returns, losses, timing).
Nothing of parameter size is ever pickled: a pickled tensor would travel through
torch's file-descriptor passing, costing far more than the task's bookkeeping.

A worker may read a *newer* θ than the snapshot it was dispatched with (another
worker's dispatch published in between). Its update then carries the newer version,
so staleness is measured from what the gradient was really computed on. For
``bounded`` that is SSP's own rule (a read must include everything older than
c−s and may include more); a ``sync`` round publishes nothing until it closes.

Hogwild!
--------
In the A3C paper each thread (i) copies the shared θ at the start of a segment,
without a lock, (ii) computes a gradient, (iii) applies it to the shared θ with
RMSProp statistics shared by all threads, also without a lock.

Here (i) is literal. With ``lock_free=True`` nothing guards the read, so a read that
overlaps a publication can see a mix of two versions: Hogwild!'s inconsistent read.
The seqlock word detects it and the runtime counts it (``sched/torn_reads``); the
update is tagged with the version that was complete when the read began. With
``lock_free=False`` a shared lock makes reads and publications exclusive, so every
read is one whole version.

(iii) is done by the main process: the loop applies each gradient the moment it
arrives (``async``) with the one server optimizer, whose statistics are therefore
shared by every worker as in the paper, and no update waits for a lock or a round.
Because every ``async`` apply is followed by the dispatch of the worker that just
delivered, ``theta`` always holds the global model's newest version.
What is not modelled is *concurrent writers*: in the paper two threads can write the
same coordinate at once and one write can be lost; here every gradient lands once.
We chose a single writer because the loop must see every update (to admit, combine,
count staleness) and the model it evaluates and checkpoints must be the very
parameters the workers train; workers writing θ themselves would leave the main
process with a stale replica unless the core gave the runtime the global model's
storage (the hook is described in the issue note). The price is small: an Adam step
on the 9k-parameter CartPole model takes ~40 µs against ~1.5 ms per task, so one
writer keeps up with dozens of workers.

Faults
------
A worker that raises, or whose process dies (SIGKILL, OOM), is detected through its
pipe and its process sentinel, counted (``sched/worker_restarts``,
``sched/lost_updates``), logged, and restarted as a new incarnation with a fresh
seed stream. Its in-flight update is lost; the task itself is re-run on the new
incarnation from the current θ, so to the scheduler a fault is only a slow task:
a ``sync`` round still completes with all N updates and a ``bounded`` clock still
advances. ``kill_worker(i)`` and ``inject_worker_faults`` SIGKILL a worker on purpose.

Shutdown
--------
``close`` asks every worker to stop, then terminates and finally kills stragglers;
it runs on a normal end, on an exception and on Ctrl-C (the loop's ``finally``), and
a finalizer runs it at interpreter exit if nobody called it. Workers are daemonic,
ignore SIGINT (Ctrl-C is the main process's to handle), and exit when the pipe to the
main process closes. Shared memory uses torch's ``file_descriptor`` strategy: the
segments are unlinked at creation, so nothing is left in /dev/shm.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import signal
import sys
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import torch
import torch.multiprocessing as mp

from hybrid.config import TrainConfig
from hybrid.core.update import Snapshot, Update
from hybrid.core.worker import Worker, build_model
from hybrid.envs import EnvInfo
from hybrid.nets import FlatParams
from hybrid.runtimes._parallel import (
    FaultCounters,
    FaultInjector,
    check_failures,
    log_restart,
    update_record,
    warm_up,
    warn_if_oversubscribed,
)

SEQ, VERSION = 0, 1  # the two words of ``meta``
STARTUP_TIMEOUT_S = 300.0
"""Generous: 16 workers importing torch at once on a busy machine take tens of seconds."""
STOP_GRACE_S = 2.0
"""How long close() waits for workers to finish their task and exit before terminating them."""


# --- the worker process ----------------------------------------------------------------------


def read_params(
    theta: torch.Tensor, meta: torch.Tensor, lock: Any, out: torch.Tensor
) -> tuple[int, bool]:
    """Copy the published θ into ``out``; return (version, whether the read was torn).

    Lock-free, this is a seqlock reader that does not retry: the writer makes the
    sequence word odd while it writes, so a read that saw an odd word, or a different
    word at the end, overlapped a write. The version is read before the copy, so a
    torn read is tagged with the older of the versions it mixes. On x86 (TSO) the
    detection is exact; on weakly ordered CPUs it is best effort.
    """
    if lock is not None:
        with lock:
            out.copy_(theta)
            return int(meta[VERSION]), False
    begin = int(meta[SEQ])
    version = int(meta[VERSION])
    out.copy_(theta)
    return version, begin % 2 == 1 or int(meta[SEQ]) != begin


def _worker_main(
    worker_id: int,
    incarnation: int,
    cfg: TrainConfig,
    info: EnvInfo,
    conn: Connection,
    theta: torch.Tensor,
    meta: torch.Tensor,
    grads: torch.Tensor,
    lock: Any,
) -> None:
    # Ctrl-C reaches the whole foreground process group; stopping us is the main
    # process's job (close()), and a worker dying mid-send would only add noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)  # tiny MLPs: more threads only contend for the cores
    worker = None
    try:
        worker = Worker(worker_id, cfg, info, incarnation)
        warm_up(worker)
        local = torch.empty_like(theta)
        conn.send(("ready", os.getpid()))
        while conn.recv() is not None:
            version, torn = read_params(theta, meta, lock, local)
            update = worker.run_task(Snapshot(local, version))
            grads[worker_id].copy_(update.payload)
            record = update_record(update)
            record["torn"] = torn
            record["finished_at"] = time.monotonic()  # system-wide clock: comparable across us
            conn.send(("result", record))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the main process has gone: there is nobody left to report to
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        sys.exit(1)
    finally:
        if worker is not None:
            worker.close()


# --- the main process ------------------------------------------------------------------------


@dataclass
class _Slot:
    """One worker as the main process sees it, across its incarnations."""

    worker_id: int
    incarnation: int
    process: BaseProcess
    conn: Connection
    ready: bool = False
    """Warmed up and waiting for tasks."""
    busy: bool = False
    """Dispatched, and its update not yet handed to the loop (the scheduler's view)."""
    in_flight: bool = False
    """A task was sent and no result has come back."""
    pending: bool = False
    """A task waits for the worker to become ready (after a start or a restart)."""
    failures: int = 0
    """Unexpected failures since the last finished task."""
    killed_on_purpose: bool = False
    last_error: str = ""


def _stop_processes(processes: list[BaseProcess], grace_s: float) -> None:
    """Join, then terminate, then kill: no worker outlives this call."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(0.5)
        if process.is_alive():
            process.kill()
            process.join()


class ProcessRuntime:
    """Workers in spawned processes; θ in shared memory; real wall-clock time."""

    def __init__(self, cfg: TrainConfig, info: EnvInfo) -> None:
        warn_if_oversubscribed(cfg.workers, "processes")
        self.cfg, self.info = cfg, info
        self._ctx = mp.get_context("spawn")  # fork would copy the parent's threads and locks
        numel = FlatParams(build_model(cfg, info)).numel
        self._theta = torch.zeros(numel).share_memory_()
        self._meta = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._grads = torch.zeros(cfg.workers, numel).share_memory_()
        self._lock = None if cfg.lock_free else self._ctx.Lock()
        self._published: int | None = None
        self._arrived: list[tuple[float, int, Update]] = []
        self._sequence = 0
        self._faults = FaultInjector(cfg.inject_worker_faults, cfg.seed)
        self.counters = FaultCounters()
        self.torn_reads = 0
        self._closed = False
        # The finalizer holds this list, not self, so an abandoned runtime is still cleaned up.
        self._processes: list[BaseProcess] = []
        self._finalizer = weakref.finalize(self, _stop_processes, self._processes, 0.0)
        self._slots: list[_Slot] = []
        try:
            for w in range(cfg.workers):
                process, conn = self._spawn(w, 0)
                self._slots.append(_Slot(w, 0, process, conn))
            self._await_startup()
        except BaseException:
            self.close()
            raise

    # -- the Runtime protocol --

    def idle_workers(self) -> list[int]:
        return [s.worker_id for s in self._slots if not s.busy]

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        slot = self._slots[worker_id]
        if slot.busy:
            raise RuntimeError(f"worker {worker_id} is busy; dispatch only idle workers")
        self._publish(snapshot)
        slot.busy = True
        slot.pending = True
        if slot.ready:
            self._send_task(slot)
        if self._faults.strike():
            self.kill_worker(worker_id)

    def next_update(self) -> Update:
        while not self._arrived:
            if not any(s.busy for s in self._slots):
                raise RuntimeError("no task in flight and none started: the scheduler stalled")
            self._pump()
        _, _, update = heapq.heappop(self._arrived)
        self._slots[update.worker_id].busy = False
        return update

    def virtual_time(self) -> float | None:
        return None

    def metrics(self) -> dict[str, float]:
        return self.counters.as_metrics() | {"sched/torn_reads": self.torn_reads}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            with contextlib.suppress(OSError):
                slot.conn.send(None)
        _stop_processes(list(self._processes), STOP_GRACE_S)
        for slot in self._slots:
            slot.conn.close()
        self._finalizer.detach()

    # -- fault tests --

    def kill_worker(self, worker_id: int) -> None:
        """SIGKILL a worker's process now (fault injection); it is restarted when noticed."""
        slot = self._slots[worker_id]
        slot.killed_on_purpose = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.process.pid, signal.SIGKILL)  # type: ignore[arg-type]

    def worker_pids(self) -> list[int]:
        return [s.process.pid for s in self._slots]  # type: ignore[misc]

    # -- internals --

    def _spawn(self, worker_id: int, incarnation: int) -> tuple[BaseProcess, Connection]:
        ours, theirs = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            name=f"hybrid-worker-{worker_id}.{incarnation}",
            args=(
                worker_id,
                incarnation,
                self.cfg,
                self.info,
                theirs,
                self._theta,
                self._meta,
                self._grads,
                self._lock,
            ),
            daemon=True,  # multiprocessing's own atexit hook ends daemonic children too
        )
        process.start()
        theirs.close()  # only the child holds its end now, so its death reads as EOF here
        self._processes.append(process)
        return process, ours

    def _await_startup(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(s.ready for s in self._slots):
            left = deadline - time.monotonic()
            if left <= 0:
                slow = [s.worker_id for s in self._slots if not s.ready]
                raise RuntimeError(f"workers {slow} did not start within {STARTUP_TIMEOUT_S:.0f} s")
            for slot in self._wait(left):
                if not self._drain(slot) or slot.process.exitcode is not None:
                    raise RuntimeError(
                        f"worker {slot.worker_id} failed to start "
                        f"(exit code {slot.process.exitcode}):\n{slot.last_error}"
                    )

    def _publish(self, snapshot: Snapshot) -> None:
        if snapshot.version == self._published:
            return
        with self._lock if self._lock is not None else contextlib.nullcontext():
            self._meta[SEQ] += 1  # odd: a write is in progress
            self._theta.copy_(snapshot.params)
            self._meta[VERSION] = snapshot.version
            self._meta[SEQ] += 1
        self._published = snapshot.version

    def _send_task(self, slot: _Slot) -> None:
        slot.pending = False
        slot.in_flight = True
        try:
            slot.conn.send(0)
        except OSError:  # the worker died since we last looked
            self._restart(slot)

    def _wait(self, timeout: float | None) -> list[_Slot]:
        """Block until some worker has a message or has exited; return those workers."""
        watched: dict[Any, _Slot] = {}
        for slot in self._slots:
            watched[slot.conn] = slot
            watched[slot.process.sentinel] = slot
        touched: list[_Slot] = []
        for ready in wait(list(watched), timeout):
            if watched[ready] not in touched:
                touched.append(watched[ready])
        return touched

    def _pump(self) -> None:
        for slot in self._wait(None):
            if not self._drain(slot) or slot.process.exitcode is not None:
                self._restart(slot)

    def _drain(self, slot: _Slot) -> bool:
        """Handle every message the worker has sent; False once it has failed or gone."""
        while True:
            try:
                if not slot.conn.poll():
                    return True
                kind, body = slot.conn.recv()
            except (EOFError, OSError):
                return False
            if kind == "ready":
                slot.ready = True
                if slot.pending:
                    self._send_task(slot)
            elif kind == "result":
                self._receive(slot, body)
            elif kind == "error":
                slot.last_error = body
                return False

    def _receive(self, slot: _Slot, record: dict[str, Any]) -> None:
        torn, finished_at = record.pop("torn"), record.pop("finished_at")
        # Copy out of the slot now: the worker overwrites it on its next task.
        update = Update(payload=self._grads[slot.worker_id].clone(), **record)
        heapq.heappush(self._arrived, (finished_at, self._sequence, update))
        self._sequence += 1
        self.torn_reads += bool(torn)
        slot.in_flight = False
        slot.failures = 0

    def _restart(self, slot: _Slot) -> None:
        process = slot.process
        if process.is_alive():  # it reported an error; make sure it is gone
            process.kill()
        process.join()
        slot.conn.close()
        self._processes.remove(process)
        if slot.killed_on_purpose:
            reason = "was killed on purpose"
        elif slot.last_error:
            reason = "raised: " + slot.last_error.strip().splitlines()[-1]
        else:
            reason = f"died (exit code {process.exitcode})"
        lost = slot.in_flight
        self.counters.restarts += 1
        self.counters.lost_updates += lost
        log_restart(slot.worker_id, slot.incarnation, reason, lost)
        if not slot.killed_on_purpose:
            slot.failures += 1
            check_failures(slot.worker_id, slot.failures, slot.last_error)
        slot.pending = slot.pending or slot.in_flight  # the lost task re-runs when it is ready
        slot.in_flight = slot.ready = slot.killed_on_purpose = False
        slot.last_error = ""
        slot.incarnation += 1
        slot.process, slot.conn = self._spawn(slot.worker_id, slot.incarnation)
