"""The errors that cross module boundaries. Imports nothing, so any module may raise them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot run. The message is one line naming the field and what is allowed."""


class TaskLost(Exception):
    """A sweep run's Ray task failed as a task, not as a run: its node died, retries spent."""


__all__ = ["ConfigError", "TaskLost"]
