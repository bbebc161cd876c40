"""The processes runtime: one spawned process per worker, global parameters in shared memory.

How a task flows
----------------
The main process runs the one loop and owns the ``GlobalModel`` and its optimizer.
Three shared-memory tensors are created once and handed to every worker process:

``theta``  the global parameters (flat float32): published copies, or under Hogwild!
           the global model's own storage,
``meta``   a seqlock word, the version of what ``theta`` holds and a halt word,
``grads``  one gradient slot per worker,
``applied`` one apply counter per worker (Hogwild!: how many updates it wrote to θ).

``dispatch`` publishes the snapshot into ``theta`` (one copy of θ per version, so the
N workers of a ``sync`` round share one publication) and sends the worker a short
message through its pipe: the task (``hybrid.protocol``) and, when the
snapshot has any, its extras (a target network). The worker reads θ *from shared
memory* when it starts, tags its update with the version it read, writes a
parameter-shaped payload (a gradient or Δ) into its own slot and sends back a small
record (env steps, episode returns, losses, timing). Other payloads (a codec's
bytes, an actor's trajectory) travel in the record, their tensors as numpy arrays:
a pickled tensor would be moved into a fresh shared-memory segment whose file
descriptor is passed over a socket, costing more than the rest of an update.

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

With ``lock_free=True`` and the ``async`` scheduler (no codec) all three are literal.
The global model's own θ and its optimizer statistics are moved into shared memory
(``GlobalModel.share_memory``) and every worker steps them itself, through the same
optimizer code the main process would run (``GlobalModel.attach_shared``): clipping,
the learning-rate schedule (from the run's progress sent with each task) and the
optimizer's step, all unguarded, so two workers may write the same coordinate at
once and a read may mix several writes. The loop still sees every update: it counts
it, measures staleness, logs it and gives it the next version; the runtime's applier
(``appliers.WorkersApply``) only counts it, since the step is taken (a non-finite payload
is neither applied by the worker nor admitted by the loop: both use one test). The
model the loop evaluates and checkpoints is the one the workers train. Torn reads are
not counted here: every read may interleave with writes, which is the point.

Staleness under Hogwild! is measured where the apply happens, in the worker: when it
reads θ it sums the shared per-worker apply counters, and just before it applies its
own update it sums them again; τ is the difference, the updates other workers wrote to
θ in between (each worker's counter has one writer, itself, so no increment is lost).
Its own previous update is in θ and in the count before it reads again, so a lone
worker always has τ = 0, as in the A3C paper. The version a worker tags its update
with (``base_version``) is the newest the main process had counted when the read
began; it is a label for the timeline, not what τ is measured from.

Hogwild! workers also run ahead, as the paper's threads do: a worker starts its next
task the moment it reports one, instead of waiting for the loop to dispatch it again.
It applies and reports that task only once the loop has claimed it (by dispatching
the worker, which ``async`` does as soon as it has taken the previous update), so no
update reaches θ that the loop has not counted; the claim usually arrives long before
the task ends. The started-ahead task uses the previous dispatch's extras (observation
statistics, a target network), one task old; its learning rate comes with the claim.
When the loop ends, ``settle`` discards started-ahead tasks, raises the halt word so
that claimed tasks still running apply nothing, and waits for them all.

Everywhere else (``sync``, ``bounded``, a codec, or ``lock_free=False``, "locked") the
main process is the one writer: the loop applies each update with the one server
optimizer and ``dispatch`` publishes θ under a seqlock. Lock-free, a read that
overlaps a publication is kept and counted (``sched/torn_reads``), tagged with the
older version; locked, such a read is retried, so every read is one whole version. A
retrying seqlock rather than a shared mutex: a worker SIGKILLed while holding a mutex
would leave it locked and hang the run, while a dead seqlock reader blocks nobody.

What bounds scaling on few cores is the main process's per-update bookkeeping (the
loop and the pipe), paid once per update whatever the task's size, and dearer when the
main process must preempt a worker to run. Larger tasks (``envs_per_worker``,
``rollout_steps``) therefore scale to more workers; ``benchmarks/scaling.py`` measures
it beside the machine's ceiling, and README keeps the figures.

Faults
------
A worker that raises, or whose process dies (SIGKILL, OOM), is detected through its
pipe and its process sentinel, counted (``sched/worker_restarts``,
``sched/lost_updates``), logged, and restarted as a new incarnation with a fresh
seed stream. Its in-flight update is lost; the task itself is re-run on the new
incarnation from the current θ, so to the scheduler a fault is only a slow task:
a ``sync`` round still completes with all N updates and a ``bounded`` clock still
advances. ``kill_worker(i)`` and ``inject_worker_faults`` SIGKILL a worker on purpose.
This bookkeeping (busy ids, restarts, counters, checkpoints, result order) is the
``Supervisor``'s in ``_parallel.py``, shared with the ray runtime; this module supplies
the transport: spawning a process, sending on its pipe, polling pipes and sentinels.

Decentralized runs
------------------
With ``per_worker_snapshots`` (``gossip``, ``ad-psgd``, ``sgp``) the K replicas are the rows
of one more shared tensor, with their optimizer states and one lock per row
(``shared_replicas``). A task message names the worker's row; the worker reads it itself.
For AD-PSGD the loop then sends the worker a mix order (the neighbour its scheduler drew)
ahead of its next task, and the worker averages the pair and steps its replica under the
two rows' locks, reporting ``mixed``; ``settle`` waits for the orders still out.

Edge clients
------------
With ``clients`` the K clients share the ``workers`` processes (``hybrid.runtimes.pool``):
a dispatched client waits until a process is free, which builds the client for that task
from (client id, version) and releases it, exactly as the serial runtime does.

Shutdown
--------
``close`` asks every worker to stop, then terminates and finally kills stragglers;
it runs on a normal end, on an exception and on Ctrl-C (``train``'s ``finally``), and
a finalizer runs it at interpreter exit if nobody called it. Workers are daemonic,
ignore SIGINT (Ctrl-C is the main process's to handle; they keep computing until it
stops them), and exit when the pipe to the main process closes. Shared memory uses
torch's default ``file_descriptor`` strategy: segments are unlinked as soon as they
are created, so nothing is left in /dev/shm whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import signal
import sys
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.multiprocessing as mp

from hybrid.core.appliers import SERVER_APPLIES, Applier, WorkersApply
from hybrid.core.global_model import GlobalModel, all_finite, build_global_model
from hybrid.core.worker import Worker, build_model
from hybrid.envs import EnvInfo
from hybrid.nets import FlatParams
from hybrid.protocol import Payload, Snapshot, Step, Task, Update
from hybrid.runtimes._parallel import (
    Executor,
    Supervisor,
    dumps_message,
    pack,
    unpack,
    update_record,
    warm_up,
    warn_if_oversubscribed,
)
from hybrid.runtimes.pool import WorkerPool
from hybrid.runtimes.shared_replicas import REPLICA_READ, SharedReplicas

if TYPE_CHECKING:
    from hybrid.runtimes.settings import RuntimeSettings

SEQ, VERSION, HALT = 0, 1, 2  # the words of ``meta``
SETTLE_TIMEOUT_S = 60.0
"""settle() waits this long at most for the tasks in flight (each takes ~ms by default)."""
STARTUP_TIMEOUT_S = 300.0
"""Generous: 16 workers importing torch at once on a busy machine take tens of seconds."""
STOP_GRACE_S = 2.0
"""How long close() waits for workers to finish their task and exit before terminating them."""


# --- the worker process ----------------------------------------------------------------------


OWN_REPLICA = "own_replica"
"""Extras key of a task that starts from its worker's replica (``per_worker_snapshots``): (row,
push-sum weight, read under the row's lock, version). The replica itself is read from the
shared rows (``hybrid.runtimes.shared_replicas``); only these four numbers travel."""


def read_params(
    theta: torch.Tensor, meta: np.ndarray, consistent: bool, out: torch.Tensor
) -> tuple[int, bool]:
    """Copy the published θ into ``out``; return (version, whether the read was torn).

    A seqlock reader: the writer makes the sequence word odd while it writes, so a read
    that saw an odd word, or a different word at the end, overlapped a write. Lock-free
    (Hogwild!), such a read is kept and reported as torn, tagged with the version that
    was complete when it began (the older of the two it mixes). ``consistent`` retries
    it instead, so every read is one whole version. The writer never waits for readers:
    a worker SIGKILLed in the middle of a read cannot block anyone, as it could if it
    died holding a lock. On x86 (TSO) the detection is exact; on weakly ordered CPUs
    it is best effort.
    """
    deadline = time.monotonic() + 1.0
    while True:
        begin = int(meta[SEQ])
        version = int(meta[VERSION])
        out.copy_(theta)
        torn = begin % 2 == 1 or int(meta[SEQ]) != begin
        if not (torn and consistent) or time.monotonic() > deadline:
            return version, torn  # past the deadline the writer died mid-write: say so
        time.sleep(0)  # yield: on a busy core the writer may need it to finish


def _worker_main(
    worker_id: int,
    incarnation: int,
    settings: RuntimeSettings,
    info: EnvInfo,
    conn: Connection,
    theta: torch.Tensor,
    meta: torch.Tensor,
    grads: torch.Tensor,
    applied: torch.Tensor,
    consistent: bool,
    shared_model: dict[str, torch.Tensor] | None,
    pool: WorkerPool,
    replicas: SharedReplicas | None = None,
) -> None:
    """One worker process: its persistent worker, or (an on-demand ``pool``) the edge clients
    whose tasks it is sent. ``replicas``: a decentralized run's rows, this worker's is its
    own."""
    # Ctrl-C reaches the whole foreground process group; stopping us is the main
    # process's job (close()), and a worker dying mid-send would only add noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(settings.torch_threads)  # 1 by default: tiny MLPs gain nothing from more
    worker: Worker | None = None
    try:
        if pool.persistent:
            worker = pool.build(worker_id, incarnation)
        # Hogwild!: this process steps the global model itself, through the shared θ and
        # optimizer statistics, with the very optimizer code the main process would run.
        hogwild: GlobalModel | None = None
        if shared_model is not None:
            # A throw-away step first: a fresh process's first optimizer step costs ~2 s.
            build_global_model(settings.server, torch.zeros_like(theta)).apply(
                Step(torch.ones_like(theta))
            )
            hogwild = build_global_model(settings.server, torch.zeros_like(theta))
            hogwild.attach_shared(shared_model)
        # AD-PSGD: this process averages its replica with a neighbour's and steps it itself
        # (``pair_mix``), with its replica's shared optimizer state.
        own_replica: GlobalModel | None = None
        if replicas is not None:
            build_global_model(settings.server, torch.zeros_like(theta)).apply(
                Step(torch.ones_like(theta))  # the first step's one-off cost, paid now
            )
            own_replica = replicas.replica_model(
                build_global_model(settings.server, torch.zeros_like(theta)), worker_id
            )
        pending: Step | None = None  # the last direction, until the loop orders its mix
        row_writes_at_read = 0
        if worker is not None:
            warm_up(worker)
        else:  # edge clients, built per task: pay the lazy start-up on a throw-away one
            client = pool.build(0)
            warm_up(client)
            client.close()
        local = torch.empty_like(theta)
        client_models: list[Any] = []  # edge clients run here one at a time: one network
        meta_np = meta.numpy()  # a view of the same shared words
        applied_np = applied.numpy()
        read_at = 0  # Hogwild!: updates written to θ when this task read it
        conn.send(("ready", os.getpid()))
        message = conn.recv()
        while message is not None:
            if message[0] == "mix":  # AD-PSGD: the loop drew the neighbour for our last update
                _, neighbour, lr_scale, progress, locked = message
                if replicas is not None and own_replica is not None and not meta_np[HALT]:
                    if pending is not None:
                        pending.lr_scale = lr_scale
                    replicas.pair_mix(own_replica, worker_id, neighbour, pending, progress, locked)
                pending = None
                conn.send_bytes(dumps_message(("mixed", None)))
                message = conn.recv()
                continue
            started_at = time.monotonic()  # a system-wide clock: comparable across processes
            # ("task", task, extras, progress[, client]): no client for the own worker
            _, task, extras, progress = message[:4]
            client_id = message[4] if len(message) > 4 else None
            extras = unpack(extras or {})
            if OWN_REPLICA in extras and replicas is not None:  # decentralized: its own row
                row, weight, locked, version = extras.pop(OWN_REPLICA)
                row_writes_at_read = replicas.read(row, local, weight, locked)
                torn = False
            elif hogwild is not None:  # an unguarded copy of θ while other workers write it
                version, torn = int(meta_np[VERSION]), False
                # counted before the copy: an apply landing during it counts as stale
                read_at = int(applied_np.sum())
                local.copy_(theta)
            else:
                version, torn = read_params(theta, meta_np, consistent, local)
            snapshot = Snapshot(local, version, extras=extras, task=task)
            if worker is not None:
                update = worker.run_task(snapshot)
            else:  # an edge client's task: built here, from its id, and released
                update = pool.run(client_id, snapshot, client_models)
            if replicas is not None:
                # the gossip staleness as it happened: others' averages into our row while we
                # computed (we write it only in our own mix, after this)
                writes = replicas.row_writes(worker_id) - row_writes_at_read
                update.stats["decentral/gossip_staleness_measured"] = float(writes)
            record = update_record(update)
            payload = update.payload
            if replicas is not None and isinstance(payload, torch.Tensor):
                pending = Step(payload, clip=update.kind != Payload.DELTA)
            record["in_slot"] = (
                isinstance(payload, torch.Tensor)
                and payload.dtype == grads.dtype
                and payload.shape == grads[worker_id].shape
            )
            following = None
            if hogwild is not None:
                # Wait for the loop to claim this task (it was started ahead of it), then
                # apply, unless the claim says discard or the loop has ended meanwhile. The
                # claim brings the next task to start ahead, in the same message.
                if (claim := conn.recv()) is None:
                    break
                _, progress, following = claim
                if (
                    progress is not None
                    and record["in_slot"]
                    and all_finite(payload)  # the loop's Receiver refuses the rest by this test
                    and not meta_np[HALT]  # the loop has ended: θ must stay as it left it
                ):
                    record["staleness"] = int(applied_np.sum()) - read_at
                    hogwild.apply(Step(payload, clip=update.kind != Payload.DELTA), progress)
                    applied_np[worker_id] += 1
            if record["in_slot"]:  # a gradient or Δ: the common case, through shared memory
                grads[worker_id].copy_(payload)
            else:  # codec bytes, a trajectory: small, or not parameter-shaped
                record["wire"] = pack(payload)
            record.update(torn=torn, started_at=started_at, finished_at=time.monotonic())
            conn.send_bytes(dumps_message(("result", record)))
            message = following if following is not None else conn.recv()
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


@dataclass(eq=False, kw_only=True)  # identity: a slot is one process
class _Slot(Executor):
    """A worker process: ``assigned`` is the task the loop dispatched to it (claimed)."""

    process: BaseProcess
    conn: Connection
    ready: bool = False
    """Warmed up and waiting for tasks."""
    sent: int = 0
    """Tasks started whose results have not come back: the claimed one and, running ahead
    (Hogwild!), the next one, which the worker starts the moment it sends a result."""
    claims: int = 0
    """Running ahead: of those, the ones the loop has claimed (a worker applies a task's
    update only once its claim arrives, so nothing the loop did not count reaches θ)."""
    mixing: int = 0
    """AD-PSGD: pair mixes ordered that the worker has not yet reported done."""


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


class ProcessRuntime(Supervisor):
    """Workers in spawned processes; θ in shared memory; real wall-clock time."""

    def __init__(
        self,
        settings: RuntimeSettings,
        info: EnvInfo,
        hogwild: GlobalModel | None,
        pool: WorkerPool,
        per_worker_snapshots: bool = False,
    ) -> None:
        """``hogwild``: the global model whose θ and optimizer statistics the workers step
        themselves (moved into shared memory here); None: the main process applies.
        ``pool``: who the workers are (``make_pool``); with edge clients, K clients
        share the ``workers`` processes. ``per_worker_snapshots``: every task starts from
        its worker's replica (a decentralized run), a row of shared memory
        (``shared_replicas``) that the worker reads itself."""
        self.per_worker_snapshots = per_worker_snapshots
        warn_if_oversubscribed(settings.workers, "processes")
        super().__init__(settings, pool, time.monotonic)
        self.info = info
        if hogwild is not None and not self.pool.persistent:
            raise ValueError("Hogwild! runs persistent workers: a process runs one worker")
        self._ctx = mp.get_context("spawn")  # fork would copy the parent's threads and locks
        numel = FlatParams(build_model(pool.settings.algo, info)).numel
        self._shared_model: dict[str, torch.Tensor] | None = None
        # Who writes θ: the loop's server optimizer, or (Hogwild!) the workers themselves.
        self.applier: Applier = SERVER_APPLIES
        if hogwild is not None:
            self._shared_model = hogwild.share_memory()
            self.applier = WorkersApply()
            self._theta = self._shared_model["param"]  # the global model's own storage
        else:
            self._theta = torch.zeros(numel).share_memory_()
        self._meta = torch.zeros(3, dtype=torch.int64).share_memory_()
        self._meta_np = self._meta.numpy()
        self._run_ahead = hogwild is not None
        # One slot per worker is enough, running ahead too: a worker writes its slot only
        # once the loop has claimed the task, after we copied the previous payload out.
        self._grads = torch.zeros(settings.workers, numel).share_memory_()
        self._grad_slots = list(self._grads)  # views made once: indexing costs µs per update
        self._applied = torch.zeros(settings.workers, dtype=torch.int64).share_memory_()
        self.shared_replicas: SharedReplicas | None = None
        if per_worker_snapshots:  # before the workers start: they map these pages
            self.shared_replicas = SharedReplicas.create(
                self._ctx, settings.server, settings.workers, numel
            )
        self.pipe_bytes_down = self.pipe_bytes_up = 0
        """Bytes written to the workers' pipes, and read from them (all messages)."""
        self._published: int | None = None
        self.torn_reads = 0
        self._closed = False
        # The finalizer holds this list, not self, so an abandoned runtime is still cleaned up.
        self._processes: list[BaseProcess] = []
        self._finalizer = weakref.finalize(self, _stop_processes, self._processes, 0.0)
        self.executors: list[_Slot] = []
        self._slots = self.executors
        self._selector = selectors.DefaultSelector()
        try:
            for w in range(settings.workers):
                process, conn = self._start_process(w, 0)
                self._slots.append(_Slot(worker_id=w, process=process, conn=conn))
                self._watch(self._slots[-1])
            self._await_startup()
        except BaseException:
            self.close()
            raise
        self._origin = time.monotonic()

    # -- the Runtime protocol --

    def settle(self) -> None:
        """Under Hogwild!: tell workers to stop writing θ and wait for the tasks in flight.

        They finish without applying their updates, so the final evaluation, checkpoint,
        hash and ``Result.params`` all see the same θ. A task that applied its update in
        the instant between the loop's last update and the halt word (one per worker at
        most) is in θ but not in the counts.
        """
        if self.shared_replicas is not None:
            self._await_mixes()  # the replicas change no more once the mixes ordered are done
        if self._shared_model is None:
            return  # the main process is the one writer, and it has stopped
        self._meta_np[HALT] = 1
        self._run_ahead = False
        for slot in self._slots:
            slot.assigned = False  # nobody will take these results: send nothing more
            for _ in range(slot.sent - slot.claims):  # a task started ahead: discard it
                self._write(slot, ("claim", None, None))
            slot.claims = slot.sent
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while any(s.sent for s in self._slots) and (left := deadline - time.monotonic()) > 0:
            for slot in self._handle_events(left):
                slot.sent = 0  # it died: it writes nothing more

    def metrics(self) -> dict[str, float]:
        pipes = {
            "sched/pipe_bytes_down": self.pipe_bytes_down,
            "sched/pipe_bytes_up": self.pipe_bytes_up,
        }
        if self.shared_replicas is not None:
            pipes["decentral/broken_locks"] = int(self.shared_replicas.counters[:, 1].sum())
        if self._shared_model is not None:  # under Hogwild! every read may be torn: not counted
            return super().metrics() | pipes
        return super().metrics() | {"sched/torn_reads": self.torn_reads} | pipes

    # -- decentralized: the replicas in shared memory (``ReplicaExchange``) --

    def replica_exchange(self) -> ProcessRuntime | None:
        return self if self.shared_replicas is not None else None

    def order_pair_mix(
        self, worker_id: int, neighbour: int, lr_scale: float, progress: float, locked: bool
    ) -> None:
        """AD-PSGD: worker ``worker_id`` averages its replica with ``neighbour``'s and steps
        its own along its last direction, itself, while the loop goes on. Sent before its
        next task on the same pipe, so the worker mixes before it reads its replica again."""
        slot = self._slots[worker_id]
        self._write(slot, ("mix", neighbour, lr_scale, progress, locked))
        slot.mixing += 1

    def _await_mixes(self) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while any(s.mixing for s in self._slots) and (left := deadline - time.monotonic()) > 0:
            for slot in self._handle_events(left):
                slot.mixing = 0  # it died: its mix is lost, and it writes nothing more

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
        self._selector.close()
        self._finalizer.detach()

    # -- checkpoints --

    def state_dict(self) -> dict[str, Any]:
        """The supervisor's (counters, incarnations) and the torn reads."""
        return super().state_dict() | {"torn_reads": self.torn_reads}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.torn_reads = int(state["torn_reads"])
        super().load_state_dict(state)

    def worker_pids(self) -> list[int]:
        return [s.process.pid for s in self._slots]  # type: ignore[misc]

    # -- internals --

    # -- the backend: spawn, send, poll --

    def _prepare(self, snapshot: Snapshot) -> tuple[Task, Any, float]:
        if self.per_worker_snapshots:  # the worker reads its own row: only which one travels
            extras = dict(snapshot.extras)
            row, weight, locked = extras.pop(REPLICA_READ)
            own = {OWN_REPLICA: (int(row), float(weight), bool(locked), snapshot.version)}
            return (snapshot.task, pack(extras | own), snapshot.progress)
        self._publish(snapshot)  # θ goes through shared memory, the rest through the pipe
        extras = pack(snapshot.extras) if snapshot.extras else None
        return (snapshot.task, extras, snapshot.progress)

    def _task_for(
        self, prepared: tuple[Task, Any, float], client: int | None
    ) -> tuple[Task, Any, float, int | None]:
        return (*prepared, client)

    def _free(self, slot: _Slot) -> bool:
        return slot.ready

    def _lost(self, slot: _Slot) -> bool:
        return slot.assigned and slot.sent > 0  # a run-ahead task nobody asked for is no loss

    def _died(self, slot: _Slot) -> str:
        if slot.last_error:
            return "raised: " + slot.last_error.strip().splitlines()[-1]
        return f"died (exit code {slot.process.exitcode})"

    def _kill(self, slot: _Slot) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.process.pid, signal.SIGKILL)  # type: ignore[arg-type]

    def _start_process(self, worker_id: int, incarnation: int) -> tuple[BaseProcess, Connection]:
        ours, theirs = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            name=f"hybrid-worker-{worker_id}.{incarnation}",
            args=(
                worker_id,
                incarnation,
                self.settings,
                self.info,
                theirs,
                self._theta,
                self._meta,
                self._grads,
                self._applied,
                not self.settings.lock_free,
                self._shared_model,
                self.pool,
                self.shared_replicas,
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
            for slot in self._handle_events(left):
                slot.process.join(1.0)
                raise RuntimeError(
                    f"worker {slot.worker_id} failed to start "
                    f"(exit code {slot.process.exitcode}):\n{slot.last_error}"
                )

    def _publish(self, snapshot: Snapshot) -> None:
        if snapshot.version == self._published:
            return
        meta = self._meta_np  # numpy view: a scalar store costs ns, a tensor index µs
        if self._shared_model is not None:  # θ is live: only say which version it has reached
            meta[VERSION] = snapshot.version
            self._published = snapshot.version
            return
        meta[SEQ] += 1  # odd: a write is in progress
        self._theta.copy_(snapshot.params)
        meta[VERSION] = snapshot.version
        meta[SEQ] += 1
        self._published = snapshot.version

    def _send(self, slot: _Slot) -> None:
        """Send what the worker needs: the claimed task if it has not started it; running
        ahead, that task's claim and the start of the next one.

        A Hogwild! worker starts a task when told, and applies and reports it when the loop
        claims it, which the loop does as soon as it has taken the worker's previous update,
        while the task still runs. A claim carries the next task to start (one message,
        one system call per update).
        """
        if not slot.ready:
            return
        if slot.assigned and slot.sent == slot.claims:  # the claimed task has not started
            self._write(slot, ("task", *slot.task))
            slot.sent += 1
        # At most one claim is outstanding: the loop has one task of a worker in hand.
        if self._run_ahead and slot.assigned and slot.claims == 0 and slot.sent > 0:
            # the run's progress now (the learning rate), and the next task
            self._write(slot, ("claim", slot.task[2], ("task", *slot.task)))
            slot.claims += 1
            slot.sent += 1

    def _write(self, slot: _Slot, message: Any) -> None:
        # A worker that died since we last looked breaks the pipe; its sentinel will wake
        # the next wait, which restarts it and re-runs the claimed task.
        data = dumps_message(message)
        self.pipe_bytes_down += len(data)
        with contextlib.suppress(OSError):
            slot.conn.send_bytes(data)

    def _watch(self, slot: _Slot) -> None:
        # One long-lived epoll set: building a fresh one per wait (multiprocessing's
        # connection.wait) costs as much as the rest of the bookkeeping of an update.
        self._selector.register(slot.conn, selectors.EVENT_READ, slot)
        self._selector.register(slot.process.sentinel, selectors.EVENT_READ, slot)

    def _unwatch(self, slot: _Slot) -> None:
        for fileobj in (slot.conn, slot.process.sentinel):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(fileobj)

    def _poll(self, timeout: float | None = None) -> list[_Slot]:
        return self._handle_events(timeout)

    def _handle_events(self, timeout: float | None) -> list[_Slot]:
        """Wait for messages or exits and handle them; return the workers that failed.

        A readable pipe yields one message (epoll is level-triggered: more are reported
        again). An exited process is drained first, so a result it sent before dying
        still counts.
        """
        failed: list[_Slot] = []
        for key, _ in self._selector.select(timeout):
            slot = key.data
            if any(slot is f for f in failed):
                continue
            if key.fileobj is slot.conn:
                if not self._receive_one(slot):
                    failed.append(slot)
            else:  # the sentinel: the process has exited
                while self._has_message(slot) and self._receive_one(slot):
                    pass
                failed.append(slot)
        return failed

    @staticmethod
    def _has_message(slot: _Slot) -> bool:
        try:
            return slot.conn.poll()
        except OSError:
            return False

    def _receive_one(self, slot: _Slot) -> bool:
        """Handle one message from the worker; False once it has failed or gone."""
        try:
            data = slot.conn.recv_bytes()
        except (EOFError, OSError):
            return False
        self.pipe_bytes_up += len(data)
        kind, body = pickle.loads(data)
        if kind == "ready":
            slot.ready = True
            self._send(slot)
            if not self.pool.persistent:
                self._assign_waiting()
        elif kind == "result":
            self._receive(slot, body)
        elif kind == "mixed":
            slot.mixing -= 1
        elif kind == "error":
            slot.last_error = body
            return False
        return True

    def _receive(self, slot: _Slot, record: dict[str, Any]) -> None:
        received_at = time.monotonic()
        torn = record.pop("torn")
        started_at, finished_at = record.pop("started_at"), record.pop("finished_at")
        if record.pop("in_slot"):
            # Copy out of the slot now: the worker overwrites it on its next task.
            payload = self._grad_slots[slot.worker_id].clone()
        else:
            payload = unpack(record.pop("wire"))
        update = Update(payload=payload, **record)
        # Timeline: computing until finished_at, then in the pipe until the main process
        # took it (it may have been busy applying another update).
        update.started_s = started_at - self._origin
        update.cost_s = received_at - started_at
        update.upload_s = received_at - finished_at
        self.torn_reads += bool(torn)
        slot.sent -= 1
        slot.claims = max(slot.claims - 1, 0)  # running ahead, every result had its claim
        self._deliver(slot, update, finished_at)

    def _stop(self, slot: _Slot) -> None:
        process = slot.process
        if process.is_alive():  # it reported an error, or we replace it: make sure it is gone
            process.kill()
        process.join()
        self._unwatch(slot)  # before closing: a new pipe may reuse the descriptor number
        slot.conn.close()
        self._processes.remove(process)

    def _spawn(self, slot: _Slot) -> None:
        slot.ready = False
        slot.sent = slot.claims = slot.mixing = 0
        slot.process, slot.conn = self._start_process(slot.worker_id, slot.incarnation)
        self._watch(slot)  # a claimed task re-runs once it is ready
