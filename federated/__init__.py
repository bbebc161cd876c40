"""Simulated edge clients for federated RL.

[`federated.clients`][federated.clients] draws each client's profile (env variant, device speed,
links, dropout, availability) from the run's seed and applies its dynamics;
[`federated.evaluation`][federated.evaluation] scores the final global model on every client's own
variant. Nothing is imported here: the loop and the ``fedavg`` scheduler import what they use.
"""

__all__ = ["clients", "evaluation"]
