"""``sgp``: Stochastic Gradient Push (Assran et al. 2019), push-sum on a directed graph.

Each worker keeps a numerator x_k and a weight w_k (both start at θ₀ and 1) and trains at
the de-biased z_k = x_k / w_k. A round: every worker steps x_k along its direction at z_k,
then keeps 1/(peers+1) of (x_k, w_k) and pushes as much to each of its ``peers``
out-neighbours on the time-varying directed exponential graph (round t: node i sends to
i + 2^(t mod log₂K)). The matrix is column-stochastic, so Σ x and Σ w are conserved and z_k
converges to the average even where P is not doubly stochastic. With ``delay`` = d > 0,
what is pushed arrives d rounds later (overlap SGP's bounded delay; the round barrier is
kept); the weights then drift from 1 and the de-biasing matters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.schedulers.decentralized import MixingStep, RoundReplicas
from hybrid.topology import exponential_hops, exponential_push_matrix


@dataclass
class SgpSettings:
    peers: int = 1
    """Out-neighbours each worker pushes to per round."""
    delay: int = 0
    """Rounds before pushed mass arrives (0: the same round)."""
    evaluate_replicas: bool = False
    """Also evaluate every replica at the end (``replica_eval_returns`` in summary.json)."""

    def __post_init__(self) -> None:
        if self.peers < 1:
            raise ValueError(f"peers: {self.peers} must be >= 1")
        if not 0 <= self.delay <= 64:
            raise ValueError(f"delay: {self.delay} must be in [0, 64] rounds")


class Sgp(RoundReplicas):
    Settings = SgpSettings
    push_sum = True

    def __init__(self, workers: int, settings: SgpSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.evaluate_replicas = settings.evaluate_replicas
        period = len(exponential_hops(workers))
        product = np.eye(workers)
        for t in range(period):
            product = exponential_push_matrix(workers, t, settings.peers) @ product
        # of one period of the time-varying graph (1 for K a power of 2 and one peer:
        # log₂K rounds average exactly)
        magnitudes = np.sort(np.abs(np.linalg.eigvals(product)))[::-1]
        self.spectral_gap = float(1.0 - magnitudes[1])

    def describe(self) -> str:
        peers, delay = self.settings.peers, self.settings.delay
        return (
            f"sgp on the time-varying exponential graph ({peers} peer(s), delay {delay}): "
            f"{super().describe()} over one period"
        )

    def mixing(self, round_index: int) -> MixingStep:
        p = exponential_push_matrix(self.workers, round_index, self.settings.peers)
        return MixingStep(mixing=p, push_sum=True, delay=self.settings.delay)
