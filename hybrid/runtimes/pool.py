"""Worker pools: what a runtime builds to run the task of worker id k.

Every runtime (serial, processes, ray) gets its workers from a pool, so "who the
workers are" is decided once, here, and "where they run" stays the runtime's:

- ``PersistentWorkers``: ids 0..workers-1, one ``Worker`` per id living through the
  run (its envs, episodes in progress, codec residual). A runtime gives each id its own
  executor: an object on the serial runtime, a process, an actor.
- ``EdgeClients``: ids 0..K-1, simulated edge clients (``clients``). A client is a
  profile (env variant, device speed, links) drawn from the run's seed; its worker is
  built for each task from (client id, round version) and released after it, so memory
  grows with the tasks in flight, not with K. A runtime runs them on a fixed set of
  executors (serial: the one process on its virtual clock; processes: ``workers``
  processes; ray: ``workers`` actors), client k's task on whichever executor is free.
  Seeds come from (client id, version), so a client's Δ does not depend on the executor.

The pool lives here, beside its only users: it must be picklable into worker processes
and actors, so it holds ``WorkerSettings`` (and ``ClientSettings``), never the config; the
client profiles it builds from are ``hybrid.clients``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hybrid.clients import ClientCostModel, ClientSettings
from hybrid.core.worker import Worker, WorkerSettings
from hybrid.protocol import Snapshot, Update

if TYPE_CHECKING:
    from hybrid.envs import EnvInfo


class WorkerPool(Protocol):
    settings: WorkerSettings
    """What every worker of the pool is built from (picklable: never the run's config)."""
    size: int
    """Worker ids are 0..size-1: the ids a scheduler hands tasks to."""
    persistent: bool
    """True: each id has one worker for the whole run (and an executor of its own). False:
    a worker is built per task, on any free executor (``run``)."""

    def build(self, worker_id: int, incarnation: int = 0, shared_model: Any = None) -> Worker:
        """Worker ``worker_id``; ``shared_model`` (another worker's ``(model, flat)``) lets
        workers that run one at a time in one process share a network."""
        ...

    def run(self, worker_id: int, snapshot: Snapshot, models: list[Any] | None = None) -> Update:
        """Build worker ``worker_id`` for this task, run it and release it (on-demand pools).
        ``models``: a list kept by a caller whose tasks run one at a time (see
        ``EdgeClients.run``)."""
        ...

    def cost_model(self) -> Any:
        """The virtual clock's cost model of these workers, or None for the runtime's own."""
        ...


@dataclass(frozen=True)
class PersistentWorkers:
    """``workers`` long-lived workers, ids 0..workers-1."""

    settings: WorkerSettings
    info: EnvInfo
    workers: int
    persistent = True

    @property
    def size(self) -> int:
        return self.workers

    def build(self, worker_id: int, incarnation: int = 0, shared_model: Any = None) -> Worker:
        return Worker(worker_id, self.settings, self.info, incarnation, shared_model=shared_model)

    def run(self, worker_id: int, snapshot: Snapshot, models: list[Any] | None = None) -> Update:
        raise RuntimeError("persistent workers keep their state: run tasks on the built worker")

    def cost_model(self) -> None:
        return None


@dataclass(frozen=True)
class EdgeClients:
    """K simulated edge clients, ids 0..K-1, each built on demand for one task."""

    settings: WorkerSettings
    info: EnvInfo
    clients: ClientSettings
    persistent = False

    @property
    def size(self) -> int:
        assert self.clients.clients is not None
        return self.clients.clients

    def build(self, worker_id: int, incarnation: int = 0, shared_model: Any = None) -> Worker:
        # The worker applies the client's env variant (client_dynamics) from its id.
        return Worker(worker_id, self.settings, self.info, incarnation, shared_model=shared_model)

    def run(self, worker_id: int, snapshot: Snapshot, models: list[Any] | None = None) -> Update:
        """Client ``worker_id``'s task. ``models``: a list that a caller running one task at a
        time keeps between tasks: the first client's network is kept there and lent to the
        next clients, which load the snapshot into it, instead of each building (and
        randomly initializing) a network that the snapshot overwrites anyway: that cost
        as much as the client's whole local step. Every draw that shapes a run comes from
        its own seeded generator, none from torch's global one that an initialization
        consumes, so lending the network changes no result."""
        # Seeded by (client, version): the same task gives the same Δ on every executor.
        shared = models[0] if models else None
        client = self.build(worker_id, incarnation=max(snapshot.version, 0), shared_model=shared)
        if models is not None and not models and client.shares_model:
            models.append((client.model, client.flat))
        try:
            return client.run_task(snapshot)
        finally:
            client.close()

    def cost_model(self) -> Any:
        return ClientCostModel(self.clients)


def make_pool(
    settings: WorkerSettings, info: EnvInfo, workers: int, clients: ClientSettings | None = None
) -> WorkerPool:
    """Edge clients when ``clients`` sets K, else ``workers`` persistent workers."""
    if clients is not None and clients.clients is not None:
        return EdgeClients(settings, info, clients)
    return PersistentWorkers(settings, info, workers)
