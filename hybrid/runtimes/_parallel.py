"""What the real parallel runtimes (processes, ray) share: core counts, warm-up, faults, restarts.

Nothing here imports ``multiprocessing`` or ``ray``; the runtimes that do import
this module, so the restart policy and the fault model are one piece of code.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import warnings
from typing import Any

import numpy as np
import torch

from hybrid.core.worker import Worker
from hybrid.protocol import Snapshot, Update
from hybrid.seeding import FAULTS, stream

log = logging.getLogger("hybrid.runtimes")


MAX_CONSECUTIVE_FAILURES = 3
"""A worker that fails this many times in a row without finishing a task is a bug, not bad luck:
the run stops with the worker's last error instead of restarting it forever. Kills injected on
purpose (``inject_worker_faults``, ``kill_worker``) do not count."""


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads do not add throughput here)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    try:
        import psutil  # optional: present in most environments, not a dependency

        physical = psutil.cpu_count(logical=False) or usable
    except ImportError:
        physical = usable
    return max(1, min(physical, usable))


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
