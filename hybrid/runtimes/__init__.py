"""Runtimes: where workers execute. They know nothing of scheduling policy.

A runtime is built from ``RuntimeSettings`` (hybrid/runtimes/settings.py) and a worker pool
(hybrid/runtimes/pool.py) that the assembly made from the config; neither is the config."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from hybrid.protocol import Snapshot, Update

if TYPE_CHECKING:
    from hybrid.core.global_model import GlobalModel
    from hybrid.envs import EnvInfo
    from hybrid.runtimes.pool import WorkerPool
    from hybrid.runtimes.settings import RuntimeSettings
    from hybrid.schedulers.base import Scheduler


class Runtime(Protocol):
    """Dispatches tasks to workers and hands back their updates, earliest completion first.

    A runtime may also name an ``applier`` (``hybrid.core.appliers``): who writes θ. One
    that does not leaves it to the loop's server optimizer; the processes runtime picks
    ``WorkersApply`` under Hogwild!.
    """

    def idle_workers(self) -> list[int]: ...
    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None: ...
    def next_update(self) -> Update: ...
    def virtual_time(self) -> float | None: ...
    def settle(self) -> None:
        """The loop accepts no more updates: return once nothing else will change the global
        model (workers that write it themselves have stopped writing)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Counters for the training rows, e.g. ``sched/worker_restarts``."""
        ...

    def close(self) -> None: ...


def _serial(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    scheduler: Scheduler,
    pool: WorkerPool,
) -> Runtime:
    from hybrid.cluster_profile import ClusterProfile, is_profile_path
    from hybrid.runtimes.serial import SerialRuntime

    cluster = settings.clock.cluster
    if not is_profile_path(cluster):
        return SerialRuntime(settings, info, pool)
    from hybrid.runtimes.virtual_cluster import ProfiledSerialRuntime

    profile = ClusterProfile.load(cluster)
    applies_alone = scheduler.applies_alone
    return ProfiledSerialRuntime(
        settings, info, pool, profile, lambda: model.version, applies_alone
    )


def _processes(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    scheduler: Scheduler,
    pool: WorkerPool,
) -> Runtime:
    from hybrid.runtimes.processes import ProcessRuntime

    # Hogwild!: workers step the shared θ themselves when the scheduler would apply each
    # update alone anyway and nothing (a codec) must see the payload first; a process then
    # runs one persistent worker (edge clients come and go on any process).
    hogwild = (
        settings.lock_free
        and scheduler.applies_alone
        and settings.codec == "none"
        and pool.persistent
    )
    replicas = bool(getattr(scheduler, "replicas", False))
    return ProcessRuntime(settings, info, model if hogwild else None, pool, replicas)


def _ray(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    scheduler: Scheduler,
    pool: WorkerPool,
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
    return RayRuntime(settings, info, pool, bool(getattr(scheduler, "replicas", False)))


RuntimeBuilder = Callable[
    ["RuntimeSettings", "EnvInfo", "GlobalModel", "Scheduler", "WorkerPool"], Runtime
]
RUNTIMES: dict[str, RuntimeBuilder] = {
    "serial": _serial,
    "processes": _processes,
    "ray": _ray,
}


def make_runtime(
    settings: RuntimeSettings,
    info: EnvInfo,
    model: GlobalModel,
    scheduler: Scheduler,
    pool: WorkerPool,
) -> Runtime:
    """The runtime ``settings.runtime`` names, running ``pool``'s workers. It may take over
    ``model``'s storage (shared memory) when ``scheduler`` lets workers apply their own
    updates."""
    return RUNTIMES[settings.runtime](settings, info, model, scheduler, pool)
