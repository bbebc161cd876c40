"""Per-client evaluation: the global model on each client's own env variant (fairness).

A mean return hides the clients a federated model serves badly. The final model is
evaluated greedily on a seeded sample of clients (``client_eval_clients``), each on
its own variant for ``client_eval_episodes`` episodes, and summarized as the mean
over clients, the mean of the worst 10% of clients, and the standard deviation
across clients. The default env's return is the usual evaluation beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hybrid.algorithms import AlgoSettings
from hybrid.clients import EVAL_STREAM, FEDERATED, ClientSettings, make_profiles, set_physics
from hybrid.core.worker import build_model
from hybrid.envs import EnvInfo, make_vector_env
from hybrid.nets import FlatParams
from hybrid.seeding import int_seed, stream

CHUNK = 64
"""Clients evaluated together in one vector env: bounds memory for any sample size."""


@dataclass(frozen=True)
class FairnessSettings:
    """What the per-client evaluation needs (built by ``federated.fairness_settings``)."""

    clients: ClientSettings
    """The run's clients (their profiles); also its env and seed."""
    algo: AlgoSettings
    client_eval_clients: int = 50
    client_eval_episodes: int = 2


def fairness(per_client: np.ndarray) -> dict[str, Any]:
    """Mean, worst-10% mean (at least one client) and standard deviation across clients."""
    values = np.sort(np.asarray(per_client, dtype=np.float64))
    if values.size == 0:
        raise ValueError("fairness needs at least one client")
    worst = values[: max(1, math.ceil(0.1 * values.size))]
    return {
        "client_eval_mean": float(values.mean()),
        "client_eval_worst10": float(worst.mean()),
        "client_eval_std": float(values.std()),
        "client_eval_clients": int(values.size),
        # every evaluated client's return, in client order: the data of a fairness plot
        "client_eval_returns": [float(v) for v in np.asarray(per_client, dtype=np.float64)],
    }


def eval_clients(settings: FairnessSettings) -> list[int]:
    """The seeded sample of clients evaluated (all of them when K is small enough)."""
    k = len(make_profiles(settings.clients))
    n = min(settings.client_eval_clients, k)
    rng = np.random.default_rng(stream(settings.clients.seed, FEDERATED, EVAL_STREAM))
    return sorted(int(c) for c in rng.choice(k, size=n, replace=False))


@torch.no_grad()
def client_returns(
    settings: FairnessSettings, info: EnvInfo, params: torch.Tensor, clients: Sequence[int]
) -> np.ndarray:
    """Greedy returns, [clients, client_eval_episodes], each client on its own variant.

    Episode seeds depend on the episode index only, so two clients differ by their
    dynamics, not by their luck with initial states.
    """
    profiles = make_profiles(settings.clients)
    episodes, seed = settings.client_eval_episodes, settings.clients.seed
    seeds = [int_seed(s) for s in stream(seed, FEDERATED, EVAL_STREAM, 1).spawn(episodes)]
    model = build_model(settings.algo, info)
    flat = FlatParams(model)
    flat.load(params)
    out = np.zeros((len(clients), episodes))
    for start in range(0, len(clients), CHUNK):
        chunk = list(clients[start : start + CHUNK])
        envs = make_vector_env(settings.clients.env, len(chunk) * episodes)
        try:
            for i, client in enumerate(chunk):
                for j in range(episodes):
                    set_physics(envs.envs[i * episodes + j].unwrapped, profiles[client].physics)
            obs, _ = envs.reset(seed=seeds * len(chunk))
            returns = np.zeros(len(chunk) * episodes)
            running = np.ones_like(returns, dtype=bool)
            while running.any():
                action = model.act(torch.as_tensor(obs, dtype=torch.float32), None).numpy()
                if info.continuous:
                    action = np.clip(action, info.action_low, info.action_high)
                obs, reward, terminated, truncated, _ = envs.step(action)
                returns += reward * running
                running &= ~(terminated | truncated)
        finally:
            envs.close()
        out[start : start + len(chunk)] = returns.reshape(len(chunk), episodes)
    return out


def client_fairness(
    settings: FairnessSettings, info: EnvInfo, params: torch.Tensor
) -> dict[str, Any]:
    per_client = client_returns(settings, info, params, eval_clients(settings)).mean(axis=1)
    return fairness(per_client)


__all__ = ["FairnessSettings", "client_fairness", "client_returns", "eval_clients", "fairness"]
