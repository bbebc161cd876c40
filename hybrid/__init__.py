"""hybrid: update schedulers for deep RL on one worker / global-model core.

``hybrid.train(TrainConfig(...)) -> Result`` is the one entry point; the CLI wraps it.
``hybrid.load_runs`` and ``hybrid.compare`` read run directories back as pandas
DataFrames and as a seed-aggregated comparison (IQM with bootstrap CIs, figures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybrid.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from hybrid.analysis import Comparison, compare, load_runs
    from hybrid.protocol import (
        CollectExperience,
        ComputeGradient,
        Payload,
        Snapshot,
        Step,
        TrainLocally,
        Update,
        Verdict,
    )
    from hybrid.schedulers import Scheduler, register_scheduler
    from hybrid.tracking import Callback
    from hybrid.trainer import Result, train

_PROTOCOL = (
    "CollectExperience",
    "ComputeGradient",
    "Payload",
    "Snapshot",
    "Step",
    "TrainLocally",
    "Update",
    "Verdict",
)
__all__ = [
    "Callback",
    "CollectExperience",
    "Comparison",
    "ComputeGradient",
    "ConfigError",
    "Payload",
    "Result",
    "Scheduler",
    "Snapshot",
    "Step",
    "TrainConfig",
    "TrainLocally",
    "Update",
    "Verdict",
    "compare",
    "load_runs",
    "register_scheduler",
    "train",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import hybrid` (and the analysis tools) stay light.
    if name in ("train", "Result"):
        from hybrid import trainer

        return getattr(trainer, name)
    if name in ("compare", "load_runs", "Comparison"):
        from hybrid import analysis

        return getattr(analysis, name)
    if name == "Callback":
        from hybrid import tracking

        return tracking.Callback
    if name == "Scheduler":
        # the class itself, not through the package: the built-in schedulers import it from
        # here while hybrid.schedulers is still loading them
        from hybrid.schedulers.base import Scheduler

        return Scheduler
    if name == "register_scheduler":
        from hybrid import schedulers

        return schedulers.register_scheduler
    if name in _PROTOCOL:  # what a scheduler of your own handles
        from hybrid import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module 'hybrid' has no attribute {name!r}")
