"""The runtimes' settings: what the assembly takes from the flat config for them.

Imports nothing of the project at run time, so every runtime module, and the worker
processes and Ray actors that receive these settings pickled, can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybrid.core.global_model import ServerSettings


@dataclass(frozen=True)
class ClockSettings:
    """The serial runtime's virtual clock: worker speeds and task costs."""

    cluster: str = "homogeneous"
    step_cost_s: float = 1e-4
    task_overhead_s: float = 1e-3
    speed_sigma: float = 0.5
    straggler_fraction: float = 0.25
    straggler_slowdown: float = 4.0
    jitter_sigma: float = 0.1
    bandwidth_mbps: float = 100.0


@dataclass(frozen=True)
class RuntimeSettings:
    """What every runtime is built from; picklable (sent to worker processes)."""

    runtime: str
    workers: int
    """Workers (executors): the persistent workers, or the executors of edge clients."""
    seed: int
    server: ServerSettings
    """The global model's: a Hogwild! worker process builds its optimizer from it."""
    clock: ClockSettings = field(default_factory=ClockSettings)
    codec: str = "none"
    """Hogwild! runs only without a codec (workers step θ with raw gradients)."""
    lock_free: bool = True
    torch_threads: int = 1
    inject_worker_faults: float = 0.0
    ray_address: str = ""


__all__ = ["ClockSettings", "RuntimeSettings"]
