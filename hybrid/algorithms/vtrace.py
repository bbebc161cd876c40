"""V-trace off-policy value targets (IMPALA; Espeholt et al. 2018, arXiv:1802.01561).

All tensors are time-major: ``[T, B]`` for per-step quantities and ``[B]`` for the value of the
state after the last step. Episode ends are carried by the per-step ``discounts``:

* termination: ``discounts[t] = gamma * (1 - terminated[t])``, so nothing is bootstrapped and
  the trace stops at the boundary (step ``t + 1`` already belongs to the next episode);
* truncation (time limit): the next state in the rollout is the *reset* state, so its value is
  the wrong bootstrap. The caller folds the right one into the reward and cuts the trace:
  ``rewards[t] += gamma * V(final_obs)`` and ``discounts[t] = 0``. If the rollout simply ends
  mid-episode, ``bootstrap_value`` is ``V(x_T)`` and no folding is needed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class VTraceReturns(NamedTuple):
    vs: torch.Tensor  # [T, B] value targets v_s
    pg_advantages: torch.Tensor  # [T, B] rho_s * (r_s + gamma_s * v_{s+1} - V(x_s))
    clipped_rhos: torch.Tensor  # [T, B] min(rho_bar, pi / mu)


def _check_shapes(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    **others: torch.Tensor,
) -> None:
    """Raise ValueError naming the first argument whose shape does not fit ``rewards``."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be time-major [T, B], got shape {tuple(rewards.shape)}")
    for name, tensor in {"values": values, "discounts": discounts, **others}.items():
        if tensor.shape != rewards.shape:
            raise ValueError(
                f"{name} must have the shape of rewards {tuple(rewards.shape)}, "
                f"got {tuple(tensor.shape)}"
            )
    if bootstrap_value.shape != rewards.shape[1:]:
        raise ValueError(
            f"bootstrap_value must have shape [B] = {tuple(rewards.shape[1:])}, "
            f"got {tuple(bootstrap_value.shape)}"
        )


@torch.no_grad()
def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages for a time-major rollout.

    ``behaviour_logp`` / ``target_logp`` are log mu(a_t|x_t) and log pi(a_t|x_t) of the actions
    taken; ``values`` is V(x_t) under the learner; ``bootstrap_value`` is V(x_T).
    ``lam`` is the paper's lambda (Remark 2), folded into the traces c_i.
    """
    if not c_bar > 0:
        raise ValueError(f"c_bar must be > 0, got {c_bar}")
    if not rho_bar >= c_bar:
        # The paper's fixed point analysis assumes rho_bar >= c_bar.
        raise ValueError(f"rho_bar must be >= c_bar ({c_bar}), got {rho_bar}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    _check_shapes(
        rewards,
        values,
        bootstrap_value,
        discounts,
        behaviour_logp=behaviour_logp,
        target_logp=target_logp,
    )

    # Ratios from log-probs: exp of a difference is stabler than a ratio of probabilities.
    rhos = torch.exp(target_logp - behaviour_logp)
    clipped_rhos = torch.clamp(rhos, max=rho_bar)
    cs = lam * torch.clamp(rhos, max=c_bar)

    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    # v_s - V(x_s) = delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1})), zero past the rollout end.
    vs_minus_v = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap_value)
    for t in reversed(range(rewards.shape[0])):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v

    # The advantage bootstraps from the V-trace target of the next state, not from V(x_{s+1}).
    vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_advantages = clipped_rhos * (rewards + discounts * vs_tp1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages, clipped_rhos=clipped_rhos)


@torch.no_grad()
def nstep_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
) -> torch.Tensor:
    """Discounted returns bootstrapped from ``bootstrap_value``: G_t = r_t + gamma_t G_{t+1}.

    This is V-trace's on-policy case (pi == mu, rho_bar = c_bar = lam = 1), where the values
    telescope away; ``values`` is taken only so both functions share a signature and is checked
    for shape. Same episode-end conventions as ``vtrace``.
    """
    _check_shapes(rewards, values, bootstrap_value, discounts)
    returns = torch.empty_like(rewards)
    acc = bootstrap_value
    for t in reversed(range(rewards.shape[0])):
        acc = rewards[t] + discounts[t] * acc
        returns[t] = acc
    return returns
