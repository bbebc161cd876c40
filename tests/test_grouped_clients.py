"""Federated clients that start a round from one snapshot on the serial runtime compute
their local steps together (``EdgeClients.run_group``): the same updates as one client at a
time, up to float rounding."""

from __future__ import annotations

import pytest
import torch

import hybrid
from hybrid.assembly import client_settings, env_settings, make_task, worker_settings
from hybrid.config import TrainConfig
from hybrid.envs import describe
from hybrid.protocol import Snapshot, TrainLocally
from hybrid.runtimes import pool as pool_module
from hybrid.runtimes.pool import EdgeClients
from hybrid.trainer import initial_params

CLIENTS = [17, 3, 40, 8]


def _pool(cfg: TrainConfig) -> tuple[EdgeClients, Snapshot]:
    info = describe(cfg.env, env_settings(cfg))
    snapshot = Snapshot(initial_params(cfg, info), 4, task=make_task(TrainLocally, cfg))
    return EdgeClients(worker_settings(cfg), info, client_settings(cfg)), snapshot


@pytest.mark.parametrize(
    "changes",
    [
        {"local_steps": 1},
        # parameters part after the first step; FedProx's pull; per-client physics
        {"local_steps": 3, "prox_mu": 0.1, "client_dynamics": "pole_length"},
        # long enough rollouts that episodes end and are cut by a short time limit (below)
        {"local_steps": 2, "local_optimizer": "sgd", "local_lr": 0.05, "rollout_steps": 40},
        {"local_steps": 2, "normalize_obs": True, "codec": "topk"},
    ],
)
def test_a_round_computed_together_matches_one_client_at_a_time(changes, monkeypatch):
    torch.set_num_threads(1)
    cfg = TrainConfig(scheduler="fedavg", clients=50, env_defaults=False, **changes)
    pool, snapshot = _pool(cfg)
    if changes.get("rollout_steps"):  # a time limit that cuts episodes: the final obs path
        import gymnasium as gym

        monkeypatch.setattr(gym.wrappers.TimeLimit, "__init__", _short_time_limit)
    expected = [pool.run(client, snapshot) for client in CLIENTS]
    grouped = []
    run_local_group = pool_module.run_local_group
    monkeypatch.setattr(
        pool_module, "run_local_group", lambda *a: grouped.append(1) or run_local_group(*a)
    )
    lent: list = []
    for _ in range(2):  # the second round borrows the first one's envs
        got = pool.run_group(CLIENTS, snapshot, lent)
        for e, g in zip(expected, got, strict=True):
            assert (g.worker_id, g.base_version, g.env_steps) == (e.worker_id, 4, e.env_steps)
            assert g.episode_returns == e.episode_returns  # the same actions, the same episodes
            if isinstance(e.payload, torch.Tensor):
                torch.testing.assert_close(g.payload, e.payload, rtol=1e-4, atol=1e-6)
            else:  # a codec's wire bytes: the sizes agree
                assert g.nbytes == e.nbytes
            assert g.stats == pytest.approx(e.stats, rel=1e-4, abs=1e-6)
    assert len(grouped) == 2  # both rounds took the grouped path
    assert len(lent) == 1 and len(lent[0].spare_envs) == len(CLIENTS) - 1
    if changes.get("rollout_steps"):
        assert any(u.episode_returns for u in expected)


def _short_time_limit(self, env, max_episode_steps=None):
    import gymnasium as gym

    gym.Wrapper.__init__(self, env)
    self._max_episode_steps = 12
    self._elapsed_steps = None


@pytest.mark.parametrize(
    "pool", [{"clients": 20, "client_fraction": 0.25}, {"workers": 3, "client_fraction": 1.0}]
)
def test_a_grouped_fedavg_run_is_reproducible_and_ends_where_one_at_a_time_does(
    pool, tmp_path, monkeypatch
):
    """Edge clients and persistent workers alike: the serial runtime groups each round's
    clients, a rerun gives the same bits, and the run ends where computing each client
    alone ends, up to rounding."""
    import hybrid.runtimes.pool as pool_module
    import hybrid.runtimes.serial as serial

    grouped = []
    run_local_group = serial.run_local_group
    spy = lambda *a: grouped.append(1) or run_local_group(*a)  # noqa: E731
    monkeypatch.setattr(serial, "run_local_group", spy)
    monkeypatch.setattr(pool_module, "run_local_group", spy)
    cfg = TrainConfig(
        scheduler="fedavg",
        local_steps=2,
        total_env_steps=4_000,
        eval_every=10**6,
        eval_episodes=2,
        stop_when_solved=False,
        progress=False,
        env_defaults=False,
        **pool,
    )
    first = hybrid.train(cfg.replace(out=str(tmp_path / "a")))
    assert grouped
    again = hybrid.train(cfg.replace(out=str(tmp_path / "b")))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    monkeypatch.setattr(serial, "groups_local_training", lambda *a: False)
    monkeypatch.setattr(pool_module, "groups_local_training", lambda *a: False)
    alone = hybrid.train(cfg.replace(out=str(tmp_path / "alone")))
    assert alone.summary["final_params_sha256"] != first.summary["final_params_sha256"]
    torch.testing.assert_close(alone.params, first.params, rtol=0, atol=1e-5)
    if "clients" in pool:  # processes run each edge client alone, summing in another order
        on_processes = hybrid.train(
            cfg.replace(runtime="processes", workers=2, out=str(tmp_path / "p"))
        )
        torch.testing.assert_close(on_processes.params, first.params, rtol=0, atol=1e-5)
