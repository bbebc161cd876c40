"""Workers that start from one snapshot compute their tasks together (serial runtime):
the same updates as one task at a time, up to float rounding."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import hybrid
from hybrid import TrainConfig
from hybrid.assembly import worker_settings
from hybrid.core.worker import Worker, groups_gradients, run_group
from hybrid.envs import describe
from hybrid.protocol import CollectExperience, Snapshot
from hybrid.trainer import initial_params


def _workers(cfg: TrainConfig) -> list[Worker]:
    info = describe(cfg.env)
    return [Worker(w, worker_settings(cfg), info) for w in range(cfg.workers)]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"envs_per_worker": 1, "gae_lambda": 0.95, "normalize_advantages": True},
        {"normalize_obs": True, "normalize_reward": True},
    ],
)
def test_group_matches_one_task_at_a_time(changes):
    torch.set_num_threads(1)
    # rollouts long enough that episodes end (terminal) and are cut (truncation: final obs)
    settings = {"workers": 3, "envs_per_worker": 2, "rollout_steps": 40} | changes
    cfg = TrainConfig(env="CartPole-v1", **settings)
    alone, together = _workers(cfg), _workers(cfg)
    for w in alone + together:  # a time limit short enough to cut episodes
        for env in w.runner.envs.envs:
            while not isinstance(env, gym.wrappers.TimeLimit):
                env = env.env
            env._max_episode_steps = 12
    assert groups_gradients(together, Snapshot(torch.zeros(1), 0))
    params = initial_params(cfg, describe(cfg.env))
    for version in range(6):
        snapshot = Snapshot(params.clone(), version)
        expected = [w.run_task(snapshot) for w in alone]
        got = run_group(together, snapshot)
        for e, g in zip(expected, got, strict=True):
            steps = cfg.rollout_steps * cfg.envs_per_worker
            assert (g.worker_id, g.base_version, g.env_steps) == (e.worker_id, version, steps)
            assert g.episode_returns == e.episode_returns  # same actions, same episodes
            torch.testing.assert_close(g.payload, e.payload, rtol=1e-4, atol=1e-6)
            assert g.stats == pytest.approx(e.stats, rel=1e-4, abs=1e-6)
            assert g.task_index == e.task_index == version
        params = params - 0.05 * torch.stack([u.payload for u in expected]).mean(0)
    assert any(u.episode_returns for u in expected)


def test_only_gradient_tasks_of_mlp_a2c_workers_group():
    cfg = TrainConfig(env="CartPole-v1", workers=2)
    workers = _workers(cfg)
    assert groups_gradients(workers, Snapshot(torch.zeros(1), 0))
    assert not groups_gradients(workers[:1], Snapshot(torch.zeros(1), 0))
    assert not groups_gradients(workers, Snapshot(torch.zeros(1), 0, task=CollectExperience()))
    assert not groups_gradients(_workers(cfg.replace(algo="ppo")), Snapshot(torch.zeros(1), 0))
    assert not groups_gradients(_workers(cfg.replace(algo="nstep_q")), Snapshot(torch.zeros(1), 0))


def test_grouped_sync_run_is_reproducible_and_learns(tiny_config, tmp_path):
    cfg = tiny_config(scheduler="sync", workers=4, total_env_steps=2000)
    first = hybrid.train(cfg.replace(out=str(tmp_path / "a")))
    again = hybrid.train(cfg.replace(out=str(tmp_path / "b")))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    assert first.summary["env_steps"] == 2000
    assert first.summary["updates"] == 2000 // (4 * 2 * 5)
