"""Runtimes: where workers execute. They know nothing of scheduling policy: of a scheduler
they are told one boolean, whether its updates apply alone.

A runtime is built from ``RuntimeSettings`` (hybrid/runtimes/settings.py) and a worker pool
(hybrid/runtimes/pool.py) that the assembly made from the config; neither is the config."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from hybrid.core.appliers import SERVER_APPLIES, Applier
from hybrid.protocol import Snapshot, Update

if TYPE_CHECKING:
    from hybrid.core.global_model import GlobalModel
    from hybrid.envs import EnvInfo
    from hybrid.runtimes.pool import WorkerPool
    from hybrid.runtimes.settings import RuntimeSettings
    from hybrid.runtimes.shared_replicas import ReplicaExchange


class Runtime(Protocol):
    """Dispatches tasks to workers and hands back their updates, earliest completion first.

    Every member the loop (``hybrid.core.loop.Training``) uses is declared here; a runtime
    implements all of them (``RuntimeDefaults`` supplies the ones most runtimes share).
    """

    applier: Applier
    """Who writes θ (``hybrid.core.appliers``): ``SERVER_APPLIES``, the loop's server
    optimizer, or ``WorkersApply`` where the workers step θ themselves (Hogwild!)."""

    def idle_workers(self) -> list[int]: ...
    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None: ...
    def dispatch_group(self, worker_ids: list[int], snapshot: Snapshot) -> None:
        """Start tasks that share one snapshot (a runtime may compute them together)."""
        ...

    def next_update(self) -> Update: ...
    def virtual_time(self) -> float | None: ...
    def settle(self) -> None:
        """The loop accepts no more updates: return once nothing else will change the global
        model (workers that write it themselves have stopped writing)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Counters for the training rows, e.g. ``sched/worker_restarts``."""
        ...

    def worker_count(self) -> int:
        """How many workers a checkpoint of this runtime holds state for."""
        ...

    def summary_fields(self) -> dict[str, Any]:
        """What summary.json records of the runtime itself (a calibrated clock: its profile's
        hash and validation errors)."""
        ...

    def replica_exchange(self) -> ReplicaExchange | None:
        """Where a decentralized run's replicas live when the workers share them (processes:
        rows of shared memory, and AD-PSGD's pair mixes run in the workers); None: the loop
        keeps them in its own memory and each task carries its replica."""
        ...

    def replica_applier(self, model: GlobalModel, push_sum: bool) -> Applier | None:
        """A decentralized run's applier when this runtime's workers hold the replicas
        themselves (the ray actors); None: the loop holds them (``ReplicaApplier``).
        ``push_sum``: the scheduler's steps keep push-sum weights or delays."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class RuntimeDefaults:
    """What most runtimes share: the server applies, tasks on one snapshot start one by one,
    nothing to checkpoint. A runtime subclasses it and overrides what it does otherwise."""

    applier: Applier = SERVER_APPLIES

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        raise NotImplementedError

    def dispatch_group(self, worker_ids: list[int], snapshot: Snapshot) -> None:
        for worker_id in worker_ids:
            self.dispatch(worker_id, snapshot)

    def summary_fields(self) -> dict[str, Any]:
        return {}

    def replica_exchange(self) -> ReplicaExchange | None:
        return None

    def replica_applier(self, model: GlobalModel, push_sum: bool) -> Applier | None:
        del model, push_sum
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


def workers_write_params(
    settings: RuntimeSettings, applies_alone: bool, persistent_workers: bool
) -> bool:
    """Whether the runtime ``settings`` name lets its workers step θ themselves (Hogwild!).

    The processes runtime does when the scheduler would apply each update alone anyway
    (``applies_alone``), ``lock_free`` is on, nothing (a codec) must see the payload first,
    and each process runs one persistent worker (edge clients come and go on any process).
    The device choice asks this before anything is built: such a θ stays in CPU memory.
    """
    return (
        settings.runtime == "processes"
        and settings.lock_free
        and applies_alone
        and settings.codec == "none"
        and persistent_workers
    )


def _serial(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    applies_alone: bool,
    pool: WorkerPool,
    replicas: bool = False,
) -> Runtime:
    del replicas  # the serial runtime starts each task from the snapshot it is handed
    from hybrid.cluster_profile import ClusterProfile, is_profile_path
    from hybrid.runtimes.serial import SerialRuntime

    cluster = settings.clock.cluster
    if not is_profile_path(cluster):
        return SerialRuntime(settings, info, pool)
    from hybrid.runtimes.pool import EdgeClients
    from hybrid.runtimes.virtual_cluster import ProfiledClientsRuntime, ProfiledSerialRuntime

    profile = ClusterProfile.load(cluster)
    if isinstance(pool, EdgeClients):  # clients take turns on the workers: no Hogwild!
        return ProfiledClientsRuntime(settings, info, pool, profile, lambda: model.version)
    return ProfiledSerialRuntime(
        settings, info, pool, profile, lambda: model.version, applies_alone
    )


def _processes(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    applies_alone: bool,
    pool: WorkerPool,
    replicas: bool = False,
) -> Runtime:
    from hybrid.runtimes.processes import ProcessRuntime

    # a decentralized run (replicas) starts each task from its own worker's replica, and
    # no worker writes the one θ
    hogwild = not replicas and workers_write_params(settings, applies_alone, pool.persistent)
    return ProcessRuntime(settings, info, model if hogwild else None, pool, replicas)


def _ray(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    applies_alone: bool,
    pool: WorkerPool,
    replicas: bool = False,
) -> Runtime:
    try:
        from hybrid.runtimes.ray import RayRuntime
    except ModuleNotFoundError as exc:  # ray is an extra
        if exc.name != "ray":
            raise
        from hybrid.errors import ConfigError

        raise ConfigError(
            f"runtime: 'ray' needs Ray ({exc}); install it with pip install 'hybrid-rl[ray]'"
        ) from None
    # a decentralized run: every task starts from its own worker's replica
    return RayRuntime(settings, info, pool, replicas)


RuntimeBuilder = Callable[
    ["RuntimeSettings", "EnvInfo", "GlobalModel", bool, "WorkerPool", bool], Runtime
]
"""(settings, env, global model, whether the scheduler's updates apply alone, pool, whether
each worker trains a replica of its own: a decentralized run)."""
RUNTIMES: dict[str, RuntimeBuilder] = {
    "serial": _serial,
    "processes": _processes,
    "ray": _ray,
}


def make_runtime(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    applies_alone: bool,
    pool: WorkerPool,
    replicas: bool = False,
) -> Runtime:
    """The runtime ``settings.runtime`` names, running ``pool``'s workers. It takes over
    ``model``'s storage (shared memory) where its workers write θ
    (``workers_write_params``): only when the scheduler's updates apply alone. ``replicas``:
    each task starts from its own worker's replica (decentralized schedulers)."""
    return RUNTIMES[settings.runtime](settings, info, model, applies_alone, pool, replicas)


__all__ = [
    "RUNTIMES",
    "Runtime",
    "RuntimeBuilder",
    "RuntimeDefaults",
    "make_runtime",
    "workers_write_params",
]
