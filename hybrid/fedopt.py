"""FedAdam, FedYogi and FedAdagrad: the server optimizers of Reddi et al. 2021, Algorithm 2.

"Adaptive Federated Optimization" (ICLR 2021) treats the round's mean client change
Δ_t as a pseudo-gradient and steps the server model x with, for every coordinate:

    m_t = β1·m_{t−1} + (1 − β1)·Δ_t                                   m_{−1} = 0
    FedAdagrad: v_t = v_{t−1} + Δ_t²
    FedYogi:    v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)
    FedAdam:    v_t = β2·v_{t−1} + (1 − β2)·Δ_t²                        v_{−1} = τ²
    x_{t+1} = x_t + η·m_t / (√v_t + τ)

with no bias correction (paper defaults β1 = 0.9, β2 = 0.99). This is not torch's
Adam: that one corrects m and v for their zero start and adds ε outside √v̂ from
v₀ = 0, so its first steps are several times larger and the paper's η/τ grids do
not carry over.

The paper's Δ_t is x_i − x_t, a direction to ascend; hybrid's payload is
θ_global − θ_local = −Δ_t, a direction to descend like a gradient. m flips sign
with it and v does not (it sees only Δ²), so the step here is x ← x − η·m/(√v + τ).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

FEDOPT_RULES = {"fedadam": "adam", "fedyogi": "yogi", "fedadagrad": "adagrad"}
"""``--optimizer`` name -> the second-moment rule it uses."""


def initial_fedopt_state(param: torch.Tensor, tau: float) -> dict[str, torch.Tensor]:
    """m_{−1} = 0 and v_{−1} = τ² (named like torch Adam's buffers)."""
    return {
        "exp_avg": torch.zeros_like(param),
        "exp_avg_sq": torch.full_like(param, tau * tau),
    }


def fedopt_step(
    param: torch.Tensor,
    direction: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    rule: str,
    lr: float,
    beta1: float,
    beta2: float,
    tau: float,
) -> None:
    """One round of Algorithm 2 on ``param``, in place (``direction`` = −Δ_t, to descend).

    ``exp_avg`` (m) and ``exp_avg_sq`` (v) are updated in place too, so statistics in
    shared memory stay shared.
    """
    exp_avg.mul_(beta1).add_(direction, alpha=1.0 - beta1)
    squared = direction * direction
    if rule == "adam":
        exp_avg_sq.mul_(beta2).add_(squared, alpha=1.0 - beta2)
    elif rule == "yogi":
        # v moves toward Δ² by (1 − β2)·Δ², never by a fraction of v: Yogi's additive update.
        exp_avg_sq.addcmul_(squared, torch.sign(exp_avg_sq - squared), value=-(1.0 - beta2))
    elif rule == "adagrad":
        exp_avg_sq.add_(squared)
    else:
        raise ValueError(f"fedopt rule: unknown {rule!r}; choose one of adam, yogi, adagrad")
    param.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(tau), value=-lr)


class FedOpt(torch.optim.Optimizer):
    """Algorithm 2 as a torch optimizer: ``param.grad`` holds the descent direction −Δ_t.

    Hyper-parameters live in the parameter groups (``lr`` is what a schedule sets)
    and the state is two tensors per parameter, so checkpoints, learning-rate
    schedules and Hogwild!'s shared statistics treat it as any torch optimizer.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        rule: str,
        lr: float,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
    ) -> None:
        if rule not in FEDOPT_RULES.values():
            raise ValueError(f"fedopt rule: unknown {rule!r}; choose one of adam, yogi, adagrad")
        defaults = {"lr": lr, "rule": rule, "beta1": beta1, "beta2": beta2, "tau": tau}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state.update(initial_fedopt_state(param, group["tau"]))
                fedopt_step(
                    param,
                    param.grad,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    group["rule"],
                    group["lr"],
                    group["beta1"],
                    group["beta2"],
                    group["tau"],
                )
        return loss
