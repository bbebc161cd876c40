"""Decentralized training: K parameter replicas instead of one θ, mixed over a graph.

A decentralized scheduler (``gossip``, ``ad-psgd``, ``sgp``) subclasses
``hybrid.schedulers.decentralized.ReplicaScheduler``; the loop then takes its snapshots
and applies its steps through a ``ReplicaApplier`` instead of the server optimizer, and
nothing else in the one loop changes. The applier holds the replicas as the rows of one
[K, numel] tensor:

- worker k's task starts from replica k (de-biased, for push-sum);
- a ``MixingStep`` steps each listed update's replica with that worker's own
  optimizer (the run's optimizer settings, one optimizer state per replica, as every
  node of D-PSGD keeps its own), and mixes the rows, in the order the step says
  (``mix_first``): X ← P X with the step's matrix P
  (doubly stochastic for gossip and AD-PSGD; column-stochastic for push-sum, whose
  weights w ← P w de-bias the rows: z_k = x_k / w_k). With a ``delay`` the mass sent to
  other nodes arrives that many steps later (overlap SGP).

Where the runtime's workers share the replicas (``Runtime.replica_exchange``: processes), the
rows are shared memory (``hybrid.runtimes.shared_replicas``): each worker reads its own row
when its task starts, so no replica goes through a pipe; gossip's and SGP's rounds still mix
here, and an AD-PSGD step is handed to its worker, which averages its pair and steps its
replica itself while the loop goes on (``pair_lock``: atomically per pair).

The global model then holds the replicas' average z̄ = mean_k z_k: it is what is evaluated,
checkpointed and hashed (summary.json says so in ``evaluated_model``). Its version counts
mixing steps. Consensus distance mean_k ‖z_k − z̄‖ / ‖z̄‖ and the bytes replicas send each
other are logged per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hybrid import checkpoint as check
from hybrid.core.global_model import GlobalModel
from hybrid.protocol import Payload, Snapshot, Step, Task
from hybrid.runtimes.shared_replicas import REPLICA_READ, ReplicaExchange
from hybrid.schedulers.decentralized import MixingStep
from hybrid.topology import edges_of


class ReplicaApplier:
    """The replicas and how steps change them (see the module's docstring)."""

    def __init__(
        self,
        model: GlobalModel,
        count: int,
        exchange: ReplicaExchange | None = None,
        locked: bool = True,
    ) -> None:
        """``exchange``: the runtime whose workers share the rows (None: they live here);
        ``locked``: there, reads and pair mixes hold the rows' locks."""
        self.count = count
        self.exchange = exchange
        self.shared = exchange.shared_replicas if exchange is not None else None
        self.locked = locked
        if self.shared is not None:
            if model.device.type != "cpu":
                raise ValueError(f"shared replicas live in CPU memory; θ is on {model.device}")
            self.rows = self.shared.rows
            self.rows.copy_(model.params.detach().repeat(count, 1))
            self.optimizers = [self.shared.replica_model(model, k) for k in range(count)]
        else:
            self.rows = model.params.detach().clone().repeat(count, 1)
            self.optimizers = [model.replica(self.rows[k]) for k in range(count)]
        """X: row k is replica k (x_k, the push-sum numerator)."""
        self.weights = torch.ones(count, dtype=torch.float64)
        """w: push-sum weights, on CPU (all 1 unless a step keeps push-sum)."""
        self.push_sum = False
        self.in_flight: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        """(the mix it arrives at, mass of X, mass of w): sent, not yet received."""
        self.row_bytes = self.rows.shape[1] * self.rows.element_size()
        self.mixes = 0
        self.applied = 0
        self.messages = np.zeros((count, count), dtype=np.int64)
        """messages[i, j]: how many times replica i sent (a share of) itself to replica j."""
        self.bytes_sent = 0
        self.last_consensus = 0.0
        self.consensus_sum = 0.0

    # --- what the loop calls -----------------------------------------------------------------

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        return model.snapshot(task, progress)  # the average: e.g. for a learner

    def snapshots(
        self, model: GlobalModel, task: Task, progress: float, worker_ids: Sequence[int]
    ) -> list[tuple[list[int], Snapshot]]:
        """Each worker starts from its own replica (de-biased)."""
        shared = model.snapshot(task, progress, copy=False)
        if self.shared is not None:  # the worker reads its row itself: say which, and how
            return [
                (
                    [k],
                    dataclasses.replace(
                        shared,
                        params=self.rows[k],
                        extras=shared.extras | {REPLICA_READ: (k, self._weight(k), self.locked)},
                    ),
                )
                for k in worker_ids
            ]
        return [
            ([k], dataclasses.replace(shared, params=self.debiased(k).cpu().clone()))
            for k in worker_ids
        ]

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        if not isinstance(step, MixingStep):
            raise TypeError("a decentralized run applies MixingSteps (ReplicaScheduler.combine)")
        if self.exchange is not None and step.pairs and step.mix_first and not step.push_sum:
            return self._order_pair_mixes(model, step, progress)
        if step.mix_first and step.mixing is not None:
            self.mix(step.mixing, step.push_sum, step.delay)
        norms = []
        for update in step.updates:
            local = Step(update.payload, step.lr_scale, clip=update.kind != Payload.DELTA)
            norms.append(self.optimizers[update.worker_id].apply(local, progress))
        if not step.mix_first and step.mixing is not None:
            self.mix(step.mixing, step.push_sum, step.delay)
        self._after_step(model)
        return float(np.mean(norms)) if norms else 0.0

    def _order_pair_mixes(self, model: GlobalModel, step: MixingStep, progress: float) -> float:
        """AD-PSGD on shared replicas: each worker averages its pair and steps its replica
        itself; the loop counts the messages and reads the rows as they are now (a mix
        ordered a moment ago may not have landed yet: the metrics lag by it)."""
        assert self.exchange is not None
        for i, j in step.pairs:
            self.exchange.order_pair_mix(i, j, step.lr_scale, progress, self.locked)
        self.mixes += 1
        self._count_messages(step.mixing if step.mixing is not None else np.eye(self.count))
        self._after_step(model)
        norms = [float(torch.linalg.vector_norm(u.payload)) for u in step.updates]
        return float(np.mean(norms)) if norms else 0.0

    def _after_step(self, model: GlobalModel) -> None:
        self.last_consensus = consensus_distance(self._debiased_rows())
        self.consensus_sum += self.last_consensus
        self.applied += 1
        model.params.copy_(self.average())
        model.count_version()

    def optimizer_steps(self, version: int) -> int | None:
        return 0  # the replicas' optimizers step; the global model's never does

    def refresh(self, model: GlobalModel) -> None:
        """The global model is the replicas' average as they are now: after the runtime has
        settled, every pair mix its workers were ordered to do has landed."""
        model.params.copy_(self.average())

    def _weight(self, k: int) -> float:
        return float(self.weights[k]) if self.push_sum else 1.0

    def gather(self, model: GlobalModel) -> None:
        """Bring ``model`` (the replicas' average) up to date before it is evaluated or
        checkpointed: here every step already wrote it; an applier whose replicas live in
        the workers (the ray runtime's actors) fetches them."""
        del model

    # --- the maths -----------------------------------------------------------------------------

    def debiased(self, k: int) -> torch.Tensor:
        """z_k = x_k / w_k (x_k itself while no step kept push-sum weights)."""
        if not self.push_sum:
            return self.rows[k]
        return self.rows[k] / float(self.weights[k])

    def average(self) -> torch.Tensor:
        """z̄: the mean of the de-biased replicas."""
        return self._debiased_rows().mean(dim=0)

    def mix(self, p: np.ndarray, push_sum: bool = False, delay: int = 0) -> None:
        """X ← P X (and w ← P w under push-sum); with a delay, the mass a replica sends to
        another arrives at the end of the ``delay``-th mix after this one."""
        self.push_sum = self.push_sum or push_sum or delay > 0
        matrix = torch.as_tensor(p, dtype=self.rows.dtype, device=self.rows.device)
        self.mixes += 1
        if delay == 0:
            changed = [k for k in range(self.count) if not _is_identity_row(p, k)]
            if changed:  # AD-PSGD: only its pair; the rest stay bit for bit
                self.rows[changed] = matrix[changed] @ self.rows
                if self.push_sum:
                    self.weights[changed] = torch.as_tensor(p[changed]) @ self.weights
        else:
            kept = np.diag(p).copy()
            sent = (matrix - torch.diag(torch.diagonal(matrix))) @ self.rows
            sent_w = torch.as_tensor(p - np.diag(kept)) @ self.weights
            self.rows.mul_(torch.as_tensor(kept, dtype=self.rows.dtype).unsqueeze(1))
            self.weights.mul_(torch.as_tensor(kept))
            self.in_flight.append((self.mixes + delay, sent, sent_w))
        arrived = [m for m in self.in_flight if m[0] <= self.mixes]
        self.in_flight = [m for m in self.in_flight if m[0] > self.mixes]
        for _, rows, weights in arrived:
            self.rows.add_(rows)
            self.weights.add_(weights)
        self._count_messages(p)

    def _count_messages(self, p: np.ndarray) -> None:
        edges = edges_of(p)
        for sender, receiver in edges:
            self.messages[sender, receiver] += 1
        self.bytes_sent += len(edges) * self.row_bytes

    def _debiased_rows(self) -> torch.Tensor:
        if not self.push_sum:
            return self.rows
        return self.rows / self.weights.to(self.rows).unsqueeze(1)

    # --- metrics and checkpoints ---------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        per_worker_per_mix = self.bytes_sent / (self.count * max(self.mixes, 1))
        return {
            "decentral/consensus_distance": self.last_consensus,
            "decentral/consensus_distance_mean": self.consensus_sum / max(self.applied, 1),
            "decentral/mixes": self.mixes,
            "decentral/bytes_sent": self.bytes_sent,
            "decentral/bytes_per_worker_per_mix": per_worker_per_mix,
            # references for the same model: a ring all-reduce of θ, and a parameter server
            # (a gradient up, θ down)
            "decentral/allreduce_bytes_per_worker": 2
            * (self.count - 1)
            / self.count
            * self.row_bytes,
            "decentral/parameter_server_bytes_per_worker": 2 * self.row_bytes,
        }

    def replica_params(self) -> torch.Tensor:
        """The de-biased replicas, one per row (a copy): evaluate each one with these."""
        return self._debiased_rows().detach().cpu().clone()

    def state_dict(self) -> dict[str, Any]:
        if self.shared is not None:  # workers may be mixing pairs: no half-mixed pair saved
            with self.shared.all_locked():
                return self._state()
        return self._state()

    def _state(self) -> dict[str, Any]:
        return {
            "rows": self.rows.detach().cpu().clone(),
            "weights": self.weights.cpu().clone(),
            "push_sum": self.push_sum,
            "in_flight": [(n, r.cpu().clone(), w.clone()) for n, r, w in self.in_flight],
            "optimizers": [o.optimizer.state_dict() for o in self.optimizers],
            "messages": self.messages.tolist(),
            "counters": [
                self.mixes,
                self.applied,
                self.bytes_sent,
                self.last_consensus,
                self.consensus_sum,
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved_states = check.items(
            check.entry(state, "optimizers", "applier"), "applier.optimizers", len(self.optimizers)
        )
        for k, (optimizer, saved) in enumerate(zip(self.optimizers, saved_states, strict=True)):
            # a replica steps only when its worker's update arrives: how often is not kept
            check.check_optimizer_state(saved, optimizer.optimizer, f"applier.optimizers[{k}]")
        self.rows.copy_(state["rows"])
        self.weights.copy_(state["weights"])
        self.push_sum = bool(state["push_sum"])
        device = self.rows.device
        self.in_flight = [(int(n), r.to(device), w) for n, r, w in state["in_flight"]]
        for k, (optimizer, saved) in enumerate(zip(self.optimizers, saved_states, strict=True)):
            optimizer.optimizer.load_state_dict(saved)
            if self.shared is not None:  # the workers step the shared statistics: fill them
                loaded = optimizer.optimizer.state[optimizer.param]
                for name, tensor in self.shared.optimizer_states[k].items():
                    if name in loaded:
                        tensor.copy_(loaded[name])
                optimizer.attach_shared({"param": self.rows[k], **self.shared.optimizer_states[k]})
        self.messages = np.asarray(state["messages"], dtype=np.int64)
        mixes, applied, sent, last, total = state["counters"]
        self.mixes, self.applied, self.bytes_sent = int(mixes), int(applied), int(sent)
        self.last_consensus, self.consensus_sum = float(last), float(total)


def mixing_event(step: MixingStep, index: int, time: float) -> dict[str, Any]:
    """One line of the exchanges' timeline (``hybrid.timeline``): the ``index``-th mix, at
    ``time`` (when its last update arrived; the run's clock, as the tasks' spans), its edges
    [sender, receiver, weight] (x_receiver takes weight × x_sender) and, for AD-PSGD, the
    pairs [worker, neighbour] the scheduler drew."""
    p = step.mixing if step.mixing is not None else np.eye(1)
    event: dict[str, Any] = {
        "mix": index,
        "time": time,
        "edges": [[s, r, float(p[r, s])] for s, r in edges_of(p)],
    }
    if step.pairs:
        event["pairs"] = [[int(i), int(j)] for i, j in step.pairs]
    return event


def consensus_distance(rows: torch.Tensor) -> float:
    """mean_k ‖θ_k − θ̄‖ / ‖θ̄‖ over the rows of ``rows`` (0: all replicas agree)."""
    mean = rows.mean(dim=0)
    spread = torch.linalg.vector_norm(rows - mean, dim=1).mean()
    return float(spread / torch.linalg.vector_norm(mean).clamp_min(1e-12))


def _is_identity_row(p: np.ndarray, k: int) -> bool:
    row = p[k]
    return bool(row[k] == 1.0 and np.count_nonzero(row) == 1)


__all__ = ["ReplicaApplier", "consensus_distance", "mixing_event"]
