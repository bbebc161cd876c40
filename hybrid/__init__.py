"""hybrid: update schedulers for deep RL on one worker / global-model core.

``hybrid.train(TrainConfig(...)) -> Result`` is the one entry point; the CLI wraps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybrid.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from hybrid.core.loop import Result, train
    from hybrid.schedulers import Scheduler, Verdict, register_scheduler
    from hybrid.tracking import Callback

__all__ = [
    "Callback",
    "ConfigError",
    "Result",
    "Scheduler",
    "TrainConfig",
    "Verdict",
    "register_scheduler",
    "train",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import hybrid` (and the analysis tools) stay light.
    if name in ("train", "Result"):
        from hybrid.core import loop

        return getattr(loop, name)
    if name == "Callback":
        from hybrid import tracking

        return tracking.Callback
    if name in ("Scheduler", "Verdict", "register_scheduler"):
        from hybrid import schedulers

        return getattr(schedulers, name)
    if name in ("Step", "Update", "Snapshot"):  # what a scheduler of your own handles
        from hybrid.core import global_model, update

        return getattr(update if name != "Step" else global_model, name)
    raise AttributeError(f"module 'hybrid' has no attribute {name!r}")
