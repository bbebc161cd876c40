"""Robust aggregation of client model differences, as free functions.

Every rule takes the round's Δs stacked as the rows of an ``[n, d]`` tensor (and, for the
mean, their sample weights) and returns one ``[d]`` direction. ``fedavg``, FedBuff
(``examples/schedulers/fedbuff.py``) and a user's scheduler call them the same way, through
``aggregate(deltas, weights, settings)`` or each rule directly.

- ``mean``: the sample-weighted mean (McMahan et al. 2017). One arbitrary row moves it
  arbitrarily far: its breakdown point is 0.
- ``median``: the coordinate-wise median (Yin et al. 2018, Def. 1; the mean of the two middle
  values when n is even). It stays within the honest values' range while fewer than n/2
  rows are arbitrary.
- ``trimmed_mean``: per coordinate, drop the ⌊βn⌋ largest and ⌊βn⌋ smallest values and
  average the rest (Yin et al. 2018, Def. 2), β in [0, 0.5). It holds while at most ⌊βn⌋
  rows are arbitrary.
- ``krum`` / ``multi_krum``: score each row by the sum of squared distances to its n − f − 2
  nearest other rows; Krum returns the row with the lowest score, Multi-Krum the mean of the
  m rows with the lowest scores (Blanchard et al. 2017). Its guarantee needs n > 2f + 2.
- norm bounding (``norm_bound`` M > 0): each Δ is scaled to norm at most M before any rule
  (Sun et al. 2019, "Can you really backdoor federated learning?"): Δ / max(1, ‖Δ‖ / M).

The robust rules count clients, not samples: they ignore the weights (as their papers do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybrid.errors import ConfigError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions: validating a config builds AggregationSettings,
# and a config check must not import torch.

AGGREGATORS = ("mean", "median", "trimmed_mean", "krum", "multi_krum")


@dataclass(frozen=True)
class AggregationSettings:
    """The server's rule for combining a round's Δs (fedavg's fields, FedBuff's Settings)."""

    aggregator: str = "mean"
    """mean, median, trimmed_mean, krum or multi_krum."""
    trim_beta: float = 0.1
    """trimmed_mean: the fraction β cut from each end of every coordinate, in [0, 0.5)."""
    krum_f: int = 1
    """krum / multi_krum: the Byzantine clients f the rule is built to withstand."""
    krum_m: int = 1
    """multi_krum: how many of the best-scored Δs are averaged (krum: 1)."""
    norm_bound: float = 0.0
    """Scale every Δ to norm at most this before aggregating (0: off)."""

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ConfigError(
                f"aggregator: unknown {self.aggregator!r}; choose one of {', '.join(AGGREGATORS)}"
            )
        if not 0.0 <= self.trim_beta < 0.5:
            raise ConfigError(f"trim_beta: {self.trim_beta} is outside [0, 0.5)")
        if self.krum_f < 0:
            raise ConfigError(f"krum_f: {self.krum_f} must be >= 0")
        if self.krum_m < 1:
            raise ConfigError(f"krum_m: {self.krum_m} must be >= 1")
        if not self.norm_bound >= 0.0:  # also refuses NaN
            raise ConfigError(f"norm_bound: {self.norm_bound} must be >= 0 (0: off)")

    @property
    def is_plain_mean(self) -> bool:
        """The default: the sample-weighted mean of the raw Δs, bit for bit as before."""
        return self.aggregator == "mean" and self.norm_bound == 0.0

    def check_clients(self, per_round: int) -> None:
        """Refuse a rule that cannot hold with ``per_round`` Δs per aggregation."""
        if self.aggregator in ("krum", "multi_krum") and not per_round > 2 * self.krum_f + 2:
            raise ConfigError(
                f"krum_f: {self.krum_f} needs more than 2*f+2 = {2 * self.krum_f + 2} Δs per "
                f"aggregation (Blanchard et al. 2017; f must stay below n/2); this run "
                f"aggregates {per_round}"
            )
        if self.aggregator == "multi_krum" and self.krum_m > per_round - self.krum_f:
            raise ConfigError(
                f"krum_m: {self.krum_m} is more than n - f = {per_round - self.krum_f} "
                f"(n = {per_round} Δs per aggregation, f = {self.krum_f})"
            )


def bound_norms(deltas: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row scaled to norm at most ``bound``: Δ / max(1, ‖Δ‖ / bound)."""
    import torch

    norms = torch.linalg.vector_norm(deltas, dim=1, keepdim=True)
    return deltas / torch.clamp(norms / bound, min=1.0)


def weighted_mean(deltas: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """Σ w_i Δ_i / Σ w_i over the rows."""
    import torch

    w = torch.as_tensor(weights, dtype=deltas.dtype, device=deltas.device)
    if w.shape != (deltas.shape[0],) or not float(w.sum()) > 0:
        raise ValueError("weighted_mean needs one weight per row and a positive total")
    return (w[:, None] * deltas).sum(dim=0) / w.sum()


def coordinate_median(deltas: torch.Tensor) -> torch.Tensor:
    """The coordinate-wise median; with an even n, the mean of the two middle values."""
    ordered = deltas.sort(dim=0).values
    n = ordered.shape[0]
    if n % 2:
        return ordered[n // 2].clone()
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def trimmed_mean(deltas: torch.Tensor, beta: float) -> torch.Tensor:
    """Per coordinate, the mean after dropping the ⌊βn⌋ largest and ⌊βn⌋ smallest values."""
    if not 0.0 <= beta < 0.5:
        raise ValueError(f"trim_beta: {beta} is outside [0, 0.5)")
    n = deltas.shape[0]
    cut = int(beta * n + 1e-9)
    ordered = deltas.sort(dim=0).values
    return ordered[cut : n - cut].mean(dim=0)


def krum_scores(deltas: torch.Tensor, f: int) -> torch.Tensor:
    """Each row's Krum score: the sum of squared distances to its n − f − 2 nearest other rows
    (at least one: with fewer rows than the rule needs it degrades, never fails)."""
    import torch

    n = deltas.shape[0]
    rows = deltas.double()
    # exact differences, not the matrix-product shortcut that cancels on near rows
    squared = torch.cdist(rows, rows, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    neighbours = max(n - f - 2, 1)
    squared.fill_diagonal_(float("inf"))  # a row is not its own neighbour
    nearest = squared.sort(dim=1).values[:, : min(neighbours, n - 1)]
    return nearest.sum(dim=1)


def multi_krum(deltas: torch.Tensor, f: int, m: int = 1) -> torch.Tensor:
    """The mean of the m rows with the lowest Krum scores (m = 1: Krum). Ties go to the
    lower row index."""
    import torch

    n = deltas.shape[0]
    if n == 1:
        return deltas[0].clone()
    scores = krum_scores(deltas, f)
    chosen = torch.sort(scores, stable=True).indices[: min(m, n)]
    return deltas[chosen.sort().values].mean(dim=0)


def krum_selection(deltas: torch.Tensor, f: int, m: int = 1) -> list[int]:
    """Which rows (Multi-)Krum keeps, in row order."""
    import torch

    if deltas.shape[0] == 1:
        return [0]
    scores = krum_scores(deltas, f)
    return sorted(int(i) for i in torch.sort(scores, stable=True).indices[:m])


def aggregate(
    deltas: torch.Tensor, weights: Sequence[float], settings: AggregationSettings
) -> torch.Tensor:
    """The round's direction from its stacked Δs ``[n, d]`` under ``settings``."""
    if deltas.ndim != 2 or deltas.shape[0] == 0:
        raise ValueError(f"aggregate needs an [n, d] tensor with n >= 1, got {tuple(deltas.shape)}")
    if settings.norm_bound > 0:
        deltas = bound_norms(deltas, settings.norm_bound)
    rule = settings.aggregator
    if rule == "mean":
        return weighted_mean(deltas, weights)
    if rule == "median":
        return coordinate_median(deltas)
    if rule == "trimmed_mean":
        return trimmed_mean(deltas, settings.trim_beta)
    if rule == "krum":
        return multi_krum(deltas, settings.krum_f, 1)
    return multi_krum(deltas, settings.krum_f, settings.krum_m)


__all__ = [
    "AGGREGATORS",
    "AggregationSettings",
    "aggregate",
    "bound_norms",
    "coordinate_median",
    "krum_scores",
    "krum_selection",
    "multi_krum",
    "trimmed_mean",
    "weighted_mean",
]
