"""DC-ASGD: asynchronous SGD with delay compensation (Zheng et al. 2017, ICML).

A worker's gradient g was computed at θ_read; by the time it is applied the server holds
θ_now. DC-ASGD corrects g towards the gradient at θ_now with a cheap approximation of
the Hessian (the outer product of g, kept to its diagonal):

    g' = g + λ · g ⊙ g ⊙ (θ_now − θ_read)

``lam`` is λ (the paper's λ₀ ≈ 0.04 for CIFAR; larger for RL's noisier gradients). With
``adaptive`` (DC-ASGD-a) λ is scaled per coordinate by 1 / sqrt(MeanSquare(g)), a moving
average of g² with ``momentum`` m, as in the paper's Algorithm 3.

Written only with hybrid's public API: run it with
``hybrid train --scheduler examples/schedulers/dc_asgd.py:DCASGD --scheduler-arg lam=0.04``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hybrid import Scheduler, Step, Update, Verdict


@dataclass
class DCASGDSettings:
    lam: float = 0.04
    """λ: the strength of the delay compensation (0: plain asynchronous SGD)."""
    adaptive: bool = False
    """DC-ASGD-a: divide λ by sqrt of a moving mean square of the gradient."""
    momentum: float = 0.95
    """m of that moving mean square (adaptive only)."""
    eps: float = 1e-7
    """Added to the mean square before the square root (adaptive only)."""

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ValueError(f"lam: {self.lam} must be >= 0")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum: {self.momentum} is outside [0, 1)")


class DCASGD(Scheduler):
    """Asynchronous like ``async``: every worker may start, every gradient is applied alone
    on arrival, after its delay compensation. The server keeps θ as each worker read it
    (the paper's per-worker backup), by version, for as long as a task in flight may use it.
    """

    Settings = DCASGDSettings
    staleness_unit = "updates"  # each gradient is one step of its own: τ counts them
    # Not applies_alone: the compensation needs θ_now and θ_read, so the server applies
    # (the processes runtime then runs it locked-free-read, not Hogwild!).

    def __init__(self, workers: int, settings: DCASGDSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.read: dict[int, torch.Tensor] = {}
        """θ by version, for every version a task in flight may have read."""
        self.started_at: dict[int, int] = {}
        """Version each busy worker was dispatched with (the oldest it may have read)."""
        self.mean_square: torch.Tensor | None = None

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        starting = list(idle)
        if starting:
            assert self.model is not None, "the loop binds the model before ready()"
            if version not in self.read:
                self.read[version] = self.model.params.clone()
            for worker in starting:
                self.started_at[worker] = version
        return starting

    def admit(self, update: Update, staleness: int) -> Verdict:
        self.started_at.pop(update.worker_id, None)
        return super().admit(update, staleness)

    def reject(self, update: Update) -> Verdict:
        self.started_at.pop(update.worker_id, None)
        self._forget_unused()
        return Verdict.DROP

    def full(self) -> bool:
        return bool(self.buffer)

    def combine(self) -> Step | None:
        step = super().combine()
        if step is None or step.direction is None:
            return step
        assert self.model is not None
        (update,) = step.updates
        gradient = step.direction
        # A runtime may hand a worker a newer θ than its dispatch (the processes runtime
        # publishes one θ for everybody): the update says which version it read.
        theta_read = self.read[update.base_version]
        drift = self.model.params - theta_read
        lam: torch.Tensor | float = self.settings.lam
        if self.settings.adaptive:
            m = self.settings.momentum
            square = gradient * gradient
            if self.mean_square is None:
                self.mean_square = square.clone()
            else:
                self.mean_square.mul_(m).add_(square, alpha=1 - m)
            lam = self.settings.lam / torch.sqrt(self.mean_square + self.settings.eps)
        step.direction = gradient + lam * gradient * gradient * drift
        self._forget_unused()
        return step

    def _forget_unused(self) -> None:
        oldest = min(self.started_at.values(), default=None)
        for version in list(self.read):
            if oldest is None or version < oldest:
                del self.read[version]

    def metrics(self) -> dict[str, float]:
        return {"sched/dc_versions_kept": len(self.read)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "read": {version: theta.clone() for version, theta in self.read.items()},
            "started_at": dict(self.started_at),
            "mean_square": None if self.mean_square is None else self.mean_square.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.read = {int(v): theta.clone() for v, theta in state["read"].items()}
        self.started_at = {int(w): int(v) for w, v in state["started_at"].items()}
        self.mean_square = state["mean_square"]
