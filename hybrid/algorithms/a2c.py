"""Advantage actor-critic (A2C; A3C when its gradients are applied asynchronously)."""

from __future__ import annotations

import numpy as np
import torch

from hybrid.algorithms.rollout import Rollout
from hybrid.algorithms.vtrace import nstep_returns, vtrace
from hybrid.nets import ActorCritic, batched_tanh_mlp, tanh_mlp


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


def a2c_group_gradients(
    model: ActorCritic,
    rollouts: list[Rollout],
    gamma: float = 0.99,
    gae_lambda: float = 1.0,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    normalize_advantages: bool = False,
    stacked: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """``a2c_loss``'s gradient for each of several workers' rollouts, all taken at the
    parameters ``model`` holds, in one forward and one backward pass instead of one pair
    per worker (whose fixed cost dominates on small networks). Returns the flat gradients
    [W, numel] (in ``model.parameters()`` order) and each worker's loss statistics.
    ``stacked`` [W, numel]: each worker's own flat parameters instead (federated clients
    after their first local step); ``model`` then gives only the network's shape.

    Each worker gets its own copy of the parameters, stacked on a leading axis, and its
    rows of the batch go through its copy (batched matrix products); the sum of the
    workers' losses then has worker w's gradient in copy w's rows. Equal to ``a2c_loss``'s
    gradients up to float rounding (a batched product rounds differently from W small
    ones). A discrete-action tanh-MLP actor-critic only (``ActorCritic.groups_acting``).
    """
    W = len(rollouts)
    T, E = rollouts[0].rewards.shape
    x = torch.stack(
        [torch.cat([r.obs.reshape(T * E, -1), r.last_obs.reshape(E, -1)]) for r in rollouts]
    ).float()  # [W, T*E + E, obs_dim]: each worker's batch and the observation after it
    actions = torch.stack([r.actions.reshape(T * E) for r in rollouts]).long()

    copies = _parameter_copies(model, W, stacked)
    critic_layers, actor_layers = model.plain_layers()
    # One critic pass, differentiable; the advantages use its values.
    all_values = batched_tanh_mlp(
        [(copies[id(w)], copies[id(b)]) for w, b in critic_layers], x
    ).squeeze(-1)
    values = all_values[:, : T * E]  # [W, T*E]

    with torch.no_grad():
        v = all_values.detach().numpy()  # [W, T*E + E]
        rewards = np.stack([r.rewards.numpy() for r in rollouts])  # a copy: [W, T, E]
        finals = [
            (w, t, i, obs) for w, r in enumerate(rollouts) for (t, i), obs in r.final_obs.items()
        ]
        if finals:  # a time limit is not a terminal state: bootstrap from the state it cut off
            if stacked is None:
                cut = model.value(torch.stack([obs for *_, obs in finals])).numpy()
            else:  # each with its worker's own critic
                cut = np.array(
                    [
                        float(
                            tanh_mlp(
                                [(copies[id(wt)][w], copies[id(b)][w]) for wt, b in critic_layers],
                                obs.unsqueeze(0),
                            )[0, 0]
                        )
                        for w, _, _, obs in finals
                    ]
                )
            for (w, t, i, _), value in zip(finals, cut, strict=True):
                rewards[w, t, i] += gamma * float(value)
        done = np.stack([(r.terminated | r.truncated).numpy() for r in rollouts])
        not_done = (~done).astype(np.float32)

        def time_major(a: np.ndarray) -> np.ndarray:  # [W, T, E] -> [T, W*E]: gae's columns
            return a.transpose(1, 0, 2).reshape(T, W * E)

        adv = gae(
            time_major(rewards),
            time_major(v[:, : T * E].reshape(W, T, E)),
            time_major(v[:, E:].reshape(W, T, E)),
            time_major(not_done),
            gamma,
            gae_lambda,
        )
        advantages = torch.from_numpy(adv.reshape(T, W, E).transpose(1, 0, 2).reshape(W, T * E))
        returns = advantages + values.detach()
        if normalize_advantages and T * E > 1:
            advantages = (advantages - advantages.mean(1, keepdim=True)) / (
                advantages.std(1, keepdim=True) + 1e-8
            )

    actor_out = batched_tanh_mlp(
        [(copies[id(w)], copies[id(b)]) for w, b in actor_layers], x[:, : T * E]
    )
    logits = torch.log_softmax(actor_out, -1)
    logp = logits.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logits.exp() * logits).sum(-1).mean(1)
    policy_loss = -(advantages * logp).mean(1)
    value_loss = 0.5 * (returns - values).pow(2).mean(1)
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy  # [W]: each worker's loss
    total.sum().backward()
    flat = torch.cat([copies[id(p)].grad.reshape(W, -1) for p in model.parameters()], dim=1)
    by_worker = torch.stack([policy_loss, value_loss, entropy], 1).detach().tolist()
    stats = [
        {"losses/policy": policy, "losses/value": value, "losses/entropy": entropy}
        for policy, value, entropy in by_worker
    ]
    return flat, stats


def _parameter_copies(
    model: ActorCritic, W: int, stacked: torch.Tensor | None
) -> dict[int, torch.Tensor]:
    """One copy of each of ``model``'s parameters per worker, [W, *shape], keyed by the
    parameter's id: the leaves of a grouped backward pass. Without ``stacked``, every
    parameter broadcast (``expand``: no memory copied); with it, worker w's own values."""
    if stacked is None:
        return {id(p): p.detach().expand(W, *p.shape).requires_grad_() for p in model.parameters()}
    copies, offset = {}, 0
    for p in model.parameters():
        part = stacked[:, offset : offset + p.numel()].reshape(W, *p.shape)
        copies[id(p)] = part.detach().clone().requires_grad_()
        offset += p.numel()
    return copies
