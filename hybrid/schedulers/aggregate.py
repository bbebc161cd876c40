"""Aggregation maths as free functions, shared by the schedulers."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def weighted_mean(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Σ w_i v_i / Σ w_i, summed in the given order (deterministic)."""
    if len(vectors) != len(weights) or not vectors:
        raise ValueError("weighted_mean needs as many weights as vectors, and at least one")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weighted_mean needs a positive total weight")
    out = vectors[0] * (weights[0] / total)
    for vector, weight in zip(vectors[1:], weights[1:], strict=True):
        out.add_(vector, alpha=weight / total)
    return out
