"""The ray runtime: one Ray actor per worker, on this machine or on a cluster.

Install with ``pip install 'hybrid-rl[ray]'``. Each actor wraps a ``Worker`` (its own
envs and local model, one CPU, ``torch_threads`` threads) and is warmed up before
``__init__`` returns. A task ships θ out as a numpy array (36 KB for the CartPole
model: small enough that Ray inlines it into the task instead of going through the
object store), with the snapshot's task kind and extras, and brings the payload back
with its tensors as numpy arrays, which the driver copies: arrays that come back
from Ray are read-only views of its object store. ``next_update`` waits with
``ray.wait`` and, when several tasks have finished, hands back the one that finished
first. With edge clients (``clients``) there is one actor per client.

What a task costs beyond its work is Ray's own machinery: on a 2-vCPU machine an
actor call takes ~0.7 ms from submission to result and ~1 ms of CPU split between
the driver and the actor, against ~1 ms for a default 10-step CartPole task; an
actor idles while its result travels and its next task comes back. Ray's compiled
graphs halve the round trip but their reader spins while it waits, which on a few
cores takes the actors' CPU. Actors share no memory, so they cannot run ahead as
Hogwild! processes do without starting tasks from an older θ, which would add
staleness the scheduler did not choose. Ray is for many machines; on one, the
processes runtime is the fast one.

Local by default (``ray_address`` empty): Ray starts here, bound to 127.0.0.1 only
(Ray 2.x resolves ``127.0.0.1`` to the machine's routable address unless it is told
that this is not a cluster, which we tell it for the length of ``ray.init``), no
dashboard, warnings only, worker logs not forwarded, usage statistics off, and no
token written into ``~/.ray`` (``RAY_AUTH_MODE=disabled``) unless the user set those
variables. ``ray_address`` joins an existing cluster instead; every node needs
hybrid-rl installed. Ray is shut down on ``close`` only if this runtime started it,
so a notebook's own ``ray.init`` survives a run.

Faults are handled as in the processes runtime: a dead actor (``RayActorError``, e.g.
after ``ray.kill`` or a SIGKILL) or a task that raised (``RayTaskError``) is counted,
logged and replaced by a new actor with a fresh seed stream; the lost task re-runs
on it from the freshest θ dispatched, so a ``sync`` round or a ``bounded`` wait never
waits on a dead worker.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from federated.clients import population
from hybrid.config import TrainConfig
from hybrid.core.update import Snapshot, Update
from hybrid.core.worker import Worker
from hybrid.envs import EnvInfo
from hybrid.runtimes._parallel import (
    FaultCounters,
    FaultInjector,
    check_failures,
    log_restart,
    pack,
    payload_tensor,
    physical_cores,
    unpack,
    update_record,
    warm_up,
    warn_if_oversubscribed,
)

STARTUP_TIMEOUT_S = 300.0

QUIET_DEFAULTS = {
    "RAY_AUTH_MODE": "disabled",  # else Ray writes ~/.ray/auth_token into the user's home
    "RAY_USAGE_STATS_ENABLED": "0",
}


class ActorWorker:
    """The body of one Ray actor: a warmed-up ``Worker`` that runs tasks on numpy θ."""

    def __init__(self, worker_id: int, incarnation: int, cfg: TrainConfig, info: EnvInfo) -> None:
        torch.set_num_threads(cfg.torch_threads)  # 1 by default: tiny MLPs gain nothing more
        self.worker_id, self.cfg, self.info = worker_id, cfg, info
        self.worker = Worker(worker_id, cfg, info, incarnation)
        warm_up(self.worker)

    def ready(self) -> int:
        return os.getpid()

    def run(
        self, params: np.ndarray, version: int, task: str = "gradient", extras: Any = None
    ) -> dict[str, Any]:
        started_at = time.time()  # wall clock: roughly comparable across the nodes
        if self.cfg.clients is not None:
            # An edge client keeps no env or model between rounds, as on the serial runtime.
            self.worker.close()
            self.worker = Worker(self.worker_id, self.cfg, self.info, max(version, 0))
        snapshot = Snapshot(payload_tensor(params), version, extras=unpack(extras or {}), task=task)
        update = self.worker.run_task(snapshot)
        record = update_record(update)
        record.update(wire=pack(update.payload), started_at=started_at, finished_at=time.time())
        return record


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Make ``ray.init`` bind every service to 127.0.0.1, then put the settings back.

    Ray decides "this is a cluster node, advertise the routable IP" from a constant read at
    import; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is the documented switch, the constant is
    where it lands once ray is imported. Both are restored so that a later run in this
    process can still join a cluster.
    """
    try:  # private: guard against a Ray that moved it; the env variable still applies
        from ray._private import ray_constants
    except ImportError:
        ray_constants = None
    name = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    old_env, old_flag = os.environ.get(name), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[name] = "0"
    if old_flag is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if old_flag is not None:
            ray_constants.ENABLE_RAY_CLUSTER = old_flag
        if old_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old_env


def connect(cfg: TrainConfig) -> bool:
    """Start or join Ray as the config says; True if this call started it (and must stop it)."""
    if ray.is_initialized():
        return False
    for key, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    quiet: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if cfg.ray_address:
        ray.init(address=cfg.ray_address, **quiet)
        return True
    with _loopback_only():
        ray.init(
            num_cpus=max(population(cfg), physical_cores()),  # one CPU per actor must fit
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            **quiet,
        )
    address = ray.util.get_node_ip_address()
    if address != "127.0.0.1":
        warnings.warn(
            f"this Ray version bound the local instance to {address}, not to loopback only; "
            "firewall it, or start Ray yourself and pass --ray-address",
            RuntimeWarning,
            stacklevel=2,
        )
    return True


@dataclass
class _Task:
    """The freshest dispatched snapshot, as tasks ship it (a re-run task uses it too)."""

    params: np.ndarray
    version: int
    kind: str
    extras: Any


@dataclass
class _Actor:
    worker_id: int
    incarnation: int
    handle: Any
    busy: bool = False
    failures: int = 0
    killed_on_purpose: bool = False


class RayRuntime:
    """Workers as Ray actors; real wall-clock time; earliest completion first."""

    def __init__(self, cfg: TrainConfig, info: EnvInfo) -> None:
        if not cfg.ray_address:
            warn_if_oversubscribed(population(cfg), "ray")
        self.cfg, self.info = cfg, info
        self._owns_ray = connect(cfg)
        self._remote = ray.remote(num_cpus=1, max_restarts=0)(ActorWorker)
        self._inflight: dict[Any, int] = {}  # ObjectRef -> worker id
        self._arrived: list[tuple[float, int, Update]] = []
        self._sequence = 0
        self._latest: _Task | None = None
        self._faults = FaultInjector(cfg.inject_worker_faults, cfg.seed)
        self.counters = FaultCounters()
        self._closed = False
        self._actors: list[_Actor] = []
        try:
            for w in range(population(cfg)):  # edge clients: one actor per client
                self._actors.append(_Actor(w, 0, self._start(w, 0)))
            ray.get([a.handle.ready.remote() for a in self._actors], timeout=STARTUP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self._origin = time.time()  # the workers are warm: the run begins

    # -- the Runtime protocol --

    def idle_workers(self) -> list[int]:
        return [a.worker_id for a in self._actors if not a.busy]

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        actor = self._actors[worker_id]
        if actor.busy:
            raise RuntimeError(f"worker {worker_id} is busy; dispatch only idle workers")
        if self._latest is None or self._latest.version != snapshot.version:
            # One conversion per version: a sync round's N tasks share it.
            self._latest = _Task(
                snapshot.params.numpy(),
                snapshot.version,
                snapshot.task,
                pack(snapshot.extras) if snapshot.extras else None,
            )
        actor.busy = True
        self._submit(actor)
        if self._faults.strike():
            self.kill_worker(worker_id)

    def next_update(self) -> Update:
        while not self._arrived:
            if not self._inflight:
                raise RuntimeError("no task in flight and none started: the scheduler stalled")
            refs = list(self._inflight)
            # Everything finished by now, so that the earliest of them goes first; a blocking
            # wait only when nothing has. One ray.wait costs ~0.1 ms of the driver's time,
            # which on a busy machine the actors pay for: skip the look that cannot find more.
            done: list[Any] = []
            if len(refs) > 1:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if not done:
                done, _ = ray.wait(refs, num_returns=1)
            for ref in done:
                self._collect(ref)
        _, _, update = heapq.heappop(self._arrived)
        self._actors[update.worker_id].busy = False
        return update

    def settle(self) -> None:
        pass  # only the main process writes the global model

    def virtual_time(self) -> float | None:
        return None

    def metrics(self) -> dict[str, float]:
        return self.counters.as_metrics()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        self._inflight.clear()
        if self._owns_ray:
            ray.shutdown()

    # -- checkpoints --

    def state_dict(self) -> dict[str, Any]:
        """The counters and every actor's incarnation (tasks in flight re-run on resume)."""
        return {
            "incarnations": [a.incarnation for a in self._actors],
            "restarts": self.counters.restarts,
            "lost_updates": self.counters.lost_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the counters; replace every actor by its next incarnation (fresh seeds)."""
        self.counters = FaultCounters(int(state["restarts"]), int(state["lost_updates"]))
        for actor, incarnation in zip(self._actors, state["incarnations"], strict=True):
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
            actor.incarnation = int(incarnation) + 1
            actor.handle = self._start(actor.worker_id, actor.incarnation)
        ray.get([a.handle.ready.remote() for a in self._actors], timeout=STARTUP_TIMEOUT_S)
        self._origin = time.time()

    # -- fault tests --

    def kill_worker(self, worker_id: int) -> None:
        """Kill a worker's actor now (fault injection); it is restarted when noticed."""
        actor = self._actors[worker_id]
        actor.killed_on_purpose = True
        ray.kill(actor.handle, no_restart=True)

    # -- internals --

    def _start(self, worker_id: int, incarnation: int) -> Any:
        return self._remote.remote(worker_id, incarnation, self.cfg, self.info)

    def _submit(self, actor: _Actor) -> None:
        task = self._latest
        assert task is not None
        ref = actor.handle.run.remote(task.params, task.version, task.kind, task.extras)
        self._inflight[ref] = actor.worker_id

    def _collect(self, ref: Any) -> None:
        actor = self._actors[self._inflight.pop(ref)]
        try:
            record = ray.get(ref)
        except ray.exceptions.RayError as exc:
            self._restart(actor, exc)
            self._submit(actor)  # the lost task re-runs, queued behind the new actor's warm-up
            return
        received_at = time.time()
        started_at, finished_at = record.pop("started_at"), record.pop("finished_at")
        # Ray's arrays are read-only views of its object store: unpack copies them.
        update = Update(payload=unpack(record.pop("wire")), **record)
        update.started_s = started_at - self._origin
        update.cost_s = received_at - started_at
        update.upload_s = received_at - finished_at  # transfer, and waiting for the driver
        heapq.heappush(self._arrived, (finished_at, self._sequence, update))
        self._sequence += 1
        actor.failures = 0

    def _restart(self, actor: _Actor, exc: ray.exceptions.RayError) -> None:
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)
        error = str(exc)
        if actor.killed_on_purpose:
            reason = "was killed on purpose"
        elif isinstance(exc, ray.exceptions.RayTaskError):
            reason = "raised: " + error.strip().splitlines()[-1]
        else:
            reason = f"died ({type(exc).__name__})"
        self.counters.restarts += 1
        self.counters.lost_updates += 1
        log_restart(actor.worker_id, actor.incarnation, reason, lost=True)
        if not actor.killed_on_purpose:
            actor.failures += 1
            check_failures(actor.worker_id, actor.failures, error)
        actor.killed_on_purpose = False
        actor.incarnation += 1
        actor.handle = self._start(actor.worker_id, actor.incarnation)
