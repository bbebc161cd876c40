"""A decentralized run's replicas in shared memory (the processes runtime).

The K replicas are the rows of one shared [K, numel] float32 tensor, as Hogwild!'s θ is one
shared tensor: the main process (the loop's ``hybrid.replicas.ReplicaApplier``) and every
worker process map the same pages, so no replica travels through a pipe. Worker k reads
its row when a task starts; a task message only says which row, its push-sum weight and
whether to read it under the row's lock.

Each replica's optimizer state (Adam's moments, RMSProp's average, a momentum buffer) is
shared too, so whoever steps replica k (the loop for ``gossip`` and ``sgp``; worker k
itself for ``ad-psgd``) continues the same state, and a checkpoint taken in the main
process holds it.

AD-PSGD's pair update runs in the worker (``pair_mix``): once the loop has drawn the
neighbour j for worker i's finished gradient, worker i averages rows i and j and steps row
i, holding the locks of both rows, taken in row order (a fixed total order: two workers
can never each hold a lock the other waits for, whatever pairs they mix). Lock-free, the
same writes run unguarded: a concurrent pair that shares a row may then lose part of an
average (the replicas' mean is no longer conserved), which is the variant to study.

A mutex held by a process that dies stays held. A worker waits ``LOCK_TIMEOUT_S`` at most
for a row lock and then takes it over, counted in ``broken_locks``, and frees it when done:
a SIGKILLed worker costs one wait and one unguarded mix, never a hung run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from hybrid.core.global_model import GlobalModel, ServerSettings

REPLICA_READ = "replica_read"
"""Extras key of a snapshot whose worker reads its replica from the shared rows: (row, its
push-sum weight w, read under the row's lock)."""
LOCK_TIMEOUT_S = 10.0
"""Longer than any mix (two row copies and an optimizer step) takes on a busy machine."""
WRITES, BROKEN_LOCKS = 0, 1  # the words of ``counters``' last dimension


@dataclass
class SharedReplicas:
    """The rows, one lock per row, each replica's optimizer state, and counters; picklable
    into spawned worker processes (torch passes the shared tensors as file descriptors)."""

    rows: torch.Tensor
    """[K, numel] float32 in shared memory: row k is replica k (its push-sum numerator)."""
    locks: list[Any]
    """One multiprocessing lock per row."""
    optimizer_states: list[dict[str, torch.Tensor]]
    """Replica k's optimizer statistics, shared (without the parameters: those are row k)."""
    counters: torch.Tensor
    """[K, 2] int64, shared: times row k was written (``WRITES``: averages and steps), and
    locks that worker k found held past the timeout (``BROKEN_LOCKS``)."""

    @classmethod
    def create(cls, context: Any, server: ServerSettings, count: int, numel: int) -> SharedReplicas:
        """Zeroed rows and fresh optimizer states; ``context``: the multiprocessing context
        the workers are spawned with (its locks must be theirs)."""
        from hybrid.core.global_model import build_global_model, initial_optimizer_state

        rows = torch.zeros(count, numel).share_memory_()
        probe = build_global_model(server, torch.zeros(numel))
        states = []
        for k in range(count):
            state = initial_optimizer_state(
                probe.optimizer_name, rows[k], probe.momentum, probe.adam_eps
            )
            states.append({name: tensor.share_memory_() for name, tensor in state.items()})
        counters = torch.zeros(count, 2, dtype=torch.int64).share_memory_()
        return cls(rows, [context.Lock() for _ in range(count)], states, counters)

    @property
    def count(self) -> int:
        return int(self.rows.shape[0])

    def replica_model(self, base: GlobalModel, k: int) -> GlobalModel:
        """A model that steps row k with replica k's shared optimizer state, with ``base``'s
        optimizer, schedule and clip."""
        twin = base.replica(self.rows[k])
        twin.attach_shared({"param": self.rows[k], **self.optimizer_states[k]})
        return twin

    # --- locks ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, rows: list[int], enabled: bool = True) -> Iterator[None]:
        """Hold the locks of ``rows`` (taken in row order: no deadlock), unless not
        ``enabled`` (lock-free). A lock still held after ``LOCK_TIMEOUT_S`` (its holder
        died) is taken over, counted against the first row, and freed with the others."""
        taken: list[Any] = []
        try:
            for k in sorted(set(rows)) if enabled else []:
                lock = self.locks[k]
                if not lock.acquire(timeout=LOCK_TIMEOUT_S):
                    # Its holder died holding it: this worker takes it over, so that the
                    # release below frees it for everyone (left held, every later read or
                    # mix of the row would wait out the timeout again).
                    self.counters[rows[0], BROKEN_LOCKS] += 1
                taken.append(lock)
            yield
        finally:
            for lock in reversed(taken):
                with contextlib.suppress(ValueError):  # a taken-over lock freed by its holder
                    lock.release()

    @contextlib.contextmanager
    def all_locked(self) -> Iterator[None]:
        """Every row's lock: a whole-replicas read (a checkpoint) sees no pair half-mixed."""
        with self.locked(list(range(self.count))):
            yield

    # --- what a worker process does -----------------------------------------------------------

    def row_writes(self, k: int) -> int:
        """Times row k has been written so far (averages into it and its own steps)."""
        return int(self.counters[k, WRITES])

    def read(self, k: int, out: torch.Tensor, weight: float, locked: bool) -> int:
        """Copy replica k, de-biased by its push-sum ``weight`` (z = x / w, as the loop
        computes it), into ``out``; return how many writes row k had then."""
        with self.locked([k], locked):
            out.copy_(self.rows[k])
            writes = int(self.counters[k, WRITES])
        if weight != 1.0:
            out.div_(weight)
        return writes

    def pair_mix(
        self,
        model: GlobalModel,
        i: int,
        j: int,
        step: Any,
        progress: float,
        locked: bool,
    ) -> None:
        """AD-PSGD's update of worker i: x_i, x_j ← (x_i + x_j) / 2, then x_i steps along
        ``step`` (its direction, computed at the x_i it read) with ``model`` (replica i's
        optimizer, ``replica_model``); atomic per pair when ``locked``."""
        rows = self.rows
        with self.locked([i, j], locked):
            if i != j:
                average = (rows[i] + rows[j]) / 2  # == ½x_i + ½x_j bit for bit (halving is exact)
                rows[i].copy_(average)
                rows[j].copy_(average)
                self.counters[j, WRITES] += 1
            if step is not None:
                model.apply(step, progress)
            self.counters[i, WRITES] += 2


class ReplicaExchange(Protocol):
    """A runtime whose workers share the replicas (``Runtime.replica_exchange``)."""

    shared_replicas: SharedReplicas | None

    def order_pair_mix(
        self, worker_id: int, neighbour: int, lr_scale: float, progress: float, locked: bool
    ) -> None:
        """Worker ``worker_id`` averages its replica with ``neighbour``'s, then steps its own
        along its last direction (``SharedReplicas.pair_mix``), asynchronously."""
        ...


__all__ = ["LOCK_TIMEOUT_S", "REPLICA_READ", "ReplicaExchange", "SharedReplicas"]
