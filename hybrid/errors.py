"""The errors that cross module boundaries. Imports nothing, so any module may raise them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot run. The message is one line naming the field and what is allowed."""


class SchedulerFault(RuntimeError):
    """A scheduler you wrote failed while the run ran: it raised, or returned what the loop
    cannot use. The message is one line naming the scheduler, the method and what it did."""


class TaskLost(Exception):
    """A sweep run's Ray task failed as a task, not as a run: its node died, retries spent."""


__all__ = ["ConfigError", "SchedulerFault", "TaskLost"]
