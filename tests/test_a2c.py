"""A2C's pieces: advantages, truncation bootstrapping, both policy heads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import hybrid
from hybrid.algorithms.a2c import a2c_loss, gae
from hybrid.algorithms.rollout import Rollout
from hybrid.nets import ActorCritic, FlatParams


def test_gae_lambda_one_is_nstep_return_minus_value():
    # Two steps, one env, no terminal: A_0 = r0 + γ r1 + γ² V(x2) − V(x0).
    gamma = 0.9
    rewards = np.array([[1.0], [2.0]], dtype=np.float32)
    values = np.array([[0.5], [0.25]], dtype=np.float32)
    next_values = np.array([[0.25], [4.0]], dtype=np.float32)
    not_done = np.ones((2, 1), dtype=np.float32)
    adv = gae(rewards, values, next_values, not_done, gamma, lam=1.0)
    assert adv[0, 0] == pytest.approx(1.0 + 0.9 * 2.0 + 0.81 * 4.0 - 0.5)
    assert adv[1, 0] == pytest.approx(2.0 + 0.9 * 4.0 - 0.25)


def test_gae_stops_at_episode_end():
    rewards = np.array([[1.0], [1.0]], dtype=np.float32)
    values = np.zeros((2, 1), dtype=np.float32)
    next_values = np.full((2, 1), 10.0, dtype=np.float32)
    not_done = np.array([[0.0], [1.0]], dtype=np.float32)  # step 0 ends an episode
    adv = gae(rewards, values, next_values, not_done, 0.5, lam=0.95)
    assert adv[0, 0] == pytest.approx(1.0)  # neither the next value nor step 1 leaks in
    assert adv[1, 0] == pytest.approx(1.0 + 0.5 * 10.0)


def _rollout(truncated: bool) -> Rollout:
    obs = torch.zeros(1, 1, 4)
    return Rollout(
        obs=obs,
        actions=torch.zeros(1, 1, dtype=torch.int64),
        rewards=torch.ones(1, 1),
        terminated=torch.tensor([[not truncated]]),
        truncated=torch.tensor([[truncated]]),
        last_obs=torch.zeros(1, 4),
        final_obs={(0, 0): torch.ones(4)} if truncated else {},
    )


def test_truncation_bootstraps_from_the_final_observation():
    torch.manual_seed(0)
    model = ActorCritic(4, 2, continuous=False)
    with torch.no_grad():
        model.critic[-1].bias.fill_(3.0)  # V(x) = 3 + w·h(x)
        v_final = float(model.value(torch.ones(1, 4))[0])
        v0 = float(model.value(torch.zeros(1, 4))[0])
    gamma = 0.99
    _, cut = a2c_loss(model, _rollout(truncated=True), gamma=gamma, ent_coef=0.0)
    _, ended = a2c_loss(model, _rollout(truncated=False), gamma=gamma, ent_coef=0.0)
    # value loss = ½ (target − V(x0))²; the target is r + γ V(final) only when truncated
    assert cut["losses/value"] == pytest.approx(0.5 * (1.0 + gamma * v_final - v0) ** 2, rel=1e-5)
    assert ended["losses/value"] == pytest.approx(0.5 * (1.0 - v0) ** 2, rel=1e-5)


def test_flat_params_share_storage_with_the_module():
    model = ActorCritic(3, 2, continuous=True)
    flat = FlatParams(model)
    flat.load(torch.arange(flat.numel, dtype=torch.float32))
    params = list(model.parameters())
    assert torch.equal(torch.cat([p.detach().view(-1) for p in params]), flat.flat)
    assert float(params[-1].detach().view(-1)[-1]) == flat.numel - 1
    offset = sum(p.numel() for p in params[: params.index(model.log_std)])
    model.log_std.sum().backward()
    grad = flat.grad()
    assert grad.shape == (flat.numel,)
    assert grad[offset : offset + 2].tolist() == [1.0, 1.0]
    assert grad.abs().sum() == 2.0


def test_gaussian_log_prob_matches_torch_distributions():
    model = ActorCritic(3, 2, continuous=True)
    obs, actions = torch.randn(5, 3), torch.randn(5, 2)
    logp, entropy = model.log_prob_entropy(obs, actions)
    dist = torch.distributions.Normal(model.actor(obs), model.log_std.exp())
    torch.testing.assert_close(logp, dist.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))


def test_categorical_sampling_follows_the_probabilities():
    model = ActorCritic(2, 3, continuous=False)
    with torch.no_grad():
        model.actor[-1].weight.zero_()
        model.actor[-1].bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    g = torch.Generator().manual_seed(0)
    actions = model.act(torch.zeros(20_000, 2), g)
    freq = torch.bincount(actions, minlength=3).float() / 20_000
    torch.testing.assert_close(freq, torch.tensor([0.2, 0.3, 0.5]), atol=0.015, rtol=0)


def test_gaussian_head_trains_on_pendulum(tmp_path):
    result = hybrid.train(
        env="Pendulum-v1",
        scheduler="sync",
        workers=2,
        total_env_steps=2_000,
        eval_every=1_000,
        eval_episodes=2,
        progress=False,
        out=str(tmp_path / "p"),
    )
    assert result.summary["env_steps"] >= 2_000
    assert math.isfinite(result.final_eval_return)
    assert torch.isfinite(result.params).all()
    assert result.summary["solved"] is False  # Pendulum has no reward threshold
