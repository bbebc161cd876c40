"""A guard around a scheduler you wrote: its faults become one line, not a traceback.

The loop calls a scheduler's methods without checking what they return: a built-in one is
tested, yours may be mid-development. ``Guarded`` wraps a user scheduler (the registry does
it for every scheduler that is not built in) and checks each call: an exception, or a value
the loop cannot use (``ready`` naming a busy worker, ``admit`` returning no ``Verdict``, a
``Step`` whose direction does not have the model's shape, ``metrics`` that are no numbers,
a ``state_dict`` a checkpoint cannot hold), stops the run with a ``SchedulerFault`` naming
the scheduler, the method and what it did. The loop's own clean-up then runs: the logs are
flushed and closed, and the checkpoints already written are left as they were (a
``state_dict`` that cannot be saved is refused before the checkpoint file is opened).

A fault while the run starts (``__init__``, ``bind``, ``load_state_dict`` on resume) is a
``ConfigError`` instead: the scheduler cannot run at all, exit code 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hybrid.errors import ConfigError, SchedulerFault
from hybrid.protocol import CollectExperience, Step, Update, Verdict
from hybrid.schedulers.base import ModelView, Scheduler
from hybrid.schedulers.decentralized import MixingStep, ReplicaScheduler

_SHOWN = 120  # characters of a returned value quoted in a message


def shown(value: object) -> str:
    """``repr(value)`` cut to one short line for an error message."""
    text = " ".join(repr(value).split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _raised(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"raised {type(exc).__name__}" + (f": {first[:_SHOWN]}" if first else "")


def construct(name: str, cls: type[Scheduler], *args: Any) -> Guarded:
    """``cls(*args)`` guarded; an exception in ``__init__`` is a ConfigError (exit 2)."""
    try:
        scheduler = cls(*args)
    except Exception as exc:
        raise ConfigError(f"scheduler {name}: {cls.__name__}.__init__ {_raised(exc)}") from None
    if isinstance(scheduler, ReplicaScheduler):
        return GuardedReplicas(scheduler, name)
    return Guarded(scheduler, name)


class Guarded(Scheduler):
    """``inner`` with each call the loop makes checked (see the module's docstring)."""

    def __init__(self, inner: Scheduler, name: str) -> None:
        # Not Scheduler.__init__: the buffer, the clock and everything else are inner's own.
        self.__dict__["inner"] = inner
        self.__dict__["name"] = name
        # what the loop and the runtimes read of the class, as the instance's own attributes
        self.__dict__["task_kind"] = inner.task_kind
        self.__dict__["staleness_unit"] = inner.staleness_unit
        self.__dict__["applies_alone"] = inner.applies_alone

    # --- the attributes the loop reads and writes are inner's ---------------------------------

    @property  # type: ignore[override]
    def buffer(self) -> list[tuple[Update, int]]:
        return self.inner.buffer

    @buffer.setter
    def buffer(self, value: list[tuple[Update, int]]) -> None:
        self.inner.buffer = value

    @property  # type: ignore[override]
    def rng(self) -> np.random.Generator:
        return self.inner.rng

    @property  # type: ignore[override]
    def model(self) -> ModelView | None:
        return self.inner.model

    @property
    def workers(self) -> int:  # type: ignore[override]
        return self.inner.workers

    def __getattr__(self, attribute: str) -> Any:
        # Anything else (a test reading a counter of yours) is inner's. Only called for names
        # not found on Guarded; "inner" itself missing (an unpickled shell) is no recursion.
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def __repr__(self) -> str:
        return f"Guarded({self.inner!r})"

    # --- checked calls --------------------------------------------------------------------------

    def fault(self, method: str, what: str) -> SchedulerFault:
        return SchedulerFault(f"scheduler {self.name}: {method} {what}")

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.inner, method)(*args)
        except SchedulerFault:
            raise
        except Exception as exc:
            raise self.fault(f"{method}()", _raised(exc)) from None

    def bind(self, model: ModelView, rng: np.random.Generator) -> None:
        try:
            self.inner.bind(model, rng)
        except Exception as exc:
            raise ConfigError(f"scheduler {self.name}: bind() {_raised(exc)}") from None

    def ready(self, idle: Sequence[int], version: int) -> list[Any]:
        chosen = self._call("ready", idle, version)
        allowed = set(idle)
        if isinstance(chosen, np.ndarray) and chosen.dtype.kind in "iu" and chosen.ndim == 1:
            chosen = chosen.tolist()
        if not isinstance(chosen, list | tuple | range):
            raise self.fault(
                "ready()", f"returned {shown(chosen)}; expected a list of idle worker ids"
            )
        ids: list[int] = []
        for entry in chosen:
            # a worker may be named with its own task settings: (worker id, {"steps": 20})
            named = isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], dict)
            worker = entry[0] if named else entry
            if isinstance(worker, bool) or not isinstance(worker, int | np.integer):
                raise self.fault("ready()", f"returned {shown(chosen)}: {shown(worker)} is no id")
            if int(worker) not in allowed or int(worker) in ids:
                why = "listed twice" if int(worker) in ids else "not idle"
                raise self.fault(
                    "ready()",
                    f"returned {shown(chosen)}: worker {int(worker)} is {why} "
                    f"(the idle workers were {shown(sorted(allowed))})",
                )
            ids.append(int(worker))
        # ids as ints (numpy's too); a worker named with settings keeps them
        return [
            (int(e[0]), e[1]) if isinstance(e, tuple) and len(e) == 2 else int(e) for e in chosen
        ]

    def admit(self, update: Update, staleness: int) -> Verdict:
        return self._verdict("admit()", self._call("admit", update, staleness))

    def reject(self, update: Update) -> Verdict:
        return self._verdict("reject()", self._call("reject", update))

    def _verdict(self, method: str, verdict: object) -> Verdict:
        if not isinstance(verdict, Verdict):
            raise self.fault(method, f"returned {shown(verdict)}; expected Verdict.BUFFER or DROP")
        return verdict

    def full(self) -> bool:
        answer = self._call("full")
        if answer is None:
            raise self.fault("full()", "returned None; expected True or False")
        try:
            return bool(answer)
        except Exception as exc:  # a tensor of several elements, an object without truth
            raise self.fault(
                "full()", f"returned {shown(answer)}, which is not True or False ({_raised(exc)})"
            ) from None

    def finished(self) -> bool:
        answer = self._call("finished")
        if not isinstance(answer, bool | np.bool_):
            raise self.fault("finished()", f"returned {shown(answer)}; expected True or False")
        return bool(answer)

    def combine(self) -> Step | None:
        step = self._call("combine")
        if step is not None:
            self._check_step(step)
        return step

    def _check_step(self, step: object) -> None:
        if not isinstance(step, Step):
            raise self.fault("combine()", f"returned {shown(step)}; expected a Step or None")
        self._check_scale_and_updates(step)
        if self.task_kind is CollectExperience:
            if not isinstance(step.batch, list):
                raise self.fault(
                    "combine()",
                    f"returned a Step whose batch is {shown(step.batch)}; a learner expects a "
                    "list of trajectories",
                )
            return
        direction, params = step.direction, self.model.params if self.model else None
        if not isinstance(direction, torch.Tensor) or not direction.is_floating_point():
            raise self.fault(
                "combine()",
                f"returned a Step whose direction is {shown(direction)}; expected a float "
                "tensor shaped like the model's parameters",
            )
        if params is not None and direction.shape != params.shape:
            raise self.fault(
                "combine()",
                f"returned a Step whose direction has shape {tuple(direction.shape)}; the "
                f"model's parameters have shape {tuple(params.shape)}",
            )

    def _check_scale_and_updates(self, step: Step) -> None:
        if not isinstance(step.lr_scale, int | float) or isinstance(step.lr_scale, bool):
            raise self.fault("combine()", f"returned a Step with lr_scale {shown(step.lr_scale)}")
        if not math.isfinite(step.lr_scale) or step.lr_scale < 0:
            raise self.fault(
                "combine()", f"returned a Step with lr_scale {step.lr_scale!r}; expected >= 0"
            )
        if not isinstance(step.updates, list) or not all(
            isinstance(u, Update) for u in step.updates
        ):
            raise self.fault(
                "combine()",
                f"returned a Step whose updates are {shown(step.updates)}; expected a list of "
                "the Updates it combines",
            )

    def metrics(self) -> dict[str, float]:
        values = self._call("metrics")
        if not isinstance(values, dict):
            raise self.fault("metrics()", f"returned {shown(values)}; expected a dict of numbers")
        plain: dict[str, float] = {}
        for key, value in values.items():
            if isinstance(value, np.generic) or (
                isinstance(value, torch.Tensor) and value.numel() == 1
            ):
                value = value.item()  # a numpy or one-element torch scalar: its number
            if not isinstance(key, str) or not isinstance(value, int | float | None):
                raise self.fault(
                    "metrics()",
                    f"returned {shown({key: value})} among its values; expected names (str) "
                    "mapped to numbers, which the JSONL log can write",
                )
            plain[key] = value
        return plain

    def state_dict(self) -> dict[str, Any]:
        state = self._call("state_dict")
        if not isinstance(state, dict):
            raise self.fault("state_dict()", f"returned {shown(state)}; expected a dict")
        problem = _not_plain(state, "state_dict()")
        if problem is not None:
            raise self.fault(
                "state_dict()",
                f"returned {problem}, which a checkpoint cannot hold (plain data only: numbers, "
                "strings, bytes, None, lists, tuples, dicts, tensors, numpy arrays)",
            )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            self.inner.load_state_dict(state)
        except Exception as exc:
            raise ConfigError(
                f"resume: scheduler {self.name}: load_state_dict() {_raised(exc)}"
            ) from None


class GuardedReplicas(Guarded, ReplicaScheduler):
    """A decentralized scheduler of yours, guarded: the loop and the runtimes see a
    ``ReplicaScheduler`` (a replica per worker, ``MixingStep``s) with its replica settings,
    and each step is checked as a mix of the replicas."""

    # ReplicaScheduler's class defaults would shadow inner's own values (``__getattr__``
    # only sees names not found on the class): read them from inner
    @property  # type: ignore[override]
    def evaluate_replicas(self) -> bool:
        return bool(self.inner.evaluate_replicas)

    @property  # type: ignore[override]
    def pair_lock(self) -> bool:
        return bool(self.inner.pair_lock)

    @property  # type: ignore[override]
    def push_sum(self) -> bool:
        return bool(self.inner.push_sum)

    def describe(self) -> str:
        return str(self._call("describe"))

    def _check_step(self, step: object) -> None:
        if not isinstance(step, MixingStep):
            raise self.fault(
                "combine()",
                f"returned {shown(step)}; a decentralized scheduler returns a MixingStep or None",
            )
        self._check_scale_and_updates(step)
        k = self.workers
        mixing = step.mixing
        if mixing is not None and (
            not isinstance(mixing, np.ndarray)
            or mixing.shape != (k, k)
            or mixing.dtype.kind not in "fiu"
            or not np.isfinite(mixing).all()
        ):
            raise self.fault(
                "combine()",
                f"returned a MixingStep whose mixing is {shown(mixing)}; expected None or a "
                f"finite {k}×{k} numpy array (X ← P X over the {k} replicas)",
            )
        if isinstance(step.delay, bool) or not isinstance(step.delay, int) or step.delay < 0:
            raise self.fault(
                "combine()", f"returned a MixingStep with delay {shown(step.delay)}; expected >= 0"
            )


_PLAIN = (str, int, float, bool, bytes, type(None), torch.Tensor, np.generic, np.random.Generator)


def _not_plain(value: Any, where: str) -> str | None:
    """Where in ``value`` something a weights-only checkpoint cannot hold is, or None."""
    if isinstance(value, _PLAIN):
        return None
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            for index, item in enumerate(value.ravel().tolist()):
                found = _not_plain(item, f"{where}[{index}]")
                if found:
                    return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int):
                return f"a key {shown(key)} in {where}"
            found = _not_plain(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _not_plain(item, f"{where}[{index}]")
            if found:
                return found
        return None
    return f"{where} = {shown(value)}"


__all__ = ["Guarded", "GuardedReplicas", "construct"]
