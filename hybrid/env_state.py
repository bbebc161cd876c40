"""Saving and restoring the state of Gymnasium envs as plain data, for exact resume.

Gymnasium has no state API, but classic-control envs and the standard wrappers
keep their state in plain attributes (arrays, numbers, a numpy Generator). We
copy those, layer by layer. An env that also holds something else (a Box2D
world, a MuJoCo handle) is marked inexact: on resume it is reset with a fresh
seed instead, and the resumed run is no longer bit-identical (documented).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

# Configuration and handles, not state; rebuilt identically from the config.
_SKIP = {
    "env",
    "envs",
    "env_fns",
    "spec",
    "_cached_spec",
    "metadata",
    "_metadata",
    "_saved_kwargs",
    "action_space",
    "observation_space",
    "_action_space",
    "_observation_space",
    "single_action_space",
    "single_observation_space",
    "autoreset_mode",
    "render_mode",
}


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str | np.generic):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype != object or all(_is_plain(v) for v in value.flat)
    if isinstance(value, np.random.Generator):
        return True
    if isinstance(value, list | tuple):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _layers(env: gym.Env) -> list[Any]:
    chain = [env]
    while hasattr(chain[-1], "env"):
        chain.append(chain[-1].env)
    return chain


def _capture(layer: Any) -> tuple[dict[str, Any], bool]:
    state, exact = {}, True
    for key, value in vars(layer).items():
        if key in _SKIP:
            continue
        if _is_plain(value):
            # A copy: the live env goes on mutating its arrays and drawing from its RNG.
            state[key] = copy.deepcopy(value)
        else:
            exact = False
    return state, exact


def vector_env_state(envs: gym.vector.SyncVectorEnv) -> dict[str, Any]:
    """Plain-data state of a synchronous vector env and every wrapper of every sub-env."""
    vector, _ = _capture(envs)
    subs, exact = [], []
    for sub in envs.envs:
        layers = [_capture(layer) for layer in _layers(sub)]
        subs.append([state for state, _ in layers])
        exact.append(all(ok for _, ok in layers))
    return {"vector": vector, "envs": subs, "exact": exact}


def load_vector_env_state(
    envs: gym.vector.SyncVectorEnv, state: dict[str, Any], reseed: list[int]
) -> dict[int, Any]:
    """Restore ``vector_env_state``; returns {sub-env: first observation} of those that
    could only be reset."""
    for key, value in state["vector"].items():
        setattr(envs, key, copy.deepcopy(value))
    reset = {}
    for i, (sub, layers, exact) in enumerate(
        zip(envs.envs, state["envs"], state["exact"], strict=True)
    ):
        if not exact:
            reset[i], _ = sub.reset(seed=reseed[i])
            continue
        for layer, values in zip(_layers(sub), layers, strict=True):
            for key, value in values.items():
                setattr(layer, key, copy.deepcopy(value))  # the state may be loaded again
    return reset
