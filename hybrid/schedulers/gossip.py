"""``gossip``: synchronous decentralized SGD (D-PSGD; Lian et al. 2017).

Every worker keeps a replica θ_k. A round: each worker computes its direction at its own
replica and steps it with its own optimizer; then every replica becomes the weighted mean
of its neighbours', Θ ← W Θ, with W the Metropolis–Hastings matrix of the topology
(symmetric, doubly stochastic). On the complete graph W = 11ᵀ/K: all-reduce, which with
an SGD optimizer is ``sync``'s averaged step. ``mix_first`` takes Lian et al.'s order
instead, x_i ← Σ_j W_ij x_j − η g_i(x_i): the mix, then the step along the direction
computed before it (then the complete graph is no longer all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid.schedulers.decentralized import MixingStep, RoundReplicas
from hybrid.topology import TOPOLOGIES, build_graph, mixing_matrix, spectral_gap


@dataclass
class GossipSettings:
    topology: str = "ring"
    """ring, torus (2-D), exponential, complete (all-reduce) or random-regular."""
    degree: int = 3
    """random-regular only: every worker's number of neighbours."""
    graph_seed: int = 0
    """random-regular only: which graph is drawn."""
    mix_first: bool = False
    """Mix, then step (Lian et al.'s x_i ← Σ_j W_ij x_j − η g_i(x_i)); default: step, then mix."""
    evaluate_replicas: bool = False
    """Also evaluate every replica at the end (``replica_eval_returns`` in summary.json)."""

    def __post_init__(self) -> None:
        check_topology(self.topology, self.degree)


def check_topology(topology: str, degree: int) -> None:
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology: unknown {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    if degree < 1:
        raise ValueError(f"degree: {degree} must be >= 1")


class Gossip(RoundReplicas):
    Settings = GossipSettings

    def __init__(self, workers: int, settings: GossipSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.evaluate_replicas = settings.evaluate_replicas
        graph = build_graph(settings.topology, workers, settings.degree, settings.graph_seed)
        self.w = mixing_matrix(graph)
        self.spectral_gap = spectral_gap(self.w)

    def describe(self) -> str:
        return f"gossip on a {self.settings.topology} graph: " + super().describe()

    def mixing(self, round_index: int) -> MixingStep:
        return MixingStep(mixing=self.w, mix_first=self.settings.mix_first)
