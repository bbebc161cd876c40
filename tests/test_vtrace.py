"""V-trace: on-policy reduction, a hand-computed rollout, shapes and argument checks."""

from __future__ import annotations

import math

import pytest
import torch

from hybrid.algorithms.vtrace import VTraceReturns, nstep_returns, vtrace

GAMMA = 0.9


def _hand_example() -> dict[str, torch.Tensor]:
    """Three steps, one environment (B = 1), a termination at t = 1.

    pi/mu ratios are 0.5, 2.0, 1.25 (one below 1, two above); with rho_bar = 1.5, c_bar = 1.0
    the ratio 2.0 is truncated differently for rho and c, and 1.25 only for c.
    """
    mu = torch.tensor([0.6, 0.3, 0.4], dtype=torch.float64)
    pi = torch.tensor([0.3, 0.6, 0.5], dtype=torch.float64)  # pi/mu = 0.5, 2.0, 1.25
    terminated = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    return {
        "behaviour_logp": mu.log().unsqueeze(1),
        "target_logp": pi.log().unsqueeze(1),
        "rewards": torch.tensor([[1.0], [2.0], [0.5]], dtype=torch.float64),
        "values": torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64),
        "bootstrap_value": torch.tensor([4.0], dtype=torch.float64),
        "discounts": (GAMMA * (1.0 - terminated)).unsqueeze(1),  # 0.9, 0.0, 0.9
    }


def test_on_policy_vtrace_equals_nstep_returns() -> None:
    gen = torch.Generator().manual_seed(0)
    T, B = 7, 5
    logp = -torch.rand(T, B, generator=gen, dtype=torch.float64) * 3
    rewards = torch.randn(T, B, generator=gen, dtype=torch.float64)
    values = torch.randn(T, B, generator=gen, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=gen, dtype=torch.float64)
    terminated = (torch.rand(T, B, generator=gen) < 0.2).to(torch.float64)
    assert terminated.sum() > 0, "the test needs some episode ends"
    discounts = 0.97 * (1.0 - terminated)

    out = vtrace(logp, logp, rewards, values, bootstrap, discounts, rho_bar=1.0, c_bar=1.0)
    expected = nstep_returns(rewards, values, bootstrap, discounts)
    torch.testing.assert_close(out.vs, expected)
    torch.testing.assert_close(out.clipped_rhos, torch.ones(T, B, dtype=torch.float64))


def test_nstep_returns_by_hand() -> None:
    ex = _hand_example()
    # G_2 = 0.5 + 0.9 * 4.0 = 4.1;  G_1 = 2.0 (terminal);  G_0 = 1.0 + 0.9 * 2.0 = 2.8
    expected = torch.tensor([[2.8], [2.0], [4.1]], dtype=torch.float64)
    got = nstep_returns(ex["rewards"], ex["values"], ex["bootstrap_value"], ex["discounts"])
    torch.testing.assert_close(got, expected)


def test_vtrace_hand_computed_targets() -> None:
    out = vtrace(**_hand_example(), rho_bar=1.5, c_bar=1.0)
    # clipped rho = min(1.5, ratio) = [0.5, 1.5, 1.25];  c = min(1.0, ratio) = [0.5, 1.0, 1.0]
    # V(x_{t+1}) = [1.0, 2.0, 4.0 (bootstrap)]
    # delta_0 = 0.5  * (1.0 + 0.9 * 1.0 - 0.5) = 0.5  * 1.4 = 0.7
    # delta_1 = 1.5  * (2.0 + 0.0 * 2.0 - 1.0) = 1.5  * 1.0 = 1.5
    # delta_2 = 1.25 * (0.5 + 0.9 * 4.0 - 2.0) = 1.25 * 2.1 = 2.625
    # backwards, a_t = v_t - V(x_t) = delta_t + discount_t * c_t * a_{t+1}:
    # a_2 = 2.625                            -> v_2 = 2.0 + 2.625 = 4.625
    # a_1 = 1.5 + 0.0 * 1.0 * 2.625 = 1.5    -> v_1 = 1.0 + 1.5   = 2.5  (trace cut at terminal)
    # a_0 = 0.7 + 0.9 * 0.5 * 1.5 = 1.375    -> v_0 = 0.5 + 1.375 = 1.875
    expected_vs = torch.tensor([[1.875], [2.5], [4.625]], dtype=torch.float64)
    torch.testing.assert_close(out.vs, expected_vs)
    torch.testing.assert_close(
        out.clipped_rhos, torch.tensor([[0.5], [1.5], [1.25]], dtype=torch.float64)
    )


def test_vtrace_hand_computed_pg_advantages() -> None:
    out = vtrace(**_hand_example(), rho_bar=1.5, c_bar=1.0)
    # A_t = rho_t * (r_t + discount_t * v_{t+1} - V(x_t)), v_3 = bootstrap = 4.0
    # A_0 = 0.5  * (1.0 + 0.9 * 2.5 - 0.5) = 0.5  * 2.75 = 1.375
    # A_1 = 1.5  * (2.0 + 0.0 * 4.625 - 1.0) = 1.5
    # A_2 = 1.25 * (0.5 + 0.9 * 4.0 - 2.0) = 1.25 * 2.1 = 2.625
    expected = torch.tensor([[1.375], [1.5], [2.625]], dtype=torch.float64)
    torch.testing.assert_close(out.pg_advantages, expected)


def test_vtrace_lambda_scales_traces() -> None:
    out = vtrace(**_hand_example(), rho_bar=1.5, c_bar=1.0, lam=0.5)
    # Only a_0 looks past its own step: c_0 = 0.5 * 0.5 = 0.25,
    # a_0 = 0.7 + 0.9 * 0.25 * 1.5 = 1.0375 -> v_0 = 1.5375; v_1, v_2 unchanged.
    expected_vs = torch.tensor([[1.5375], [2.5], [4.625]], dtype=torch.float64)
    torch.testing.assert_close(out.vs, expected_vs)


def test_shapes_with_several_envs() -> None:
    T, B = 4, 3
    zeros = torch.zeros(T, B)
    out = vtrace(zeros, zeros, torch.ones(T, B), zeros, torch.zeros(B), torch.full((T, B), 0.5))
    assert isinstance(out, VTraceReturns)
    for name, tensor in out._asdict().items():
        assert tensor.shape == (T, B), name
    # Independent envs: every column sees the same data, so every column gets the same target.
    # G_3 = 1, G_2 = 1.5, G_1 = 1.75, G_0 = 1.875
    torch.testing.assert_close(
        out.vs, torch.tensor([1.875, 1.75, 1.5, 1.0]).unsqueeze(1).expand(T, B)
    )
    assert nstep_returns(torch.ones(T, B), zeros, torch.zeros(B), zeros).shape == (T, B)


def test_gradients_do_not_flow() -> None:
    ex = _hand_example()
    ex["values"].requires_grad_(True)
    out = vtrace(**ex)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"c_bar": 0.0}, "c_bar"),
        ({"rho_bar": 0.5, "c_bar": 1.0}, "rho_bar"),
        ({"lam": 1.5}, "lam"),
        ({"lam": -0.1}, "lam"),
    ],
)
def test_bad_hyperparameters(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        vtrace(**_hand_example(), **kwargs)


def test_bad_shapes() -> None:
    ex = _hand_example()
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace(**{**ex, "bootstrap_value": torch.zeros(2)})
    with pytest.raises(ValueError, match="target_logp"):
        vtrace(**{**ex, "target_logp": torch.zeros(3)})
    with pytest.raises(ValueError, match="rewards"):
        nstep_returns(torch.zeros(3), torch.zeros(3), torch.zeros(()), torch.zeros(3))


def test_large_ratios_are_finite() -> None:
    # A target far more likely than the behaviour policy is clipped, never propagated raw.
    ex = _hand_example()
    ex["target_logp"] = ex["behaviour_logp"] + 50.0
    out = vtrace(**ex)
    assert torch.isfinite(out.vs).all()
    assert out.clipped_rhos.max().item() == pytest.approx(1.0)
    assert math.isfinite(out.pg_advantages.sum().item())


def test_lambda_zero_is_the_one_step_target_by_hand() -> None:
    """λ = 0 cuts every trace: v_s = V(x_s) + ρ̄_s (r_s + γ_s V(x_{s+1}) − V(x_s)).

    With ρ = 0.5, min(2.0, 1.5) = 1.5, 1.25 and the hand example's numbers:
    v_0 = 0.5 + 0.5 · (1 + 0.9 · 1 − 0.5) = 1.2
    v_1 = 1.0 + 1.5 · (2 + 0 − 1) = 2.5                 (terminated: no bootstrap)
    v_2 = 2.0 + 1.25 · (0.5 + 0.9 · 4 − 2) = 4.625
    and the advantages bootstrap from those targets:
    A_0 = 0.5 · (1 + 0.9 · 2.5 − 0.5) = 1.375, A_1 = 1.5, A_2 = 1.25 · 2.1 = 2.625.
    """
    out = vtrace(**_hand_example(), rho_bar=1.5, c_bar=1.0, lam=0.0)
    torch.testing.assert_close(out.vs, torch.tensor([[1.2], [2.5], [4.625]], dtype=torch.float64))
    torch.testing.assert_close(
        out.pg_advantages, torch.tensor([[1.375], [1.5], [2.625]], dtype=torch.float64)
    )


@pytest.mark.parametrize("shape", [(3,), (3, 2), (1, 1), (3, 1, 1)], ids=str)
def test_a_misshaped_behaviour_logp_is_one_line_error(shape: tuple[int, ...]) -> None:
    """(3,) and (1, 1) would broadcast against [T, B] = (3, 1) and give wrong ratios silently."""
    ex = _hand_example()
    with pytest.raises(ValueError) as err:
        vtrace(**{**ex, "behaviour_logp": torch.zeros(shape, dtype=torch.float64)})
    message = str(err.value)
    assert message.startswith("behaviour_logp must have the shape of rewards (3, 1)")
    assert f"got {shape}" in message and "\n" not in message


@pytest.mark.parametrize("name", ["values", "discounts", "target_logp"])
def test_every_misshaped_per_step_input_is_named_with_both_shapes(name: str) -> None:
    """values and discounts are checked like the log-probs: a [T] tensor against [T, B] = (3, 1)
    would broadcast to [3, 3] and mix the environments."""
    ex = _hand_example()
    with pytest.raises(ValueError) as err:
        vtrace(**{**ex, name: torch.zeros(3, dtype=torch.float64)})
    assert str(err.value) == f"{name} must have the shape of rewards (3, 1), got (3,)"
    if name != "target_logp":  # nstep_returns takes values and discounts too
        args = {k: ex[k] for k in ("rewards", "values", "bootstrap_value", "discounts")}
        with pytest.raises(ValueError, match=rf"^{name} must have the shape of rewards \(3, 1\)"):
            nstep_returns(**{**args, name: torch.zeros(3, 2, dtype=torch.float64)})


def test_shape_errors_quote_the_expected_and_the_given_shapes() -> None:
    ex = _hand_example()
    with pytest.raises(ValueError) as err:
        vtrace(**{**ex, "bootstrap_value": torch.zeros(2, dtype=torch.float64)})
    assert str(err.value) == "bootstrap_value must have shape [B] = (1,), got (2,)"
    with pytest.raises(ValueError) as err:
        nstep_returns(torch.zeros(3), torch.zeros(3), torch.zeros(()), torch.zeros(3))
    assert str(err.value) == "rewards must be time-major [T, B], got shape (3,)"
    with pytest.raises(ValueError, match=r"^rewards must be time-major \[T, B\], got shape"):
        nstep_returns(*(torch.zeros(2, 3, 1),) * 2, torch.zeros(3, 1), torch.zeros(2, 3, 1))
