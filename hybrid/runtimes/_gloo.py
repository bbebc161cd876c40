"""Decentralized training on the ray runtime: the replicas live in the actors and move
between them through a ``torch.distributed`` gloo process group.

Imported only by ``hybrid.runtimes.ray``. Three pieces:

- ``Rendezvous`` (the driver): the TCPStore every actor meets at, bound to the address the
  actors reach the driver on (loopback for a local Ray). Each formation of the group is a
  generation with a store prefix of its own, so a group re-formed after a lost actor never
  reads the keys of the one before.
- ``ActorReplica`` (each actor): its replica x_k and that replica's optimizer (the run's
  optimizer settings, a state of its own), the update of its last task, kept until the
  loop's step names it, and the mixing itself: x_k ← Σ_j P[k, j] x_j with gloo
  ``isend``/``irecv`` of flat float32 rows between the neighbours of that step.
- ``ActorReplicas`` (the driver): the loop's applier for such a run. It decides nothing:
  the scheduler still chooses who mixes with whom; it turns each ``MixingStep`` into a small
  command per actor (step your replica along your last update; mix with these weights) and
  gathers the rows only when the loop needs θ̄ (evaluation, checkpoint, end of run).

Every gloo operation has a deadline (``GLOO_TIMEOUT_S``, the process group's ``timeout``):
a mix whose peer died fails after it, the actor keeps its replica unmixed, counts the
failure, and goes on with its next command, so a dead peer cannot hang the run.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from hybrid.core.global_model import GlobalModel
from hybrid.protocol import Payload, Snapshot, Step, Task, Update
from hybrid.replicas import ReplicaApplier, consensus_distance
from hybrid.topology import edges_of

GLOO_TIMEOUT_S = 120.0
"""Deadline of every gloo operation (rendezvous, send, receive, all-reduce). An AD-PSGD mix
waits for its partner to finish the task it is running, so this must exceed a task."""


class Rendezvous:
    """The driver's TCPStore: where the actors of each generation of the group meet."""

    def __init__(self, host: str) -> None:
        self.store = dist.TCPStore(
            host,
            0,  # a free port
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S),
        )
        self.address = (host, self.store.port)
        self.generation = -1

    def next_generation(self) -> int:
        self.generation += 1
        return self.generation

    def close(self) -> None:
        del self.store  # the store's server thread stops with its last reference


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


class ActorReplica:
    """One actor's replica, its optimizer and its end of the gloo group."""

    def __init__(self, step_settings: dict[str, Any]) -> None:
        self.step_settings = step_settings
        self.model: GlobalModel | None = None
        self.kept: Update | None = None
        """The update of this actor's last task, stepped when the loop's step lists it."""
        self.rank = -1
        self.world = 0
        self.timeout_s = GLOO_TIMEOUT_S
        self.gloo_bytes = 0
        self.failed_mixes = 0

    @property
    def row(self) -> torch.Tensor:
        assert self.model is not None, "the driver loads or seeds the replica first"
        return self.model.params

    def load(self, row: np.ndarray, optimizer_state: dict[str, Any] | None) -> None:
        """Start from ``row`` (θ₀, or a checkpoint's replica with its optimizer state)."""
        self.model = GlobalModel(torch.from_numpy(np.array(row, copy=True)), **self.step_settings)
        if optimizer_state is not None:
            self.model.optimizer.load_state_dict(optimizer_state)

    def join(
        self,
        address: tuple[str, int],
        generation: int,
        rank: int,
        world: int,
        seed: bool,
        numel: int,
        timeout_s: float,
        node_ip: str = "",
    ) -> None:
        """Leave the previous group, join generation ``generation``; with ``seed``, every
        member sums (its row, 1) in one all-reduce, and one without a replica (a replacement)
        starts from the survivors' average, with a fresh optimizer state.

        A member that holds a replica survives a failed formation (a member died during
        it): it keeps its replica, its mixes fail (counted) until the driver forms the
        next generation. A replacement without a replica raises: it has nothing to train."""
        if dist.is_initialized():
            dist.destroy_process_group()
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        _bind_gloo_to(node_ip)
        have = self.model is not None
        total = torch.zeros(numel + 1 if seed else 0, dtype=torch.float64)
        if seed and have:
            total[:-1] = self.row.double()
            total[-1] = 1.0
        try:
            store = dist.TCPStore(
                address[0], address[1], is_master=False, timeout=_timeout(timeout_s)
            )
            dist.init_process_group(
                "gloo",
                store=dist.PrefixStore(f"generation-{generation}", store),
                rank=rank,
                world_size=world,
                timeout=_timeout(timeout_s),
            )
            if seed:
                dist.all_reduce(total)
        except (RuntimeError, ValueError, OSError):  # gloo's and the store's failures
            if not have:
                raise
            self.failed_mixes += 1
            if dist.is_initialized():
                dist.destroy_process_group()
            return
        if not seed:
            return
        self.gloo_bytes += 2 * (world - 1) * total.numel() * total.element_size() // world
        if not have:
            if total[-1] < 1:
                raise RuntimeError("no replica survived to seed a replacement from")
            self.load((total[:-1] / total[-1]).float().numpy(), None)

    def keep(self, update: Update) -> None:
        self.kept = update

    def apply(self, command: dict[str, Any]) -> None:
        """One step of the loop for this replica: a local step along its last update, a mix,
        in the order the step says."""
        mix, local = command.get("mix"), command.get("step")
        if command["mix_first"] and mix is not None:
            self.mix(*mix)
        if local is not None:
            self.step(**local)
        if not command["mix_first"] and mix is not None:
            self.mix(*mix)

    def step(self, lr_scale: float, progress: float) -> None:
        if self.kept is None:  # computed by the incarnation this actor replaced: its replica
            return  # is gone, and this one starts from the survivors' average instead
        update, self.kept = self.kept, None
        local = Step(update.payload, lr_scale, clip=update.kind != Payload.DELTA)
        assert self.model is not None
        self.model.apply(local, progress)

    def mix(self, weights: dict[int, float], send_to: Sequence[int]) -> None:
        """x_k ← Σ_j weights[j] x_j, the x_j received from the neighbours of this step, while
        this row goes to ``send_to``. A failed exchange (a dead peer, past the deadline)
        leaves the row as it was and is counted."""
        row = self.row.data
        works, received = [], {}
        if not dist.is_initialized():  # the last formation failed: no group until the next
            self.failed_mixes += 1
            return
        try:
            for peer in send_to:
                works.append(dist.isend(row, dst=peer))
            for peer in weights:
                if peer != self.rank:
                    received[peer] = torch.empty_like(row)
                    works.append(dist.irecv(received[peer], src=peer))
            for work in works:
                work.wait(_timeout(self.timeout_s))
        except RuntimeError:  # gloo's timeout, or a peer's closed connection
            self.failed_mixes += 1
            return
        self.gloo_bytes += len(send_to) * row.numel() * row.element_size()
        received[self.rank] = row
        mixed = torch.zeros_like(row)
        for peer in sorted(weights):  # ascending, as a row of P @ X sums
            mixed.add_(received[peer], alpha=weights[peer])
        row.copy_(mixed)

    def report(self) -> dict[str, Any]:
        assert self.model is not None
        return {
            "row": self.row.detach().numpy().copy(),
            "optimizer": self.model.optimizer.state_dict(),
            "gloo_bytes": self.gloo_bytes,
            "failed_mixes": self.failed_mixes,
        }

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class ReplicaTransport(Protocol):
    """What ``ActorReplicas`` needs of the runtime that holds the actors."""

    def seed_replicas(self, rows: torch.Tensor, optimizers: list[Any] | None) -> None: ...
    def absent(self) -> set[int]: ...
    def command(self, worker_id: int, name: str, body: Any) -> None: ...
    def gather_replicas(self) -> list[dict[str, Any]]: ...
    def replica_counters(self) -> dict[str, float]: ...


class ActorReplicas(ReplicaApplier):
    """The loop's applier when the ray actors hold the replicas (see the module docstring).

    ``rows`` and ``optimizers`` here are the driver's copy of the last gathered state: the
    actors' replicas as of the last evaluation, checkpoint or end of run."""

    def __init__(self, model: GlobalModel, count: int, transport: ReplicaTransport) -> None:
        super().__init__(model, count)
        self.transport = transport
        self.model = model
        self.fresh = True
        """The driver's rows are the actors' (nothing applied since the last gather)."""
        self.measurements = 0
        self.failed_mixes = 0
        transport.seed_replicas(self.rows, None)

    def snapshot(self, model: GlobalModel, task: Task, progress: float) -> Snapshot:
        self.gather(model)
        return super().snapshot(model, task, progress)

    def snapshots(
        self, model: GlobalModel, task: Task, progress: float, worker_ids: Sequence[int]
    ) -> list[tuple[list[int], Snapshot]]:
        """Every task starts from its actor's own replica, which does not travel: the snapshot
        carries the task and its extras, with no parameters."""
        shared = model.snapshot(task, progress, copy=False)
        empty = torch.empty(0, dtype=shared.params.dtype)
        return [(list(worker_ids), Snapshot(empty, shared.version, shared.extras, shared.task))]

    def apply(self, model: GlobalModel, step: Step, progress: float) -> float:
        # a MixingStep (the runtimes import no scheduler module: its fields are read)
        if not hasattr(step, "mixing"):
            raise TypeError("a decentralized run applies MixingSteps (ReplicaScheduler.combine)")
        if step.push_sum or step.delay:
            raise TypeError("the actors' replicas mix without push-sum weights or delays")
        stepped = {u.worker_id for u in step.updates}
        p = None if step.mixing is None else self._without_absent(step.mixing)
        for k in range(self.count):
            local = {"lr_scale": step.lr_scale, "progress": progress} if k in stepped else None
            mix = None
            if p is not None:
                # whose rows this one becomes a mix of (none: it stays), and which changing
                # rows take a share of it
                takes = {} if _is_identity_row(p, k) else _weights(p, k)
                send_to = [
                    int(i)
                    for i in np.flatnonzero(p[:, k])
                    if i != k and not _is_identity_row(p, int(i))
                ]
                if takes or send_to:
                    mix = (takes or {k: 1.0}, send_to)
            if local is not None or mix is not None:
                self.transport.command(
                    k, "apply", {"step": local, "mix": mix, "mix_first": step.mix_first}
                )
        if p is not None:
            self.mixes += 1
            edges = edges_of(p)
            for sender, receiver in edges:
                self.messages[sender, receiver] += 1
            self.bytes_sent += len(edges) * self.row_bytes
        norms = [float(torch.linalg.vector_norm(u.payload)) for u in step.updates]
        self.applied += 1
        self.fresh = False
        model.count_version()
        return float(np.mean(norms)) if norms else 0.0

    def _without_absent(self, p: np.ndarray) -> np.ndarray:
        """P with the actors that hold no replica now (lost, their replacement not yet in the
        group) left out: what a live replica would have taken from one stays its own, so P
        stays doubly stochastic on the live ones."""
        absent = self.transport.absent()
        if not absent:
            return p
        p = p.copy()
        for a in sorted(absent):
            for i in range(self.count):
                if i != a:
                    p[i, i] += p[i, a]
                    p[i, a] = 0.0
            p[a] = 0.0
            p[a, a] = 1.0
        return p

    def refresh(self, model: GlobalModel) -> None:
        """The actors hold the replicas: the average is taken of rows fetched from them, not
        of the driver's copies, which are as old as the last gather."""
        self.gather(model)
        super().refresh(model)

    def gather(self, model: GlobalModel) -> None:
        """Fetch every replica (and its optimizer state) through the driver, and write their
        average into ``model``: before an evaluation, a checkpoint and the end of the run."""
        if self.fresh:
            return
        reports = self.transport.gather_replicas()
        for k, report in enumerate(reports):
            self.rows[k].copy_(torch.from_numpy(report["row"]))
            self.optimizers[k].optimizer.load_state_dict(report["optimizer"])
        self.failed_mixes = sum(int(r["failed_mixes"]) for r in reports)
        self.last_consensus = consensus_distance(self.rows)
        self.consensus_sum += self.last_consensus
        self.measurements += 1
        model.params.copy_(self.average())
        self.fresh = True

    def metrics(self) -> dict[str, float]:
        return super().metrics() | {
            # measured at each gather, not each step: the rows meet only there
            "decentral/consensus_distance_mean": self.consensus_sum / max(self.measurements, 1),
            "decentral/failed_mixes": self.failed_mixes,
            **self.transport.replica_counters(),
        }

    def replica_params(self) -> torch.Tensor:
        self.gather(self.model)
        return super().replica_params()

    def state_dict(self) -> dict[str, Any]:
        self.gather(self.model)
        return super().state_dict() | {"measurements": self.measurements}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.measurements = int(state.get("measurements", self.applied))
        self.fresh = False  # the next gather reads them back from the actors
        optimizers = [o.optimizer.state_dict() for o in self.optimizers]
        self.transport.seed_replicas(self.rows, optimizers)


def _bind_gloo_to(node_ip: str) -> None:
    """Have gloo listen on the interface that holds ``node_ip`` (the address Ray knows this
    node by: loopback for a local Ray), unless the user chose one (GLOO_SOCKET_IFNAME).
    Left to itself gloo takes the address the hostname resolves to, which on many Linux
    hosts is 127.0.1.1, unreachable from the other nodes."""
    if not node_ip or os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    with contextlib.suppress(ImportError):  # psutil comes with ray; without it, gloo's choice
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(a.address == node_ip for a in addresses):
                os.environ["GLOO_SOCKET_IFNAME"] = name
                return


def _weights(p: np.ndarray, k: int) -> dict[int, float]:
    return {int(j): float(p[k, j]) for j in np.flatnonzero(p[k])}


def _is_identity_row(p: np.ndarray, k: int) -> bool:
    row = p[k]
    return bool(row[k] == 1.0 and np.count_nonzero(row) == 1)


__all__ = ["GLOO_TIMEOUT_S", "ActorReplica", "ActorReplicas", "Rendezvous"]
