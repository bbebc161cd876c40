"""Saving and restoring a PettingZoo env's state as plain data, for exact resume.

PettingZoo has no state API, and its envs keep state deeper than Gymnasium's
classic-control envs (``hybrid/env_state.py`` copies one level per wrapper). A
Parallel env is a graph of Python objects: the parallel wrapper, the AEC env and
its wrappers, the raw env and what it owns. For mpe2 that is a ``World`` whose
agents and landmarks hold positions, velocities and communication in numpy arrays
(``state._p_pos``, ``state._p_vel``, ``state._c``) and their last actions, the raw
env's ``np_random`` Generator, its step counter, agent lists, reward, termination
and truncation dicts, and the AEC ``AgentSelector``.

``env_state`` walks that graph from the env through every attribute of every
object (lists, tuples and dicts included) and copies the plain data: numbers,
strings, numpy arrays, Generators. Objects reached twice (an array or a Generator
shared by two owners) are recorded once and restored shared. ``load_env_state``
writes the values back into a freshly built and reset env of the same id, object
by object, so the next step is the one the saved env would have taken.

Not state, and skipped: gymnasium spaces, functions, methods, classes and modules
(configuration, rebuilt identically from the env id), and pygame objects
(rendering handles). An env that holds anything else (a physics engine's handle,
an object without a ``__dict__``, a set) is *inexact*: the runner restarts its
episode from a fresh seed on resume, as single-agent envs do, and the resumed run
is no longer bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import copy
import functools
import types
from typing import Any

import gymnasium as gym
import numpy as np

_CALLABLES = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.ModuleType,
    functools.partial,
    type,
)


class EnvStateMismatch(RuntimeError):
    """The saved graph does not fit the env it is loaded into (another env, or version)."""


def _is_leaf(value: Any) -> bool:
    """Plain data copied as a whole."""
    if value is None or isinstance(value, bool | int | float | str | bytes | np.generic):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype != object
    return isinstance(value, np.random.Generator)


def _skipped(value: Any) -> bool:
    """Configuration or rendering, not state."""
    if isinstance(value, (*_CALLABLES, gym.Space)):
        return True
    return type(value).__module__.split(".")[0] == "pygame"


def _plain_key(key: Any) -> bool:
    if isinstance(key, tuple):
        return all(_plain_key(k) for k in key)
    return isinstance(key, bool | int | str)


class _Capture:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # id of an object already recorded -> its index
        self.keep: list[Any] = []  # keeps them alive, so that ids stay unique
        self.exact = True

    def node(self, value: Any) -> dict[str, Any] | None:
        """The value as a node of plain data; None when it is skipped or not plain."""
        if _skipped(value):
            return None
        shared = not isinstance(value, bool | int | float | str | bytes | np.generic | None)
        if shared and id(value) in self.seen:
            return {"kind": "alias", "index": self.seen[id(value)]}
        if _is_leaf(value):
            return self._record(value, {"kind": "value", "value": copy.deepcopy(value)}, shared)
        if isinstance(value, list | tuple):
            node = self._record(value, {"kind": type(value).__name__, "items": []}, True)
            for item in value:
                child = self.node(item)
                if child is None:  # a list with a hole would restore misaligned
                    self.exact = False
                    return None
                node["items"].append(child)
            return node
        if isinstance(value, dict):
            node = self._record(value, {"kind": "dict", "items": []}, True)
            for key, item in value.items():
                if not _plain_key(key):
                    self.exact = False
                    return None
                child = self.node(item)
                if child is None and not _skipped(item):
                    return None  # not plain: the capture is already marked inexact
                if child is not None:
                    node["items"].append([key, child])
            return node
        if hasattr(value, "__dict__"):
            kind = {"kind": "object", "type": type(value).__qualname__, "vars": {}}
            node = self._record(value, kind, True)
            for key, item in vars(value).items():
                child = self.node(item)
                if child is None and not _skipped(item):
                    self.exact = False
                if child is not None:
                    node["vars"][key] = child
            return node
        self.exact = False  # no __dict__ to walk (a C extension's handle, a set, ...)
        return None

    def _record(self, value: Any, node: dict[str, Any], shared: bool) -> dict[str, Any]:
        if shared:
            node["index"] = len(self.keep)
            self.seen[id(value)] = len(self.keep)
            self.keep.append(value)
        return node


def env_state(env: Any) -> dict[str, Any]:
    """``{"exact": bool, "graph": node}``: the env's state as plain data."""
    capture = _Capture()
    graph = capture.node(env)
    return {"exact": capture.exact and graph is not None, "graph": graph}


class _Restore:
    def __init__(self) -> None:
        self.restored: dict[int, Any] = {}  # index of a shared node -> what it became

    def value(self, node: dict[str, Any], existing: Any) -> Any:
        kind = node["kind"]
        if kind == "alias":
            if node["index"] not in self.restored:
                raise EnvStateMismatch("an alias before what it refers to")
            return self.restored[node["index"]]
        if kind == "value":
            result = copy.deepcopy(node["value"])  # the state may be loaded again
        elif kind in ("list", "tuple"):
            items = node["items"]
            olds = existing if isinstance(existing, list | tuple) else [None] * len(items)
            if len(olds) != len(items):
                raise EnvStateMismatch(f"{len(items)} items saved, {len(olds)} in the env")
            values = [self.value(n, old) for n, old in zip(items, olds, strict=True)]
            if kind == "tuple":
                result = tuple(values)
            elif isinstance(existing, list):
                existing[:] = values  # the same list object: others may hold it
                result = existing
            else:
                result = values
        elif kind == "dict":
            result = existing if isinstance(existing, dict) else {}
            entries = [(key, self.value(n, result.get(key))) for key, n in node["items"]]
            saved = {key for key, _ in entries}
            # What the capture skipped (spaces, callables) stays; the rest is as saved.
            kept = [(k, v) for k, v in result.items() if k not in saved and _skipped(v)]
            result.clear()
            result.update(entries)
            result.update(kept)
        elif kind == "object":
            if type(existing).__qualname__ != node["type"]:
                found = type(existing).__qualname__
                raise EnvStateMismatch(f"a {node['type']} was saved where the env has a {found}")
            self.into(existing, node["vars"])
            result = existing
        else:
            raise EnvStateMismatch(f"unknown node kind {kind!r}")
        if "index" in node:
            self.restored[node["index"]] = result
        return result

    def into(self, obj: Any, saved_vars: dict[str, Any]) -> None:
        # Written to the instance dict, as read: properties and __setattr__ hooks are bypassed.
        attributes = vars(obj)
        for key, node in saved_vars.items():
            attributes[key] = self.value(node, attributes.get(key))


def load_env_state(env: Any, state: dict[str, Any]) -> None:
    """Write ``env_state(saved)`` into ``env``, an env built from the same id and reset
    (so that every object the saved one held exists); raises EnvStateMismatch."""
    graph = state["graph"]
    if graph is None or graph["kind"] != "object":
        raise EnvStateMismatch("no saved object graph")
    restore = _Restore()
    restore.restored[graph["index"]] = env
    restore.into(env, graph["vars"])
