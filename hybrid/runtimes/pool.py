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
  Where an executor runs one task at a time (serial, each process), the next client
  borrows the last one's network and, for envs a seeded reset fully restores, its vector
  env (``LentParts``): building them per task cost more than the local step.

The pool lives here, beside its only users: it must be picklable into worker processes
and actors, so it holds ``WorkerSettings`` (and ``ClientSettings``), never the config; the
client profiles it builds from are ``hybrid.clients``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import torch

from hybrid.clients import (
    DELTA_ATTACKS,
    ClientCostModel,
    ClientSettings,
    attack_delta,
    client_profile,
)
from hybrid.core.worker import Worker, WorkerSettings, groups_local_training, run_local_group
from hybrid.protocol import Snapshot, Update

if TYPE_CHECKING:
    from hybrid.envs import EnvInfo
    from hybrid.nets import FlatParams

_RESET_CLEARS: tuple[type, ...] = (
    gym.wrappers.TimeLimit,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.PassiveEnvChecker,
)
"""Wrappers whose state a seeded reset clears (or that only warn, never change a step)."""


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

    def run(self, worker_id: int, snapshot: Snapshot, lent: list[Any] | None = None) -> Update:
        """Build worker ``worker_id`` for this task, run it and release it (on-demand pools).
        ``lent``: a list kept by a caller whose tasks run one at a time (see
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

    def run(self, worker_id: int, snapshot: Snapshot, lent: list[Any] | None = None) -> Update:
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

    def run(self, worker_id: int, snapshot: Snapshot, lent: list[Any] | None = None) -> Update:
        """Client ``worker_id``'s task. ``lent``: a list that a caller running one task at a
        time keeps between tasks. The first client's network and vector env are kept there
        (a ``LentParts``) and lent to the next clients, instead of each building its own:

        - the network, which each client loads the snapshot into (a new one would be randomly
          initialized, then overwritten: that cost as much as the client's local step). Every
          draw that shapes a run comes from its own seeded generator, none from torch's global
          one that an initialization consumes, so lending it changes no result;
        - the env, where a seeded reset restores all of its state (``resets_completely``):
          the client sets its own env variant on it and resets it from the seed a fresh env
          would get, so its steps are a fresh env's, bit for bit. Building the env cost a
          fifth of a client's task.
        """
        # Seeded by (client, version): the same task gives the same Δ on every executor.
        parts: LentParts | None = lent[0] if lent else None
        client = Worker(
            worker_id,
            self.settings,
            self.info,
            incarnation=max(snapshot.version, 0),
            shared_model=parts.model if parts is not None else None,
            lent_envs=parts.envs if parts is not None else None,
        )
        if lent is not None and not lent:
            envs = client.runner.envs
            lent.append(
                LentParts(
                    model=(client.model, client.flat) if client.shares_model else None,
                    envs=envs if resets_completely(envs) else None,
                )
            )
        try:
            return self.behave(client.run_task(snapshot), snapshot)
        finally:
            if not lent or lent[0].envs is not client.runner.envs:
                client.close()  # its own env; a lent one stays open for the next client

    def run_group(self, worker_ids: list[int], snapshot: Snapshot, lent: list[Any]) -> list[Update]:
        """Clients ``worker_ids`` starting their rounds from one snapshot, on an executor that
        runs them one after another: built at once and computed together where they can be
        (``run_local_group``: one forward and one backward pass per local step for all of
        them), else one at a time. ``lent`` as in ``run``; clients past the first borrow the
        spare envs kept there (``LentParts.spare_envs``), as many as a round has clients."""
        parts: LentParts | None = lent[0] if lent else None
        incarnation = max(snapshot.version, 0)
        shared = parts.model if parts is not None else None
        clients: list[Worker] = []
        for i, worker_id in enumerate(worker_ids):
            envs = None
            if parts is not None and parts.envs is not None:
                spare = parts.spare_envs
                envs = parts.envs if i == 0 else spare[i - 1] if i <= len(spare) else None
            client = Worker(
                worker_id,
                self.settings,
                self.info,
                incarnation,
                shared_model=shared,
                lent_envs=envs,
            )
            if shared is None and client.shares_model:
                shared = (client.model, client.flat)
            clients.append(client)
        if not lent:
            first = clients[0].runner.envs
            lent.append(LentParts(model=shared, envs=first if resets_completely(first) else None))
        parts = lent[0]
        if parts.envs is not None:  # keep the new clients' envs for the next rounds
            for client in clients[1 + len(parts.spare_envs) :]:
                parts.spare_envs.append(client.runner.envs)
        kept = {id(parts.envs), *map(id, parts.spare_envs)}
        try:
            if groups_local_training(clients, snapshot):
                updates = run_local_group(clients, snapshot)
            else:
                updates = [client.run_task(snapshot) for client in clients]
            return [self.behave(update, snapshot) for update in updates]
        finally:
            for client in clients:
                if id(client.runner.envs) not in kept:
                    client.close()

    def behave(self, update: Update, snapshot: Snapshot) -> Update:
        """What the client really sends: a Byzantine client's Δ attack replaces its honest Δ
        (an env attack already shaped it). With Byzantine clients in the run, every update is
        marked (``fed/byzantine`` 1 or 0) so the logs show who attacked in which round."""
        settings = self.clients
        if settings.byzantine_fraction == 0:
            return update
        attack = client_profile(settings, update.worker_id).attack
        update.stats["fed/byzantine"] = 1.0 if attack else 0.0
        if attack in DELTA_ATTACKS and isinstance(update.payload, torch.Tensor):
            update.payload = attack_delta(
                update.payload,
                attack,
                settings.byzantine_scale,
                settings.seed,
                update.worker_id,
                snapshot.version,
            )
        return update

    def cost_model(self) -> Any:
        return ClientCostModel(self.clients)


@dataclass(frozen=True)
class LentParts:
    """What clients that run one at a time in one process pass on to the next (None: each
    builds its own)."""

    model: tuple[torch.nn.Module, FlatParams] | None
    envs: gym.vector.VectorEnv | None
    spare_envs: list[gym.vector.VectorEnv] = field(default_factory=list)
    """More envs like ``envs``, for the clients of a round computed together (``run_group``)."""


def resets_completely(envs: gym.vector.VectorEnv) -> bool:
    """Whether ``reset(seed=...)`` leaves nothing of these envs' past: a synchronous vector
    env of Gymnasium's classic-control envs, wrapped only in wrappers whose state a reset
    clears. Their step reads only the state that reset draws from the seed and the physical
    attributes that an env variant sets. Other envs (a user's, Atari, MuJoCo, stateful
    wrappers such as running normalization) may keep something across a reset: never lent."""
    if type(envs) is not gym.vector.SyncVectorEnv:
        return False
    for env in envs.envs:
        while isinstance(env, gym.Wrapper):
            if type(env) not in _RESET_CLEARS:
                return False
            env = env.env
        if not type(env).__module__.startswith("gymnasium.envs.classic_control."):
            return False
    return True


def make_pool(
    settings: WorkerSettings, info: EnvInfo, workers: int, clients: ClientSettings | None = None
) -> WorkerPool:
    """Edge clients when ``clients`` sets K, else ``workers`` persistent workers."""
    if clients is not None and clients.clients is not None:
        return EdgeClients(settings, info, clients)
    return PersistentWorkers(settings, info, workers)
