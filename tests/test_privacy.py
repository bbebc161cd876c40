"""DP-FedAvg (McMahan et al. 2018) and its accountant (Google's dp-accounting)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import hybrid
from hybrid.config import TrainConfig
from hybrid.errors import ConfigError
from hybrid.privacy import DpFedAvg, PrivacyAccountant, PrivacySettings

dp_accounting = pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
from dp_accounting.rdp import rdp_privacy_accountant  # noqa: E402


def test_epsilon_matches_the_librarys_own_example():
    """dp-accounting's test_compute_rdp_poisson_sampled_gaussian: σ = 2.5, q = 0.01, 50 steps,
    with the RDP values it pins; our accountant at the same σ, q, steps and orders gives the
    ε those values give."""
    orders = [1.5, 2.5, 5, 50, 100]
    pinned_rdp = [6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02, 1.67416308e02]
    delta = 1e-5
    expected, _ = rdp_privacy_accountant.compute_epsilon(orders, np.array(pinned_rdp), delta)
    settings = PrivacySettings(clip=1.0, noise_multiplier=2.5, sampling="poisson", delta=delta)
    accountant = PrivacyAccountant(settings, clients=100, per_round=1, orders=orders)  # q = 0.01
    assert accountant.epsilon_after(50) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_epsilon_is_the_library_composing_the_rounds_itself(sampling):
    settings = PrivacySettings(clip=1.0, noise_multiplier=1.1, sampling=sampling, delta=1e-6)
    ours = PrivacyAccountant(settings, clients=100, per_round=10)
    library = dp_accounting.rdp.RdpAccountant(ours.orders, neighboring_relation=ours.relation)
    library.compose(dp_accounting.SelfComposedDpEvent(ours.event, 30))
    assert ours.epsilon_after(30) == pytest.approx(library.get_epsilon(1e-6), rel=1e-9)
    assert 0 < ours.epsilon_after(1) < ours.epsilon_after(2) < ours.epsilon_after(30)
    assert ours.epsilon_after(0) == 0.0


def test_no_noise_is_no_privacy():
    settings = PrivacySettings(clip=1.0, noise_multiplier=0.0)
    assert PrivacyAccountant(settings, 10, 5).epsilon_after(1) == math.inf


def _mechanism(**changes) -> DpFedAvg:
    settings = PrivacySettings(**({"clip": 1.0} | changes))
    return DpFedAvg(settings, clients=20, per_round=4, generator=torch.Generator().manual_seed(0))


def test_without_noise_the_round_is_the_clipped_sum_over_the_expected_count():
    deltas = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, -2.0]], dtype=torch.float64)
    out = _mechanism().aggregate(deltas)
    clipped_sum = torch.tensor([0.6 + 0.3, 0.8 + 0.4 - 1.0], dtype=torch.float64)
    assert out.tolist() == pytest.approx((clipped_sum / 4).tolist())  # m = 4: fixed denominator


def test_the_noise_has_standard_deviation_sigma_c_over_m():
    d = 200_000
    mechanism = _mechanism(noise_multiplier=2.0, clip=0.5)
    out = mechanism.aggregate(torch.zeros(4, d, dtype=torch.float64))
    assert out.mean().item() == pytest.approx(0.0, abs=0.005)
    assert out.std().item() == pytest.approx(2.0 * 0.5 / 4, rel=0.02)


def test_adaptive_clipping_moves_c_geometrically_towards_the_quantile():
    mechanism = _mechanism(adaptive_quantile=0.5, clip_lr=0.2)  # σ = 0: no count noise
    deltas = torch.tensor([[0.1], [0.2], [0.3], [5.0]], dtype=torch.float64)
    mechanism.aggregate(deltas)  # 3 of 4 (m = 4) under C = 1
    assert mechanism.clip == pytest.approx(math.exp(-0.2 * (0.75 - 0.5)))


def test_adaptive_clipping_charges_the_count_release():
    settings = PrivacySettings(clip=1.0, noise_multiplier=1.0, adaptive_quantile=0.5, count_noise=2)
    # Andrew et al. 2021: σ_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2) keeps the pair at σ overall
    assert settings.delta_noise_multiplier(10) == pytest.approx((1 - 1 / 16) ** -0.5)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"dp_clip": 1.0, "dp_noise_multiplier": -0.5}, "dp_noise_multiplier"),
        ({"dp_clip": -1.0}, "dp_clip"),
        (
            {"dp_clip": 1.0, "dp_noise_multiplier": 1.0, "dp_target_epsilon": 0.5},
            "dp_target_epsilon",
        ),
        ({"dp_clip": 1.0, "dp_sampling": "shuffle"}, "dp_sampling"),
        ({"dp_clip": 1.0, "dp_delta": 1.0}, "dp_delta"),
        ({"dp_clip": 1.0, "aggregator": "median"}, "aggregator"),
        ({"dp_clip": 1.0, "client_availability": 0.5}, "client_availability"),
        (
            {"dp_clip": 1.0, "dp_noise_multiplier": 1.0, "dp_adaptive_quantile": 0.5},
            "dp_count_noise",
        ),
        ({"dp_clip": 1.0, "scheduler": "sync"}, "dp_clip"),
    ],
)
def test_bad_privacy_settings_are_one_clear_error(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=20, client_fraction=0.5).replace(**changes)
    with pytest.raises(ConfigError, match=rf"^{field}: ") as caught:
        cfg.validate()
    assert "\n" not in str(caught.value)


def test_the_cli_refuses_an_unreachable_target_before_running(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--scheduler", "fedavg", "--clients", "20",
         "--client-fraction", "0.5", "--dp-clip", "1", "--dp-noise-multiplier", "1",
         "--dp-sampling", "poisson",
         "--dp-target-epsilon", "0.5", "--out", str(tmp_path / "run")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "dp_target_epsilon" in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_private_run_logs_epsilon_and_stops_at_its_target(tiny_config):
    cfg = tiny_config(
        scheduler="fedavg",
        clients=10,
        client_fraction=0.5,
        local_steps=1,
        total_env_steps=10**5,
        eval_every=10**6,
        log_every=10,
        client_eval_clients=2,
        dp_clip=1.0,
        dp_noise_multiplier=1.5,
        dp_target_epsilon=8.0,
    )
    result = hybrid.train(cfg)
    summary = result.summary
    assert summary["dp_target_reached"] == 1.0
    assert summary["dp_epsilon"] <= 8.0 < summary["dp_epsilon"] + 3.0
    assert summary["dp_delta"] == 1e-5
    assert summary["env_steps"] < 10**5  # stopped by the budget of privacy, not of steps
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").open()]
    epsilons = [r["sched/dp_epsilon"] for r in rows if "sched/dp_epsilon" in r]
    assert epsilons == sorted(epsilons) and len(set(epsilons)) > 3  # grows round by round


# --- the settings' bounds and messages, the server's arithmetic, as mutation testing pins them ---


def test_privacy_settings_bounds_and_messages():
    with pytest.raises(ConfigError, match=r"choose one of fixed, poisson$"):
        PrivacySettings(sampling="stratified")
    with pytest.raises(ConfigError, match=r"^dp_delta: 0.0 is outside \(0, 1\)$"):
        PrivacySettings(delta=0.0)
    with pytest.raises(ConfigError, match=r"^dp_target_epsilon: -1.0 must be >= 0 \(0: none\)$"):
        PrivacySettings(target_epsilon=-1.0)
    with pytest.raises(ConfigError, match=r"^dp_adaptive_quantile: 1.0 is outside \[0, 1\)"):
        PrivacySettings(adaptive_quantile=1.0)
    with pytest.raises(ConfigError, match=r"^dp_clip_lr: 0.0 must be > 0$"):
        PrivacySettings(clip_lr=0.0)
    with pytest.raises(ConfigError, match=r"^dp_count_noise: -1.0 must be >= 0 \(0: m / 20\)$"):
        PrivacySettings(count_noise=-1.0)
    assert PrivacySettings().count_stddev(40) == 2.0  # the paper's m / 20
    adaptive = PrivacySettings(clip=1.0, noise_multiplier=0.5, adaptive_quantile=0.5)
    assert adaptive.delta_noise_multiplier(40) == pytest.approx((0.5**-2 - 4.0**-2) ** -0.5)


def test_a_target_is_reachable_when_one_round_spends_at_most_it():
    settings = PrivacySettings(clip=1.0, noise_multiplier=1.0)
    one_round = PrivacyAccountant(settings, 100, 10).epsilon_after(1)
    exact = PrivacySettings(clip=1.0, noise_multiplier=1.0, target_epsilon=one_round)
    exact.check_round(100, 10)  # one round spends exactly the target: allowed
    accountant = PrivacyAccountant(exact, 100, 10)
    assert accountant.rounds == 0 and accountant.epsilon == 0.0
    assert accountant.allows_another_round()  # ε after it: exactly the target
    accountant.rounds = 1
    assert not accountant.allows_another_round()
    unlimited = PrivacyAccountant(settings, 100, 10)
    unlimited.rounds = 1000
    assert unlimited.allows_another_round()  # no target: never stops
    with pytest.raises(ConfigError, match=r"raise dp_noise_multiplier or the target$"):
        PrivacySettings(clip=1.0, noise_multiplier=1.0, target_epsilon=one_round / 2).check_round(
            100, 10
        )


def test_the_accountant_without_the_privacy_extra_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # import fails as if absent
    with pytest.raises(
        ConfigError,
        match=r"^dp_clip: DP-FedAvg's accountant needs dp-accounting: pip install "
        r"'hybrid\[privacy\]'$",
    ):
        PrivacyAccountant(PrivacySettings(clip=1.0, noise_multiplier=1.0), 100, 10)


def test_a_dp_round_is_clip_sum_noise_from_its_generator_over_m():
    settings = PrivacySettings(
        clip=5.0, noise_multiplier=0.5, adaptive_quantile=0.5, clip_lr=0.2, count_noise=0.0
    )
    server = DpFedAvg(
        settings, clients=400, per_round=40, generator=torch.Generator().manual_seed(3)
    )
    assert math.isnan(server.metrics()["dp_unclipped_fraction"])
    deltas = torch.tensor([[3.0, 4.0], [0.3, 0.4], [30.0, 40.0]], dtype=torch.float64)
    result = server.aggregate(deltas)
    replay = torch.Generator().manual_seed(3)
    noise = torch.randn(2, generator=replay, dtype=torch.float64)
    draw = float(torch.randn((), generator=replay, dtype=torch.float64))
    clipped_sum = deltas[0] + deltas[1] + deltas[2] / 10  # norms 5 (= C: kept), 0.5, 50
    sigma_delta = settings.delta_noise_multiplier(40.0)
    expected = (clipped_sum + sigma_delta * 5.0 * noise) / 40.0
    assert torch.equal(result, expected)
    below = (2 + draw * settings.count_stddev(40.0)) / 40.0  # two rows at most C
    assert server.clip == pytest.approx(5.0 * math.exp(-0.2 * (below - 0.5)), rel=1e-12)
    metrics = server.metrics()
    assert metrics["dp_unclipped_fraction"] == pytest.approx(2 / 3)
    assert metrics["dp_clip"] == server.clip and metrics["dp_delta"] == settings.delta
    server.accountant.rounds = 2
    expected_epsilon = PrivacyAccountant(settings, 400, 40).epsilon_after(2)
    assert server.metrics()["dp_epsilon"] == expected_epsilon
    assert server.metrics()["dp_rounds"] == 2
    restored = DpFedAvg(settings, clients=400, per_round=40, generator=torch.Generator())
    restored.load_state_dict(server.state_dict())
    assert restored.clip == server.clip and restored.accountant.rounds == 2
    assert torch.equal(restored.generator.get_state(), server.generator.get_state())


def test_without_noise_a_dp_round_draws_nothing_and_a_lone_row_counts_whole():
    settings = PrivacySettings(clip=1.0, noise_multiplier=0.0)
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    server = DpFedAvg(settings, clients=10, per_round=1, generator=generator)
    row = torch.tensor([[0.3, 0.4]], dtype=torch.float64)  # norm 0.5: below C, kept exactly
    assert torch.equal(server.aggregate(row), row[0])
    assert torch.equal(generator.get_state(), before)
    assert server.metrics()["dp_unclipped_fraction"] == 1.0
