"""A worker: its own envs, a local model copy and an algorithm; one task -> one Update."""

from __future__ import annotations

import time

import torch

from hybrid.algorithms import make_loss
from hybrid.algorithms.rollout import EnvRunner
from hybrid.codecs import make_codec
from hybrid.config import TrainConfig
from hybrid.core.update import Snapshot, Update
from hybrid.envs import EnvInfo, make_vector_env
from hybrid.nets import ActorCritic, FlatParams
from hybrid.seeding import WORKER, int_seed, stream, worker_seeds

CODEC_STREAM = 7  # spawn-key slot of a worker's codec randomness


def build_model(cfg: TrainConfig, info: EnvInfo) -> ActorCritic:
    return ActorCritic(info.obs_dim, info.action_dim, info.continuous, cfg.hidden, cfg.layers)


class Worker:
    """Produces one gradient ``Update`` per task from the snapshot it is given."""

    def __init__(
        self, worker_id: int, cfg: TrainConfig, info: EnvInfo, incarnation: int = 0
    ) -> None:
        self.worker_id = worker_id
        self.cfg = cfg
        env_seed, torch_seed = worker_seeds(cfg.seed, worker_id, incarnation)
        self.model = build_model(cfg, info)
        self.flat = FlatParams(self.model)
        self.loss_fn = make_loss(cfg)
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
        rollout = self.runner.collect(self.model, self.cfg.rollout_steps, self.generator)
        self.flat.zero_grad()
        loss, stats = self.loss_fn(self.model, rollout)
        loss.backward()
        payload, nbytes = self.encode(self.flat.grad())
        update = Update(
            worker_id=self.worker_id,
            base_version=snapshot.version,
            payload=payload,
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
