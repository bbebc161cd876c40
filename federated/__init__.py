"""Federated evaluation as a hybrid plug-in: how the final model does on each client.

The edge clients themselves (profiles, env variants, links) are ``hybrid/clients.py``:
the fedavg scheduler and the runtimes' clocks need them. Importing this package
registers ``client_fairness`` (``federated/evaluation.py``) with ``hybrid.plugins`` as a
final evaluation of runs whose workers are edge clients or run env variants.

See [`federated.evaluation`][federated.evaluation].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid.plugins import FinalEvaluation, register_final_evaluation

if TYPE_CHECKING:
    from hybrid.config import TrainConfig


def _has_clients(cfg: TrainConfig) -> bool:
    return cfg.clients is not None or cfg.client_dynamics != "iid"


register_final_evaluation(
    FinalEvaluation("client_fairness", _has_clients, "federated.evaluation:client_fairness")
)

__all__ = ["evaluation"]
