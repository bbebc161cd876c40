"""FedNova: federated averaging normalized by each client's local steps (Wang et al. 2020).

When clients take different numbers of local steps τ_i in a round, plain FedAvg's mean of
their model differences Δ_i leans towards the clients that took more steps: it optimizes
a different objective than the one meant (the paper's objective inconsistency). FedNova
divides each Δ_i by τ_i (for plain local SGD the normalizing factor is τ_i), averages these
per-step directions with weights p_i, and rescales by the effective number of steps:

    d = τ_eff · Σ_i p_i Δ_i / τ_i,     τ_eff = Σ_i p_i τ_i,

then the server takes one step along d with its optimizer (``--optimizer sgd --lr 1``:
θ ← θ − d, the paper's update). Here p_i = 1/m for the m clients of a round: every client
is weighted alike (a client's RL data is its env, not a fixed data set).

Each round samples ``client_fraction`` of the clients and gives each its own number of
local steps, drawn uniformly from [``min_local_steps``, ``max_local_steps``] with the
scheduler's seeded generator. The steps travel with the task: ``ready()`` returns
``(worker id, {"steps": τ_i})`` pairs, per-task settings that the worker applies and
``spans.jsonl`` records (as Flower's ``configure_fit`` hands each client its own config).
``normalize=false`` aggregates the same round the FedAvg way (Σ p_i Δ_i), the ablation.

Written only with hybrid's public API: run it with
``hybrid train --scheduler examples/schedulers/fednova.py:FedNova --optimizer sgd --lr 1``
(persistent workers, or ``--clients K`` edge clients).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid import Scheduler, Step, TrainLocally, Update, Verdict


@dataclass
class FedNovaSettings:
    client_fraction: float = 1.0
    """C: the fraction of the clients sampled each round (at least one)."""
    min_local_steps: int = 1
    """The fewest local steps a client is given in a round."""
    max_local_steps: int = 10
    """The most local steps a client is given in a round."""
    normalize: bool = True
    """FedNova's normalized averaging; false: FedAvg's plain mean of the same Δs."""

    def __post_init__(self) -> None:
        if not 0.0 < self.client_fraction <= 1.0:
            raise ValueError(f"client_fraction: {self.client_fraction} is outside (0, 1]")
        if self.min_local_steps < 1:
            raise ValueError(f"min_local_steps: {self.min_local_steps} must be >= 1")
        if self.max_local_steps < self.min_local_steps:
            raise ValueError(
                f"max_local_steps: {self.max_local_steps} is below min_local_steps "
                f"{self.min_local_steps}"
            )


class FedNova(Scheduler):
    Settings = FedNovaSettings
    task_kind = TrainLocally  # clients train locally and send Δ = θ_read − θ_local
    staleness_unit = "rounds"  # one step per round: τ is 0 (every Δ is from the round's θ)

    def __init__(self, workers: int, settings: FedNovaSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.per_round = max(1, math.floor(settings.client_fraction * workers + 1e-9))
        self.local_steps: dict[int, int] = {}
        """The local steps τ_i given to each client of the open round."""
        self.pending: set[int] = set()

    def ready(self, idle: Sequence[int], version: int) -> list[tuple[int, dict[str, Any]]]:
        if self.local_steps:  # a round is open
            # a client of the round seen idle lost its task (a restarted worker): again
            return [(w, {"steps": self.local_steps[w]}) for w in idle if w in self.pending]
        if len(idle) < self.per_round:
            return []
        chosen = sorted(int(w) for w in self.rng.choice(idle, self.per_round, replace=False))
        low, high = self.settings.min_local_steps, self.settings.max_local_steps
        steps = self.rng.integers(low, high + 1, size=len(chosen))
        self.local_steps = {w: int(s) for w, s in zip(chosen, steps, strict=True)}
        self.pending = set(chosen)
        return [(w, {"steps": self.local_steps[w]}) for w in chosen]

    def admit(self, update: Update, staleness: int) -> Verdict:
        self.pending.discard(update.worker_id)
        return super().admit(update, staleness)

    def reject(self, update: Update) -> Verdict:
        self.pending.discard(update.worker_id)  # the round closes without it
        return Verdict.DROP

    def full(self) -> bool:
        return bool(self.local_steps) and not self.pending

    def combine(self) -> Step | None:
        local_steps, self.local_steps = self.local_steps, {}
        updates = [update for update, _ in self.buffer]
        self.buffer.clear()
        if not updates:
            return None
        p = 1.0 / len(updates)
        if not self.settings.normalize:
            direction = sum(p * update.payload for update in updates)
        else:
            tau = [local_steps[update.worker_id] for update in updates]
            tau_eff = sum(p * t for t in tau)
            per_step = sum(p * u.payload / t for u, t in zip(updates, tau, strict=True))
            direction = tau_eff * per_step
        # a model difference: not clipped like a gradient (clients clipped theirs)
        return Step(direction, clip=False, updates=updates)

    def state_dict(self) -> dict[str, Any]:
        return {
            "local_steps": sorted(self.local_steps.items()),
            "pending": sorted(self.pending),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.local_steps = {int(w): int(s) for w, s in state["local_steps"]}
        self.pending = {int(w) for w in state["pending"]}
