"""Runtimes: where workers execute. They know nothing of scheduling policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from hybrid.protocol import Snapshot, Update

if TYPE_CHECKING:
    from hybrid.config import TrainConfig
    from hybrid.core.global_model import GlobalModel
    from hybrid.envs import EnvInfo
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


def _serial(cfg: TrainConfig, info: EnvInfo, model: GlobalModel, scheduler: Scheduler) -> Runtime:
    from hybrid.cluster_profile import ClusterProfile, is_profile_path
    from hybrid.runtimes.pool import make_pool
    from hybrid.runtimes.serial import SerialRuntime

    if not is_profile_path(cfg.cluster):
        return SerialRuntime(cfg, info, make_pool(cfg, info))
    from hybrid.runtimes.virtual_cluster import ProfiledSerialRuntime

    return ProfiledSerialRuntime(
        cfg, info, ClusterProfile.load(cfg.cluster), lambda: model.version, scheduler.applies_alone
    )


def _processes(
    cfg: TrainConfig, info: EnvInfo, model: GlobalModel, scheduler: Scheduler
) -> Runtime:
    from hybrid.runtimes.pool import make_pool
    from hybrid.runtimes.processes import ProcessRuntime

    pool = make_pool(cfg, info)
    # Hogwild!: workers step the shared θ themselves when the scheduler would apply each
    # update alone anyway and nothing (a codec) must see the payload first; a process then
    # runs one persistent worker (edge clients come and go on any process).
    hogwild = cfg.lock_free and scheduler.applies_alone and cfg.codec == "none" and pool.persistent
    return ProcessRuntime(cfg, info, model if hogwild else None, pool)


def _ray(cfg: TrainConfig, info: EnvInfo, model: GlobalModel, scheduler: Scheduler) -> Runtime:
    try:
        from hybrid.runtimes.pool import make_pool
        from hybrid.runtimes.ray import RayRuntime
    except ModuleNotFoundError as exc:  # ray is an extra
        if exc.name != "ray":
            raise
        from hybrid.errors import ConfigError

        raise ConfigError(
            f"runtime: 'ray' needs Ray ({exc}); install it with pip install 'hybrid-rl[ray]'"
        ) from None
    return RayRuntime(cfg, info, make_pool(cfg, info))


RUNTIMES: dict[str, Callable[[TrainConfig, EnvInfo, GlobalModel, Scheduler], Runtime]] = {
    "serial": _serial,
    "processes": _processes,
    "ray": _ray,
}


def make_runtime(
    cfg: TrainConfig, info: EnvInfo, model: GlobalModel, scheduler: Scheduler
) -> Runtime:
    """The runtime ``cfg`` names. It may take over ``model``'s storage (shared memory) when
    ``scheduler`` lets workers apply their own updates."""
    return RUNTIMES[cfg.runtime](cfg, info, model, scheduler)
