"""The runtimes' settings: what the assembly takes from the flat config for them.

Imports nothing of the project at run time, so every runtime module, and the worker
processes and Ray actors that receive these settings pickled, can use it. No field has a
default: the assembly fills each from the config field of the same name, whose default is
the one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybrid.core.global_model import ServerSettings


@dataclass(frozen=True)
class ClockSettings:
    """The serial runtime's virtual clock: worker speeds and task costs."""

    cluster: str
    step_cost_s: float
    task_overhead_s: float
    speed_sigma: float
    straggler_fraction: float
    straggler_slowdown: float
    jitter_sigma: float
    bandwidth_mbps: float


@dataclass(frozen=True)
class RuntimeSettings:
    """What every runtime is built from; picklable (sent to worker processes)."""

    runtime: str
    workers: int
    """Workers (executors): the persistent workers, or the executors of edge clients."""
    seed: int
    server: ServerSettings
    """The global model's: a Hogwild! worker process builds its optimizer from it."""
    clock: ClockSettings
    codec: str
    """Hogwild! runs only without a codec (workers step θ with raw gradients)."""
    lock_free: bool
    torch_threads: int
    inject_worker_faults: float
    ray_address: str


__all__ = ["ClockSettings", "RuntimeSettings"]
