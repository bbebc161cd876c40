"""A worker: its own envs, a local model copy and an algorithm; one task -> one Update."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from hybrid.algorithms import ALGORITHMS
from hybrid.algorithms.rollout import EnvRunner
from hybrid.codecs import make_codec
from hybrid.config import TrainConfig
from hybrid.core.update import Snapshot, Update
from hybrid.envs import EnvInfo, make_vector_env
from hybrid.nets import FlatParams
from hybrid.seeding import WORKER, int_seed, stream, worker_seeds

CODEC_STREAM = 7  # spawn-key slot of a worker's codec randomness


def build_model(cfg: TrainConfig, info: EnvInfo, worker_id: int = -1) -> torch.nn.Module:
    """The algorithm's model (``worker_id = -1``: the server's or the evaluator's copy)."""
    return ALGORITHMS[cfg.algo].model(cfg, info, worker_id)


class Worker:
    """Produces one ``Update`` per task from the snapshot it is given.

    The snapshot's ``task`` says what to send: ``gradient`` (the gradient of the
    algorithm's loss on a fresh rollout) or ``trajectory`` (what an actor hands an
    actor-learner: the rollout itself, or Ape-X's prioritized n-step transitions).
    """

    def __init__(
        self, worker_id: int, cfg: TrainConfig, info: EnvInfo, incarnation: int = 0
    ) -> None:
        self.worker_id = worker_id
        self.cfg = cfg
        env_seed, torch_seed = worker_seeds(cfg.seed, worker_id, incarnation)
        self.algorithm = ALGORITHMS[cfg.algo]
        self.model = build_model(cfg, info, worker_id)
        self.flat = FlatParams(self.model)
        self.loss_fn = self.algorithm.loss(cfg)
        self.actor_payload = self.algorithm.actor_payload(cfg)
        self.generator = torch.Generator().manual_seed(torch_seed)
        self.runner = EnvRunner(make_vector_env(cfg.env, cfg.envs_per_worker), env_seed, info)
        # Each worker owns its codec: top-k's error-feedback residual is worker state.
        codec_seed = int_seed(stream(cfg.seed, WORKER, worker_id, incarnation, CODEC_STREAM))
        self.codec = (
            None
            if cfg.codec == "none"
            else make_codec(
                cfg.codec,
                topk_ratio=cfg.topk_ratio,
                error_feedback=cfg.error_feedback,
                seed=codec_seed,
            )
        )
        self.tasks_done = 0

    def run_task(self, snapshot: Snapshot) -> Update:
        started = time.perf_counter()
        self.flat.load(snapshot.params)
        if snapshot.extras:
            self.model.load_extras(snapshot.extras)
        acting = snapshot.task == "trajectory"
        rollout = self.runner.collect(
            self.model,
            self.cfg.rollout_steps,
            self.generator,
            record_logp=acting and self.algorithm.records_behaviour_logp,
        )
        stats: dict[str, float] = {}
        if acting:
            payload: Any = self.actor_payload(self.model, rollout)
            nbytes = payload_nbytes(payload)
        else:
            self.flat.zero_grad()
            loss, stats = self.loss_fn(self.model, rollout)
            loss.backward()
            payload, nbytes = self.encode(self.flat.grad())
        update = Update(
            worker_id=self.worker_id,
            base_version=snapshot.version,
            payload=payload,
            kind=snapshot.task,
            env_steps=rollout.env_steps,
            episode_returns=rollout.episode_returns,
            episode_lengths=rollout.episode_lengths,
            stats=stats,
            nbytes=nbytes,
            cost_s=time.perf_counter() - started,
            task_index=self.tasks_done,
        )
        self.tasks_done += 1
        return update

    def encode(self, vector: torch.Tensor) -> tuple[torch.Tensor | bytes, int]:
        """The payload as it travels, and its size on the wire in bytes."""
        if self.codec is None or not torch.isfinite(vector).all():
            # A non-finite update travels raw so that the server can see and reject it.
            return vector, vector.numel() * vector.element_size()
        wire = self.codec.encode(vector)
        return wire, len(wire)

    def close(self) -> None:
        self.runner.close()


def payload_nbytes(payload: Any) -> int:
    """Bytes of the arrays in a trajectory payload, as they would travel."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, dict):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, list | tuple):
        return sum(payload_nbytes(v) for v in payload)
    if hasattr(payload, "__dataclass_fields__"):
        return sum(payload_nbytes(getattr(payload, f)) for f in payload.__dataclass_fields__)
    return 0
