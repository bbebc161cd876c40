"""``ad-psgd``: asynchronous decentralized SGD (AD-PSGD; Lian et al. 2018).

No round: a worker that finishes averages its replica with one neighbour drawn at random,
θ_i, θ_j ← (θ_i + θ_j) / 2, atomically per pair, then steps its own replica along its
direction, computed at the replica it read when it started (possibly stale). Averaging a
pair conserves the replicas' mean. A replica may have been averaged by others while its
worker computed: that count is the gossip staleness (``gossip_staleness_mean`` /
``_max``); τ itself counts every step applied anywhere (unit: updates).

The scheduler only draws the pair (``MixingStep.pairs``). On processes the worker itself
then averages the two shared rows and steps its own, holding both rows' locks unless
``pair_lock`` is off (``hybrid.runtimes.shared_replicas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybrid.protocol import Step
from hybrid.schedulers.decentralized import MixingStep, ReplicaScheduler
from hybrid.schedulers.gossip import check_topology
from hybrid.topology import build_graph, spectral_gap


@dataclass
class AdPsgdSettings:
    topology: str = "ring"
    """ring, torus (2-D), exponential, complete or random-regular: whom a worker may pick."""
    degree: int = 3
    """random-regular only: every worker's number of neighbours."""
    graph_seed: int = 0
    """random-regular only: which graph is drawn."""
    evaluate_replicas: bool = False
    """Also evaluate every replica at the end (``replica_eval_returns`` in summary.json)."""
    pair_lock: bool = True
    """On processes, where workers average pairs of shared replicas themselves: hold both
    rows' locks (taken in row order: no deadlock) so each average is atomic, as Lian et al.
    assume. False: lock-free, a concurrent pair sharing a row may lose part of an average.
    A setting of the algorithm rather than the runtime's ``lock_free``: that one defaults
    to Hogwild!'s unguarded writes, and here the atomic update is the algorithm as published,
    the lock-free one the variant to study."""

    def __post_init__(self) -> None:
        check_topology(self.topology, self.degree)


def pair_matrix(workers: int, i: int, j: int) -> np.ndarray:
    """The identity but for rows i and j, each (e_i + e_j) / 2: one pairwise average."""
    p = np.eye(workers)
    p[[i, i, j, j], [i, j, i, j]] = 0.5
    return p


class AdPsgd(ReplicaScheduler):
    Settings = AdPsgdSettings

    def __init__(self, workers: int, settings: AdPsgdSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.evaluate_replicas = settings.evaluate_replicas
        self.pair_lock = settings.pair_lock
        graph = build_graph(settings.topology, workers, settings.degree, settings.graph_seed)
        self.neighbours = [sorted(graph.neighbors(k)) for k in range(workers)]
        # the expected mixing matrix when every worker picks uniformly among its neighbours
        expected = np.zeros((workers, workers))
        for i, peers in enumerate(self.neighbours):
            for j in peers:
                expected += (pair_matrix(workers, i, j) - np.eye(workers)) / len(peers)
        self.spectral_gap = spectral_gap(np.eye(workers) + expected / workers)
        self.changes = [0] * workers
        """Times each replica has been written (own steps and averages)."""
        self.read_at = [0] * workers
        self.gossip_staleness: list[int] = []

    def describe(self) -> str:
        topology = self.settings.topology
        return f"ad-psgd on a {topology} graph: {super().describe()} (expected mixing matrix)"

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        for k in idle:
            self.read_at[k] = self.changes[k]
        return list(idle)

    def full(self) -> bool:
        return bool(self.buffer)

    def combine(self) -> Step | None:
        updates = [update for update, _ in self.buffer]
        self.buffer.clear()
        mixing = np.eye(self.workers)
        pairs: list[tuple[int, int]] = []
        for update in updates:  # one, unless several arrived at one instant
            i = update.worker_id
            self.gossip_staleness.append(self.changes[i] - self.read_at[i])
            j = int(self.neighbours[i][self.rng.integers(len(self.neighbours[i]))])
            mixing = pair_matrix(self.workers, i, j) @ mixing
            pairs.append((i, j))
            self.changes[i] += 2  # the average, then its own step
            self.changes[j] += 1
        return MixingStep(updates=updates, mixing=mixing, mix_first=True, pairs=pairs)

    def metrics(self) -> dict[str, float]:
        seen = self.gossip_staleness
        return super().metrics() | {
            "sched/gossip_staleness_mean": float(np.mean(seen)) if seen else 0.0,
            "sched/gossip_staleness_max": float(max(seen, default=0)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "changes": list(self.changes),
            "read_at": list(self.read_at),
            "gossip_staleness": list(self.gossip_staleness),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.changes = [int(c) for c in state["changes"]]
        self.read_at = [int(c) for c in state["read_at"]]
        self.gossip_staleness = [int(c) for c in state["gossip_staleness"]]
