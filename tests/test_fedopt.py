"""FedAdam, FedYogi and FedAdagrad as Reddi et al. 2021 (Algorithm 2) write them.

The reference below is written from the paper's equations in numpy, in the paper's
sign convention (Δ = x_client − x, a direction to ascend), independently of
``hybrid.fedopt``; the server model is then stepped through ``GlobalModel.apply`` with
hybrid's payload −Δ.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from conftest import crash_copy, metric_rows

import hybrid
from hybrid.checkpoint import list_checkpoints, load
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.global_model import GlobalModel, Step

RULES = ("fedadam", "fedyogi", "fedadagrad")


def reference_fedopt(
    x0: np.ndarray,
    deltas: list[np.ndarray],
    rule: str,
    etas: list[float],
    beta1: float,
    beta2: float,
    tau: float,
) -> list[np.ndarray]:
    """Algorithm 2 of Reddi et al. 2021, float64: the server model after each round."""
    x = x0.astype(np.float64)
    m = np.zeros_like(x)  # m_{-1} = 0
    v = np.full_like(x, tau**2)  # v_{-1} = tau^2
    models = []
    for delta, eta in zip(deltas, etas, strict=True):
        m = beta1 * m + (1 - beta1) * delta
        if rule == "fedadagrad":
            v = v + delta**2
        elif rule == "fedyogi":
            v = v - (1 - beta2) * delta**2 * np.sign(v - delta**2)
        else:
            v = beta2 * v + (1 - beta2) * delta**2
        x = x + eta * m / (np.sqrt(v) + tau)  # no bias correction
        models.append(x.copy())
    return models


def _random_deltas(rounds: int, size: int, seed: int) -> list[np.ndarray]:
    """Client changes spanning 1e-4..1e-1 in size, so that Yogi's sign(v − Δ²) takes both
    values and |Δ| falls on both sides of τ."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(size) * 10.0 ** rng.uniform(-4, -1, size) for _ in range(rounds)]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize(
    ("beta1", "beta2", "tau"), [(0.9, 0.99, 1e-2), (0.5, 0.9, 1e-3)], ids=["paper", "other"]
)
def test_rounds_match_the_papers_equations(rule, beta1, beta2, tau):
    """Five rounds on random Δs, with a linear learning-rate schedule and a max_grad_norm
    the model difference must not be clipped by."""
    rounds, eta = 5, 0.03
    x0 = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    deltas = [d.astype(np.float32) for d in _random_deltas(rounds, 64, seed=2)]
    progress = [r / rounds for r in range(rounds)]
    model = GlobalModel(
        torch.from_numpy(x0),
        optimizer=rule,
        lr=eta,
        adam_eps=tau,
        server_beta1=beta1,
        server_beta2=beta2,
        max_grad_norm=1e-3,
        lr_schedule="linear",
    )
    expected = reference_fedopt(
        x0, deltas, rule, [eta * (1 - p) for p in progress], beta1, beta2, tau
    )
    if rule == "fedyogi":  # both branches of sign(v − Δ²) are exercised
        v = np.full(64, tau**2)
        signs = np.sign(v - deltas[0] ** 2)
        assert (signs > 0).any() and (signs < 0).any()
    for delta, p, want in zip(deltas, progress, expected, strict=True):
        model.apply(Step(torch.from_numpy(-delta), clip=False), progress=p)  # hybrid sends −Δ
        np.testing.assert_allclose(model.params.numpy(), want, rtol=1e-6, atol=1e-7)
    assert model.version == rounds


def _first_step(optimizer: str, delta: float, eta: float, tau: float) -> float:
    model = GlobalModel(torch.zeros(1), optimizer=optimizer, lr=eta, adam_eps=tau)
    model.apply(Step(torch.tensor([-delta]), clip=False))
    return float(model.params[0])


@pytest.mark.parametrize("delta", [0.002, 0.01, 0.05])
def test_the_first_fedadam_step_is_the_papers_not_torch_adams(delta):
    """Round 0: m = (1 − β1)Δ, v = β2τ² + (1 − β2)Δ², so the step is
    η(1 − β1)|Δ| / (√(β2τ² + (1 − β2)Δ²) + τ). torch's bias-corrected Adam steps ≈ η,
    several times more (the issue: 5–13x at η = 0.03, τ = 0.01)."""
    eta, tau, beta1, beta2 = 0.03, 0.01, 0.9, 0.99
    paper = eta * (1 - beta1) * delta / (np.sqrt(beta2 * tau**2 + (1 - beta2) * delta**2) + tau)
    assert _first_step("fedadam", delta, eta, tau) == pytest.approx(paper, rel=1e-6)
    torch_adam = _first_step("adam", delta, eta, tau)
    assert torch_adam == pytest.approx(eta * delta / (delta + tau), rel=1e-5)
    assert torch_adam > 2.5 * paper


def test_first_steps_of_yogi_and_adagrad():
    eta, tau, delta = 0.1, 1e-3, 0.02  # Δ² > τ²: Yogi's v grows by (1 − β2)Δ²
    yogi_v = tau**2 + 0.01 * delta**2
    adagrad_v = tau**2 + delta**2
    assert _first_step("fedyogi", delta, eta, tau) == pytest.approx(
        eta * 0.1 * delta / (np.sqrt(yogi_v) + tau), rel=1e-6
    )
    assert _first_step("fedadagrad", delta, eta, tau) == pytest.approx(
        eta * 0.1 * delta / (np.sqrt(adagrad_v) + tau), rel=1e-6
    )


@pytest.mark.parametrize("rule", RULES)
def test_shared_statistics_and_state_dict_continue_exactly(rule):
    """Hogwild!'s shared statistics start where the optimizer's own would (v = τ²), and a
    model loaded from a state_dict takes the same next step to the bit."""
    x0 = torch.randn(32, generator=torch.Generator().manual_seed(0))
    deltas = [torch.from_numpy(d.astype(np.float32)) for d in _random_deltas(4, 32, seed=3)]

    def build() -> GlobalModel:
        return GlobalModel(x0, optimizer=rule, lr=0.05, adam_eps=1e-3, server_beta2=0.95)

    plain, shared = build(), build()
    stats = shared.share_memory()
    torch.testing.assert_close(stats["exp_avg_sq"], torch.full_like(x0, 1e-6))
    torch.testing.assert_close(stats["exp_avg"], torch.zeros_like(x0))
    for d in deltas[:2]:
        plain.apply(Step(d, clip=False))
        shared.apply(Step(d, clip=False))
    assert torch.equal(plain.params, shared.params)
    assert shared.optimizer.state[shared.param]["exp_avg_sq"] is stats["exp_avg_sq"]

    saved = io.BytesIO()
    torch.save(plain.state_dict(), saved)  # through bytes, as a checkpoint goes
    restored, restored_shared = build(), build()
    restored_shared.share_memory()
    for model in (restored, restored_shared):
        saved.seek(0)
        model.load_state_dict(torch.load(saved, weights_only=True))
    assert restored.optimizer.param_groups[0]["beta2"] == 0.95
    for d in deltas[2:]:
        for model in (plain, restored, restored_shared):
            model.apply(Step(d, clip=False))
    assert torch.equal(restored.params, plain.params)
    assert torch.equal(restored_shared.params, plain.params)


def test_a_fedavg_run_with_fedadam_resumes_bit_exactly(tiny_config, tmp_path):
    cfg = tiny_config(
        scheduler="fedavg",
        clients=6,
        client_fraction=0.5,
        local_steps=2,
        optimizer="fedadam",
        lr=0.03,
        adam_eps=1e-3,
        total_env_steps=1_500,
        checkpoint_every=3,
        keep_checkpoints=100,
        stop_when_solved=False,
        eval_every=600,
        client_eval_clients=2,
    )
    full = hybrid.train(cfg)
    assert full.summary["rounds"] >= 6
    state = load(list_checkpoints(full.run_dir)[-1])
    group = state["global_model"]["optimizer"]["param_groups"][0]
    assert (group["rule"], group["beta1"], group["beta2"], group["tau"]) == (
        "adam",
        0.9,
        0.99,
        1e-3,
    )
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"server_beta1": 1.0}, "server_beta1"),
        ({"server_beta1": -0.1}, "server_beta1"),
        ({"server_beta2": 1.5}, "server_beta2"),
        ({"server_beta2": float("nan")}, "server_beta2"),
        ({"optimizer": "fedlion"}, "optimizer"),
    ],
)
def test_bad_server_settings_are_one_clear_error(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=10, optimizer="fedyogi").replace(**changes)
    with pytest.raises(ConfigError, match=f"^{field}: ") as info:
        cfg.validate()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("rule", RULES)
def test_fedopt_defaults_are_the_papers(rule):
    """FedOpt(...) without β1, β2, τ steps as Algorithm 2 with the documented defaults
    β1 = 0.9, β2 = 0.99, τ = 1e-3, over rounds whose |Δ| falls on both sides of τ."""
    from hybrid.fedopt import FEDOPT_RULES, FedOpt

    x0 = np.random.default_rng(3).standard_normal(32)
    deltas = _random_deltas(4, 32, seed=4)
    param = torch.tensor(x0, dtype=torch.float64)
    optimizer = FedOpt([param], FEDOPT_RULES[rule], lr=0.05)
    expected = reference_fedopt(x0, deltas, rule, [0.05] * 4, beta1=0.9, beta2=0.99, tau=1e-3)
    for delta, want in zip(deltas, expected, strict=True):
        param.grad = torch.tensor(-delta)  # hybrid descends along −Δ
        optimizer.step()
        np.testing.assert_allclose(param.numpy(), want, rtol=1e-10, atol=1e-12)


def test_the_server_betas_default_to_the_papers():
    """--server-beta1 and --server-beta2 default to the paper's 0.9 and 0.99 (the docs say
    so), and reach a fedadam server optimizer built from a default config."""
    from hybrid.assembly import server_settings
    from hybrid.core.global_model import build_global_model

    cfg = TrainConfig(optimizer="fedadam", scheduler="fedavg")
    model = build_global_model(server_settings(cfg), torch.zeros(4))
    group = model.optimizer.param_groups[0]
    assert (group["beta1"], group["beta2"], group["tau"]) == (0.9, 0.99, cfg.adam_eps)


def test_an_eps_that_float32_rounds_to_zero_is_refused():
    # --adam-eps 1e-79 rounded to 0 in float32: with --max-grad-norm 1e-79 every step was 0/0
    for eps in (1e-79, 1e-39, 0.9 * np.finfo(np.float32).tiny):
        with pytest.raises(ConfigError, match=r"^adam_eps: .* below float32's smallest normal"):
            TrainConfig(adam_eps=float(eps)).validate()
    TrainConfig(adam_eps=float(np.finfo(np.float32).tiny)).validate()  # the bound itself runs


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop", "fedadam"])
def test_the_smallest_eps_keeps_zero_steps_finite(optimizer):
    """At eps = float32's tiny a zero direction (every gradient clipped to nothing) is a
    zero step, not 0/0."""
    tiny = float(np.finfo(np.float32).tiny)
    model = GlobalModel(torch.ones(3), optimizer=optimizer, lr=0.1, adam_eps=tiny)
    for _ in range(3):
        model.apply(Step(torch.zeros(3), clip=False))
    assert torch.equal(model.params, torch.ones(3))


def test_an_unknown_rule_is_one_clear_error_from_the_optimizer_and_the_step():
    """FedOpt refuses it when built; fedopt_step, which GlobalModel's shared statistics could
    reach without the optimizer's check, refuses it too rather than skipping v's update."""
    from hybrid.fedopt import FedOpt, fedopt_step

    message = "fedopt rule: unknown 'lion'; choose one of adam, yogi, adagrad"
    with pytest.raises(ValueError) as info:
        FedOpt([torch.zeros(2, requires_grad=True)], "lion", lr=0.1)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        FedOpt([torch.zeros(2, requires_grad=True)], "fedadam", lr=0.1)  # the CLI name
    assert "'fedadam'" in str(info.value)
    param = torch.ones(2)
    with pytest.raises(ValueError) as info:
        fedopt_step(
            param, torch.ones(2), torch.zeros(2), torch.zeros(2), "lion", 0.1, 0.9, 0.99, 1e-3
        )
    assert str(info.value) == message
    assert torch.equal(param, torch.ones(2))  # not stepped


def test_initial_state_is_m_zero_and_v_tau_squared_by_name():
    from hybrid.fedopt import initial_fedopt_state

    state = initial_fedopt_state(torch.full((3,), 5.0, dtype=torch.float64), tau=0.02)
    assert sorted(state) == ["exp_avg", "exp_avg_sq"]  # torch Adam's names: checkpoints load
    assert torch.equal(state["exp_avg"], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(state["exp_avg_sq"], torch.full((3,), 4e-4, dtype=torch.float64))
