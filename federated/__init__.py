"""Federated evaluation as a hybrid plug-in: how the final model does on each client.

The edge clients themselves (profiles, env variants, links) are ``hybrid/clients.py``:
the fedavg scheduler and the runtimes' clocks need them. Importing this package
registers ``client_fairness`` (``federated/evaluation.py``) with ``hybrid.plugins`` as a
final evaluation of runs whose workers are edge clients or run env variants. This
module is the plug-in's part of the assembly: it alone reads the flat config, to decide
whether the evaluation applies and to build its ``FairnessSettings``.

See [`federated.evaluation`][federated.evaluation].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid.plugins import FinalEvaluation, register_final_evaluation

if TYPE_CHECKING:
    from federated.evaluation import FairnessSettings
    from hybrid.config import TrainConfig


def _has_clients(cfg: TrainConfig) -> bool:
    return cfg.clients is not None or cfg.client_dynamics != "iid"


def fairness_settings(cfg: TrainConfig) -> FairnessSettings:
    """The per-client evaluation's settings from the flat config (imported when used)."""
    from federated.evaluation import FairnessSettings
    from hybrid.assembly import algo_settings, client_settings

    return FairnessSettings(
        clients=client_settings(cfg),
        algo=algo_settings(cfg),
        client_eval_clients=cfg.client_eval_clients,
        client_eval_episodes=cfg.client_eval_episodes,
    )


register_final_evaluation(
    FinalEvaluation(
        "client_fairness",
        _has_clients,
        "federated.evaluation:client_fairness",
        settings=fairness_settings,
    )
)

__all__ = ["evaluation", "fairness_settings"]
