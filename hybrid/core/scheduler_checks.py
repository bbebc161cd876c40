"""Checks on what a scheduler hands the loop: its ``ready()`` worker ids and ``admit()``
verdicts. A user's scheduler is code the loop cannot trust to keep the protocol: a busy,
repeated or unknown worker id would start two tasks on one worker (overlapping tasks, τ
counted wrong), and a verdict that is not a ``Verdict`` would make an update vanish
unrecorded. Both are refused in one line naming the scheduler and the method. The loop
calls these on every runtime, so the rule is one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybrid.errors import ConfigError
from hybrid.protocol import Verdict


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_ready(scheduler: Any, starting: Any, idle: Sequence[int]) -> None:
    """``starting`` (what ``scheduler.ready(idle, ...)`` returned) must name distinct idle
    workers, each by its id or as ``(id, task settings)``."""
    if not starting:
        return
    name = type(scheduler).__name__
    if not isinstance(starting, list | tuple):
        raise ConfigError(
            f"scheduler: {name}.ready() returned {_shown(starting)}; it must return a list of "
            "worker ids taken from its idle argument"
        )
    free = set(idle)
    # a worker may be named with its own task settings: (worker id, {"steps": 20})
    named = [
        entry[0]
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], dict)
        else entry
        for entry in starting
    ]
    wrong = [w for w in named if isinstance(w, bool) or not isinstance(w, int) or w not in free]
    if wrong or len(set(named)) != len(named):
        why = f"{_shown(wrong[0])} is not an idle worker" if wrong else "it names a worker twice"
        raise ConfigError(
            f"scheduler: {name}.ready() returned {_shown(list(starting))}: {why} (idle now: "
            f"{_shown(sorted(free))}); return distinct ids from its idle argument"
        )


def check_verdict(scheduler: Any, verdict: Any, method: str = "admit") -> None:
    if not isinstance(verdict, Verdict):
        raise ConfigError(
            f"scheduler: {type(scheduler).__name__}.{method}() returned {_shown(verdict)}; it "
            "must return Verdict.BUFFER or Verdict.DROP (hybrid.Verdict)"
        )


__all__ = ["check_ready", "check_verdict"]
