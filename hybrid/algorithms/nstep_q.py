"""Asynchronous n-step Q-learning (Mnih et al. 2016) and its Ape-X form (Horgan et al. 2018).

Under ``sync``, ``async`` and ``bounded`` a worker pushes the gradient of the n-step
Q loss of its own rollout, bootstrapping from the shared target network θ⁻ (the A3C
paper's off-policy variant). Under ``hybrid`` a worker is an Ape-X actor: it turns its
rollout into n-step transitions, gives each an initial priority |TD error| computed
with the parameters it acted with, and the learner trains from a prioritized replay.
"""

from __future__ import annotations

import numpy as np
import torch

from hybrid.algorithms.rollout import Rollout
from hybrid.nets import QNetwork


def apex_epsilon(worker_id: int, workers: int, epsilon: float, alpha: float) -> float:
    """Ape-X's per-actor exploration: ε_i = ε^(1 + α·i/(N−1))."""
    if workers <= 1:
        return epsilon
    return float(epsilon ** (1.0 + alpha * worker_id / (workers - 1)))


def _bootstrap_values(model: QNetwork, batch: Rollout, gamma: float) -> tuple[np.ndarray, ...]:
    """Rewards with time-limit bootstraps folded in, continuation flags and max_a Q⁻(last obs)."""
    rewards = batch.rewards.numpy().copy()
    if batch.final_obs:
        finals = torch.stack(list(batch.final_obs.values()))
        values = model.target_q(finals).max(-1).values.numpy()
        for (t, i), value in zip(batch.final_obs, values, strict=True):
            rewards[t, i] += gamma * value
    not_done = (~(batch.terminated | batch.truncated)).numpy().astype(np.float32)
    last = model.target_q(batch.last_obs).max(-1).values.numpy()
    return rewards, not_done, last


@torch.no_grad()
def nstep_targets(model: QNetwork, batch: Rollout, gamma: float) -> torch.Tensor:
    """R_t = r_t + γ r_{t+1} + … + γ^k max_a Q⁻(s_{t+k}, a), cut at episode ends; [T, E]."""
    rewards, not_done, running = _bootstrap_values(model, batch, gamma)
    targets = np.zeros_like(rewards)
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * not_done[t] * running
        targets[t] = running
    return torch.from_numpy(targets)


def nstep_q_loss(
    model: QNetwork, batch: Rollout, gamma: float = 0.99
) -> tuple[torch.Tensor, dict[str, float]]:
    """The A3C paper's asynchronous n-step Q loss over one worker's rollout."""
    T, E = batch.rewards.shape
    targets = nstep_targets(model, batch, gamma).reshape(-1)
    q = model(batch.obs.reshape(T * E, -1))
    q_taken = q.gather(-1, batch.actions.reshape(-1, 1).long()).squeeze(-1)
    loss = 0.5 * (targets - q_taken).pow(2).mean()
    return loss, {"losses/q": float(loss.detach()), "losses/q_mean": float(q_taken.detach().mean())}


@torch.no_grad()
def nstep_transitions(
    model: QNetwork, batch: Rollout, gamma: float, n: int
) -> dict[str, np.ndarray]:
    """Ape-X actor output: n-step transitions of a rollout and their initial priorities.

    Each transition's ``reward`` is the discounted sum of up to n rewards and
    ``discount`` is γ^k (0 after a termination) for the k steps actually taken, so the
    learner's target is ``reward + discount · max_a Q⁻(next_obs)``. A window that
    reaches the rollout's end bootstraps from the last observation.
    """
    rewards, not_done, _ = _bootstrap_values(model, batch, gamma)
    T, E = rewards.shape
    obs = batch.obs.numpy()
    next_obs_all = np.concatenate([obs[1:], batch.last_obs.numpy()[None]], axis=0)
    ret = np.zeros((T, E), dtype=np.float32)
    disc = np.ones((T, E), dtype=np.float32)
    alive = np.ones((T, E), dtype=np.float32)
    boot_index = np.zeros((T, E), dtype=np.int64)
    for k in range(n):
        for t in range(T):
            step = t + k
            if step >= T:
                continue
            active = alive[t] > 0
            ret[t] += np.where(active, disc[t] * rewards[step], 0.0)
            disc[t] = np.where(active, disc[t] * gamma * not_done[step], disc[t])
            boot_index[t] = np.where(active, step, boot_index[t])
            alive[t] = np.where(active, not_done[step], 0.0)
    env_index = np.broadcast_to(np.arange(E), (T, E))
    next_obs = next_obs_all[boot_index, env_index]
    actions = batch.actions.numpy()

    flat_obs = torch.from_numpy(obs.reshape(T * E, -1))
    flat_next = torch.from_numpy(next_obs.reshape(T * E, -1))
    q_taken = model(flat_obs).gather(-1, torch.from_numpy(actions.reshape(-1, 1))).squeeze(-1)
    target = (
        torch.from_numpy(ret.reshape(-1))
        + torch.from_numpy(disc.reshape(-1)) * model.target_q(flat_next).max(-1).values
    )
    return {
        "obs": obs.reshape(T * E, -1),
        "action": actions.reshape(-1),
        "reward": ret.reshape(-1),
        "next_obs": next_obs.reshape(T * E, -1),
        "discount": disc.reshape(-1),
        "priority": (target - q_taken).abs().numpy(),
    }


def q_replay_loss(
    model: QNetwork, batch: dict[str, np.ndarray], weights: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted double-Q TD loss of a replay minibatch; also the |TD errors|.

    The minibatch comes from the replay (numpy, CPU) and goes to the model's device."""
    device = next(model.parameters()).device

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(device)

    obs = tensor(batch["obs"]).float()
    next_obs = tensor(batch["next_obs"]).float()
    actions = tensor(batch["action"]).long().unsqueeze(-1)
    with torch.no_grad():
        best = model(next_obs).argmax(-1, keepdim=True)  # double Q: choose online, value target
        next_q = model.target_q(next_obs).gather(-1, best).squeeze(-1)
        target = tensor(batch["reward"]) + tensor(batch["discount"]) * next_q
    q_taken = model(obs).gather(-1, actions).squeeze(-1)
    td = target - q_taken
    loss = (tensor(weights).float() * 0.5 * td.pow(2)).mean()
    return loss, td.detach().abs()
