"""Advantage actor-critic (A2C; A3C when its gradients are applied asynchronously)."""

from __future__ import annotations

import numpy as np
import torch

from hybrid.algorithms.rollout import Rollout
from hybrid.algorithms.vtrace import nstep_returns, vtrace
from hybrid.nets import ActorCritic


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    not_done: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Generalized advantage estimates, time-major [T, E]; lam=1 gives n-step returns − V.

    numpy, because the recursion runs over a handful of tiny rows where torch's
    per-op overhead would dominate.
    """
    advantages = np.zeros_like(rewards)
    running = np.zeros_like(rewards[0])
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
        v = all_values.numpy()
        next_values = v[E:].reshape(T, E)  # V(x_{t+1}); the last row is V(last_obs)
        rewards = batch.rewards.numpy().copy()
        # A time limit is not a terminal state: bootstrap from the state it cut off.
        for (t, i), final in batch.final_obs.items():
            rewards[t, i] += gamma * float(model.value(final.unsqueeze(0))[0])
        not_done = (~(batch.terminated | batch.truncated)).numpy().astype(np.float32)
        adv = gae(rewards, v[: T * E].reshape(T, E), next_values, not_done, gamma, gae_lambda)
        advantages = torch.from_numpy(adv)
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


def a2c_vtrace_loss(
    model: ActorCritic,
    batch: Rollout,
    gamma: float = 0.99,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    correction: str = "vtrace",
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The learner's actor-critic loss over trajectories from older policies (IMPALA).

    ``correction="vtrace"`` corrects the policy lag with V-trace targets and truncated
    importance weights; ``"none"`` treats the trajectories as on-policy (n-step returns),
    the baseline IMPALA's Table 2 compares against.
    """
    if batch.behaviour_logp is None:
        raise ValueError("a2c_vtrace_loss needs trajectories with behaviour log-probabilities")
    T, E = batch.rewards.shape
    obs = batch.obs.reshape(T * E, -1)
    all_values = model.value(torch.cat([obs, batch.last_obs]))
    values = all_values[: T * E].view(T, E)
    actions = batch.actions.reshape(T * E, *batch.actions.shape[2:])
    logp, entropy = model.log_prob_entropy(obs, actions)

    with torch.no_grad():
        rewards = batch.rewards.clone()
        done = batch.terminated | batch.truncated
        # Time limits are not terminal: fold γ·V(final obs) into the reward, then cut the trace.
        for (t, i), final in batch.final_obs.items():
            rewards[t, i] += gamma * model.value(final.unsqueeze(0))[0]
        discounts = gamma * (~done).float()
        bootstrap = all_values[T * E :]
        if correction == "vtrace":
            returns = vtrace(
                batch.behaviour_logp,
                logp.view(T, E),
                rewards,
                values,
                bootstrap,
                discounts,
                rho_bar=rho_bar,
                c_bar=c_bar,
            )
            targets, advantages = returns.vs, returns.pg_advantages
        else:
            targets = nstep_returns(rewards, values, bootstrap, discounts)
            advantages = targets - values

    policy_loss = -(advantages.reshape(-1) * logp).mean()
    value_loss = 0.5 * (targets.reshape(-1) - values.reshape(-1)).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    return loss, {
        "losses/policy": float(policy_loss.detach()),
        "losses/value": float(value_loss.detach()),
        "losses/entropy": float(entropy_mean.detach()),
    }
