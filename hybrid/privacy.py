"""Client-level differential privacy for federated rounds (DP-FedAvg) and its accountant.

DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models", Alg. 1 with the fixed-denominator estimator): each round the server

1. samples clients: ``fixed`` draws m of the K clients uniformly without replacement,
   ``poisson`` takes each client independently with probability q (expected qK);
2. clips each client's Δ to norm C: Δ · min(1, C / ‖Δ‖);
3. adds Gaussian noise N(0, (σC)² I) to the sum of the clipped Δs, and
4. divides by the expected number of clients (m, or qK): a fixed denominator, so one
   client's presence moves the result by at most C / m.

Adaptive clipping (Andrew et al. 2021, "Differentially private learning with adaptive
clipping") moves C towards the γ-quantile of the Δ norms: b̃ = (Σ 1[‖Δ_i‖ ≤ C] + N(0, σ_b²)) /
m, C ← C · exp(−η_C (b̃ − γ)). The clipped count is released too, so the Δ sum gets the noise
multiplier σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), which makes the pair as private as one Gaussian
mechanism with multiplier σ (their Thm. 1): the accountant charges σ.

The privacy spent is computed by Google's ``dp-accounting`` (not by hand): its RDP accountant
composes one sampled Gaussian event per round, ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))``
under add-or-remove-one adjacency, or ``SampledWithoutReplacementDpEvent(K, m,
GaussianDpEvent(σ))`` under replace-one adjacency (the library's requirement for that event),
and reports ε at the stated δ. A client's whole Δ is the unit protected (client-level DP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybrid.errors import ConfigError

if TYPE_CHECKING:
    import torch

# torch and dp_accounting are imported where used: validating a config builds
# PrivacySettings (and asks the accountant whether a target ε is reachable), without torch.

SAMPLINGS = ("fixed", "poisson")
RDP_ORDERS = (*range(2, 33), 40, 48, 56, 64, 80, 96, 128, 192, 256)
"""Integer Rényi orders: the library's fractional ones below 2 fail to converge at the large
sampling rates of federated rounds, and fine steps above 32 cost seconds per event without
moving ε; a coarser set can only overstate ε, never understate it."""


@dataclass(frozen=True)
class PrivacySettings:
    """DP-FedAvg's server settings (fedavg's ``dp_*`` fields); ``clip`` 0 turns it off."""

    clip: float = 0.0
    """C: every Δ is clipped to this L2 norm (0: no DP); the initial C when adaptive."""
    noise_multiplier: float = 0.0
    """σ: the Δ sum gets Gaussian noise of standard deviation σ·C."""
    sampling: str = "fixed"
    """fixed (m of K without replacement) or poisson (each client with probability q)."""
    delta: float = 1e-5
    """δ at which ε is reported."""
    target_epsilon: float = 0.0
    """Stop the run before a round would take ε past this (0: no target)."""
    adaptive_quantile: float = 0.0
    """γ of adaptive clipping (Andrew et al. 2021), in (0, 1); 0: C stays fixed."""
    clip_lr: float = 0.2
    """η_C: adaptive clipping's geometric step."""
    count_noise: float = 0.0
    """σ_b: the clipped count's noise standard deviation (0: m / 20, the paper's choice)."""

    def __post_init__(self) -> None:
        if not self.clip >= 0:
            raise ConfigError(f"dp_clip: {self.clip} must be >= 0 (0: no differential privacy)")
        if not self.noise_multiplier >= 0:
            raise ConfigError(f"dp_noise_multiplier: {self.noise_multiplier} must be >= 0")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(
                f"dp_sampling: unknown {self.sampling!r}; choose one of {', '.join(SAMPLINGS)}"
            )
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"dp_delta: {self.delta} is outside (0, 1)")
        if not self.target_epsilon >= 0:
            raise ConfigError(f"dp_target_epsilon: {self.target_epsilon} must be >= 0 (0: none)")
        if not 0.0 <= self.adaptive_quantile < 1.0:
            raise ConfigError(
                f"dp_adaptive_quantile: {self.adaptive_quantile} is outside [0, 1) (0: fixed C)"
            )
        if not self.clip_lr > 0:
            raise ConfigError(f"dp_clip_lr: {self.clip_lr} must be > 0")
        if not self.count_noise >= 0:
            raise ConfigError(f"dp_count_noise: {self.count_noise} must be >= 0 (0: m / 20)")

    @property
    def enabled(self) -> bool:
        return self.clip > 0

    def count_stddev(self, expected_clients: float) -> float:
        return self.count_noise or expected_clients / 20

    def delta_noise_multiplier(self, expected_clients: float) -> float:
        """σ_Δ: the noise multiplier the Δ sum gets (σ itself unless clipping adapts)."""
        sigma = self.noise_multiplier
        if not self.adaptive_quantile or sigma == 0:
            return sigma
        sigma_b = self.count_stddev(expected_clients)
        return (sigma**-2 - (2 * sigma_b) ** -2) ** -0.5

    def check_round(self, clients: int, per_round: int) -> None:
        """Refuse settings that cannot run with K ``clients`` and m ``per_round`` (one line)."""
        if not self.enabled:
            return
        expected = float(per_round)
        if self.adaptive_quantile and self.noise_multiplier > 0:
            sigma_b = self.count_stddev(expected)
            if not 2 * sigma_b > self.noise_multiplier:
                raise ConfigError(
                    f"dp_count_noise: adaptive clipping needs 2*sigma_b > sigma "
                    f"({self.noise_multiplier}); sigma_b is {sigma_b:g}, raise it"
                )
        if self.target_epsilon:
            first = PrivacyAccountant(self, clients, per_round).epsilon_after(1)
            if first > self.target_epsilon:
                raise ConfigError(
                    f"dp_target_epsilon: {self.target_epsilon:g} is unreachable: one round "
                    f"already spends epsilon {first:.4g} at delta {self.delta:g} (sigma "
                    f"{self.noise_multiplier:g}, {per_round} of {clients} clients); raise "
                    "dp_noise_multiplier or the target"
                )


class PrivacyAccountant:
    """ε spent so far, from ``dp-accounting``'s RDP accountant, one event per round."""

    def __init__(
        self,
        settings: PrivacySettings,
        clients: int,
        per_round: int,
        orders: list[float] | None = None,
    ) -> None:
        try:  # the privacy extra; imported only by a DP run
            import dp_accounting
            from dp_accounting.rdp import RdpAccountant
        except ImportError:
            raise ConfigError(
                "dp_clip: DP-FedAvg's accountant needs dp-accounting: pip install 'hybrid[privacy]'"
            ) from None

        self.settings = settings
        self.orders = list(RDP_ORDERS) if orders is None else orders
        self._rdp = RdpAccountant
        self._epsilons: dict[int, float] = {}
        relation = dp_accounting.NeighboringRelation
        gaussian = dp_accounting.GaussianDpEvent(settings.noise_multiplier)
        if settings.sampling == "poisson":
            self.event: Any = dp_accounting.PoissonSampledDpEvent(per_round / clients, gaussian)
            self.relation = relation.ADD_OR_REMOVE_ONE
        else:
            self.event = dp_accounting.SampledWithoutReplacementDpEvent(
                clients, per_round, gaussian
            )
            self.relation = relation.REPLACE_ONE
        self.rounds = 0
        self._one_round: Any = None
        """The RDP curve of one round, composed once by the library (see ``epsilon_after``)."""

    def _accountant(self) -> Any:
        return self._rdp(self.orders, neighboring_relation=self.relation)

    def epsilon_after(self, rounds: int) -> float:
        """ε at the settings' δ after ``rounds`` rounds (0 rounds: 0)."""
        if rounds == 0:
            return 0.0
        if self.settings.noise_multiplier == 0:
            return math.inf
        if rounds not in self._epsilons:  # asked each round for this round and the next
            from dp_accounting.rdp import rdp_privacy_accountant

            if self._one_round is None:
                # The RDP accountant composes ``count`` rounds as count × one round's RDP curve
                # (SelfComposedDpEvent); the curve is computed once here instead of per round
                # (a second per round for fixed-size sampling). A test checks the result
                # against the library composing SelfComposedDpEvent itself.
                accountant = self._accountant()
                accountant.compose(self.event)
                self._one_round = accountant._rdp.copy()
            epsilon, _ = rdp_privacy_accountant.compute_epsilon(
                self.orders, rounds * self._one_round, self.settings.delta
            )
            self._epsilons = {r: e for r, e in self._epsilons.items() if abs(r - rounds) <= 2}
            self._epsilons[rounds] = float(epsilon)
        return self._epsilons[rounds]

    @property
    def epsilon(self) -> float:
        return self.epsilon_after(self.rounds)

    def allows_another_round(self) -> bool:
        target = self.settings.target_epsilon
        return not target or self.epsilon_after(self.rounds + 1) <= target


class DpFedAvg:
    """The server side of DP-FedAvg: clip, sum, add noise, divide by the expected count."""

    def __init__(
        self, settings: PrivacySettings, clients: int, per_round: int, generator: torch.Generator
    ) -> None:
        self.settings = settings
        self.expected_clients = float(per_round)
        """m for fixed-size sampling; qK with q = m / K for Poisson: the same number."""
        self.clip = settings.clip
        self.generator = generator
        self.accountant = PrivacyAccountant(settings, clients, per_round)
        self.last_unclipped_fraction = math.nan

    def aggregate(self, deltas: torch.Tensor) -> torch.Tensor:
        """The round's noised mean from its stacked Δs ``[n, d]``."""
        import torch

        s, clip = self.settings, self.clip
        norms = torch.linalg.vector_norm(deltas, dim=1)
        scale = torch.clamp(clip / torch.clamp(norms, min=1e-12), max=1.0)
        total = (deltas * scale[:, None]).sum(dim=0)
        sigma_delta = s.delta_noise_multiplier(self.expected_clients)
        if sigma_delta > 0:
            noise = torch.randn(total.shape, generator=self.generator, dtype=total.dtype)
            total = total + sigma_delta * clip * noise
        unclipped = float((norms <= clip).sum())
        self.last_unclipped_fraction = unclipped / max(len(deltas), 1)
        if s.adaptive_quantile:
            count_noise = 0.0
            if s.noise_multiplier > 0:
                draw = torch.randn((), generator=self.generator, dtype=torch.float64)
                count_noise = float(draw) * s.count_stddev(self.expected_clients)
            below = (unclipped + count_noise) / self.expected_clients
            self.clip = clip * math.exp(-s.clip_lr * (below - s.adaptive_quantile))
        return total / self.expected_clients

    def metrics(self) -> dict[str, float]:
        return {
            "dp_epsilon": self.accountant.epsilon,
            "dp_delta": self.settings.delta,
            "dp_rounds": self.accountant.rounds,
            "dp_clip": self.clip,
            "dp_unclipped_fraction": self.last_unclipped_fraction,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "clip": self.clip,
            "rounds": self.accountant.rounds,
            "generator": self.generator.get_state(),
            # logged in every row until the next round replaces it: a resume must show it too
            "unclipped_fraction": self.last_unclipped_fraction,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import torch

        self.clip = float(state["clip"])
        self.accountant.rounds = int(state["rounds"])
        self.generator.set_state(torch.as_tensor(state["generator"], dtype=torch.uint8))
        self.last_unclipped_fraction = float(state.get("unclipped_fraction", math.nan))


__all__ = ["SAMPLINGS", "DpFedAvg", "PrivacyAccountant", "PrivacySettings"]
