"""Advantage actor-critic (A2C; A3C when its gradients are applied asynchronously)."""

from __future__ import annotations

import torch

from hybrid.algorithms.rollout import Rollout
from hybrid.nets import ActorCritic


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    not_done: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalized advantage estimates, time-major [T, E]; lam=1 gives n-step returns − V."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * not_done[t] - values[t]
        running = delta + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages


def a2c_loss(
    model: ActorCritic,
    batch: Rollout,
    gamma: float = 0.99,
    gae_lambda: float = 1.0,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    normalize_advantages: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    T, E = batch.rewards.shape
    obs = batch.obs.reshape(T * E, -1)

    # One critic pass over the batch and the observation after it.
    all_values = model.value(torch.cat([obs, batch.last_obs]))
    values = all_values[: T * E].view(T, E)

    with torch.no_grad():
        next_values = torch.empty_like(values)
        next_values[:-1] = values[1:]
        next_values[-1] = all_values[T * E :]
        rewards = batch.rewards.clone()
        # A time limit is not a terminal state: bootstrap from the state it cut off.
        for (t, i), final in batch.final_obs.items():
            rewards[t, i] += gamma * model.value(final.unsqueeze(0))[0]
        not_done = (~(batch.terminated | batch.truncated)).float()
        advantages = gae(rewards, values.detach(), next_values, not_done, gamma, gae_lambda)
        returns = advantages + values.detach()
        if normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    actions = batch.actions.reshape(T * E, *batch.actions.shape[2:])
    logp, entropy = model.log_prob_entropy(obs, actions)
    policy_loss = -(advantages.reshape(-1) * logp).mean()
    value_loss = 0.5 * (returns.reshape(-1) - values.reshape(-1)).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    return loss, {
        "losses/policy": float(policy_loss.detach()),
        "losses/value": float(value_loss.detach()),
        "losses/entropy": float(entropy_mean.detach()),
    }
