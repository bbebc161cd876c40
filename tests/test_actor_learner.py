"""The hybrid scheduler: asynchronous actors, a batched learner, V-trace and Ape-X replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_update

import hybrid
from hybrid import ConfigError, TrainConfig
from hybrid.algorithms.nstep_q import apex_epsilon, nstep_transitions
from hybrid.algorithms.rollout import Rollout, concat_rollouts
from hybrid.nets import QNetwork
from hybrid.protocol import CollectExperience
from hybrid.schedulers import ActorLearner, ActorLearnerSettings, Verdict


def test_actor_learner_batches_and_drops_lagging_trajectories():
    s = ActorLearner(3, ActorLearnerSettings(learner_batch=2, max_policy_lag=4))
    assert s.task_kind is CollectExperience  # actors send trajectories
    assert s.ready([0, 2], version=9) == [0, 2]  # actors never wait
    assert s.admit(make_update(0, 0, [0.0]), staleness=5) is Verdict.DROP
    assert s.admit(make_update(1, 3, [0.0]), staleness=4) is Verdict.BUFFER
    assert not s.full()
    s.admit(make_update(2, 6, [0.0]), staleness=1)
    assert s.full()
    step = s.combine()
    assert step.direction is None and len(step.batch) == 2 and step.lags == [4, 1]
    assert not s.full()


def _rollout(rewards, terminated, obs_offset=0.0) -> Rollout:
    T, E = len(rewards), len(rewards[0])
    obs = torch.arange(T * E * 2, dtype=torch.float32).view(T, E, 2) + obs_offset
    return Rollout(
        obs=obs,
        actions=torch.zeros(T, E, dtype=torch.int64),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        terminated=torch.tensor(terminated),
        truncated=torch.zeros(T, E, dtype=torch.bool),
        last_obs=torch.full((E, 2), -1.0),
        final_obs={(1, 0): torch.ones(2)} if obs_offset else {},
    )


def test_concat_rollouts_stacks_envs_and_shifts_final_obs():
    a = _rollout([[1.0], [2.0]], [[False], [False]])
    b = _rollout([[3.0], [4.0]], [[False], [False]], obs_offset=100.0)
    both = concat_rollouts([a, b])
    assert both.rewards.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert both.obs.shape == (2, 2, 2) and both.last_obs.shape == (2, 2)
    assert set(both.final_obs) == {(1, 1)}


def test_nstep_transitions_by_hand():
    # One env, rewards 1, 1, 1; the episode terminates at step 1; n = 2, γ = 0.5.
    model = QNetwork(2, 2)
    with torch.no_grad():
        for p in model.q.parameters():
            p.zero_()  # Q ≡ 0, so priorities are |n-step return|
    batch = _rollout([[1.0], [1.0], [1.0]], [[False], [True], [False]])
    tr = nstep_transitions(model, batch, gamma=0.5, n=2)
    # t=0: 1 + 0.5·1, then the termination cuts the bootstrap: discount 0
    # t=1: 1, terminal: discount 0; t=2: 1 then the rollout ends: bootstrap from last obs, γ¹
    assert tr["reward"].tolist() == [1.5, 1.0, 1.0]
    assert tr["discount"].tolist() == [0.0, 0.0, 0.5]
    assert tr["next_obs"][2].tolist() == [-1.0, -1.0]
    # the observation after the last step taken (here unused: its discount is 0)
    assert tr["next_obs"][0].tolist() == batch.obs[2, 0].tolist()
    np.testing.assert_allclose(tr["priority"], [1.5, 1.0, 1.0])


def test_apex_epsilon_spread():
    assert apex_epsilon(0, 8, 0.4, 7.0) == pytest.approx(0.4)
    assert apex_epsilon(7, 8, 0.4, 7.0) == pytest.approx(0.4**8)
    assert apex_epsilon(0, 1, 0.4, 7.0) == 0.4


def test_learner_logs_policy_lag_and_is_reproducible(tiny_config):
    cfg = tiny_config(scheduler="hybrid", learner_batch=2, workers=4, total_env_steps=1_500)
    first = hybrid.train(cfg)
    again = hybrid.train(cfg.replace(out=cfg.out + "-again"))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    rows = [r for r in first.metrics("train") if "sched/policy_lag_mean" in r]
    assert rows
    for r in rows:
        assert r["sched/policy_lag_min"] <= r["sched/policy_lag_mean"] <= r["sched/policy_lag_max"]
    assert first.summary["updates"] == first.summary["tasks"] // 2


def test_max_policy_lag_zero_drops_what_is_stale(tiny_config):
    result = hybrid.train(
        tiny_config(scheduler="hybrid", learner_batch=1, max_policy_lag=0, cluster="heterogeneous")
    )
    assert result.summary["dropped"] > 0
    assert result.summary["staleness_max"] == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"learner_batch": 0}, "learner_batch"),
        ({"max_policy_lag": -1}, "max_policy_lag"),
        ({"replay_alpha": 1.5}, "replay_alpha"),
        ({"replay_beta0": -0.1}, "replay_beta0"),
        ({"replay_capacity": 10, "replay_batch": 64}, "replay_capacity"),
        ({"rho_bar": 0.5, "c_bar": 1.0}, "rho_bar"),
        ({"correction": "retrace"}, "correction"),
        ({"algo": "nstep_q", "env": "Pendulum-v1"}, "algo"),
    ],
)
def test_bad_actor_learner_settings(changes, field, tmp_path):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        hybrid.train(TrainConfig(scheduler="hybrid", out=str(tmp_path / "x"), **changes))
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {"algo": "a2c", "correction": "vtrace"},
        {"algo": "nstep_q", "replay": "prioritized"},
    ],
    ids=["impala-vtrace", "apex-per"],
)
def test_hybrid_solves_cartpole(changes, tmp_path):
    cfg = TrainConfig(
        scheduler="hybrid",
        seed=0,
        total_env_steps=200_000,
        progress=False,
        out=str(tmp_path / "r"),
        **changes,
    )
    result = hybrid.train(cfg)
    assert result.summary["solved"] is True
    assert result.summary["final_eval_return"] >= 475
