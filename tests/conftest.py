from __future__ import annotations

import os

import pytest
import torch

from hybrid.config import TrainConfig
from hybrid.core.update import Update

# Tests never reach the network.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def tiny_config(tmp_path):
    """A CartPole run small enough for a unit test (a few hundred env steps)."""

    def make(**changes) -> TrainConfig:
        base = TrainConfig(
            env="CartPole-v1",
            workers=3,
            envs_per_worker=2,
            rollout_steps=5,
            total_env_steps=600,
            eval_every=300,
            eval_episodes=2,
            log_every=100,
            progress=False,
            out=str(tmp_path / "run"),
        )
        return base.replace(**changes)

    return make


def make_update(worker_id: int, base_version: int, values, env_steps: int = 10, **kw) -> Update:
    return Update(
        worker_id=worker_id,
        base_version=base_version,
        payload=torch.tensor(values, dtype=torch.float32),
        env_steps=env_steps,
        **kw,
    )
