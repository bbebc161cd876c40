"""Byzantine edge clients: who they are (seeded, recorded) and what each attack does."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import hybrid
from hybrid.clients import (
    ClientSettings,
    apply_client_dynamics,
    attack_delta,
    make_profiles,
)
from hybrid.config import TrainConfig
from hybrid.errors import ConfigError


def settings(**changes) -> ClientSettings:
    return _client_settings(TrainConfig(seed=3, clients=40, **changes))


def test_the_byzantine_clients_are_an_exact_seeded_share_and_change_no_other_draw():
    hostile = make_profiles(settings(byzantine_fraction=0.25, client_dynamics="pole_length"))
    attackers = [p.client_id for p in hostile if p.attack]
    assert len(attackers) == 10
    again = make_profiles(settings(byzantine_fraction=0.25, client_dynamics="pole_length"))
    assert [p.client_id for p in again if p.attack] == attackers
    other_seed = make_profiles(
        _client_settings(TrainConfig(seed=4, clients=40, byzantine_fraction=0.25))
    )
    assert [p.client_id for p in other_seed if p.attack] != attackers
    honest = make_profiles(settings(client_dynamics="pole_length"))
    assert [p.dynamics for p in honest] == [p.dynamics for p in hostile]
    assert {p.attack for p in hostile} == {"", "sign_flip"}


def test_the_delta_attacks_are_their_definitions():
    delta = torch.tensor([0.5, -1.0, 2.0, 0.0])
    assert attack_delta(delta, "sign_flip", 4.0, 0, 1, 2).tolist() == [-2.0, 4.0, -8.0, -0.0]
    assert attack_delta(delta, "scale", 4.0, 0, 1, 2).tolist() == [2.0, -4.0, 8.0, 0.0]
    assert attack_delta(delta, "reward_flip", 4.0, 0, 1, 2) is delta  # an env attack


def test_the_gaussian_attack_is_seeded_noise_scaled_to_the_delta():
    delta = torch.full((100_000,), 0.01)
    noise = attack_delta(delta, "gaussian", 3.0, 0, 5, 7)
    assert torch.equal(noise, attack_delta(delta, "gaussian", 3.0, 0, 5, 7))
    assert not torch.equal(noise, attack_delta(delta, "gaussian", 3.0, 0, 5, 8))
    assert noise.std().item() == pytest.approx(0.03, rel=0.02)  # s × Δ's RMS
    assert abs(torch.nn.functional.cosine_similarity(noise, delta, dim=0).item()) < 0.02


def _envs() -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)


def _attacker_and_honest(attack: str) -> tuple[ClientSettings, int, int]:
    s = settings(byzantine_fraction=0.5, byzantine_attack=attack)
    profiles = make_profiles(s)
    bad = next(p.client_id for p in profiles if p.attack)
    good = next(p.client_id for p in profiles if not p.attack)
    return s, bad, good


def test_a_reward_flipping_client_sees_negated_rewards_and_lends_a_clean_env():
    s, bad, good = _attacker_and_honest("reward_flip")
    envs = _envs()
    apply_client_dynamics(envs, s, bad)
    envs.reset(seed=0)
    _, reward, *_ = envs.step(np.array([0, 1]))
    assert reward.tolist() == [-1.0, -1.0]
    apply_client_dynamics(envs, s, good)  # the next client borrows this env
    envs.reset(seed=0)
    _, reward, *_ = envs.step(np.array([0, 1]))
    assert reward.tolist() == [1.0, 1.0]


def test_a_random_policy_client_ignores_its_actions_reproducibly():
    s, bad, _ = _attacker_and_honest("random_policy")

    def trajectory(actions: int) -> list[float]:
        envs = _envs()
        apply_client_dynamics(envs, s, bad)
        obs, _ = envs.reset(seed=7)
        seen = [obs.sum()]
        for _ in range(8):
            obs, *_ = envs.step(np.full(2, actions))
            seen.append(obs.sum())
        return seen

    assert trajectory(0) == trajectory(1)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"byzantine_fraction": 0.2, "clients": None}, "byzantine_fraction"),
        ({"byzantine_fraction": 1.0}, "byzantine_fraction"),
        ({"byzantine_fraction": 0.2, "byzantine_attack": "backdoor"}, "byzantine_attack"),
        ({"byzantine_fraction": 0.2, "codec": "int8"}, "byzantine_attack"),
        ({"byzantine_fraction": 0.2, "byzantine_scale": -1.0}, "byzantine_scale"),
    ],
)
def test_bad_byzantine_settings_are_one_clear_error(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=20).replace(**changes)
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        cfg.validate()


def test_a_run_records_which_clients_attacked_in_each_round(tiny_config):
    cfg = tiny_config(
        scheduler="fedavg",
        clients=10,
        client_fraction=0.5,
        local_steps=1,
        total_env_steps=500,
        log_every=50,
        client_eval_clients=2,
        byzantine_fraction=0.3,
        aggregator="median",
    )
    result = hybrid.train(cfg)
    attackers = {p.client_id for p in make_profiles(_client_settings(cfg)) if p.attack}
    assert len(attackers) == 3 and result.summary["byzantine_clients"] == 3
    spans = [json.loads(line) for line in (result.run_dir / "spans.jsonl").open()]
    flagged = {s["worker"] for s in spans if s.get("byzantine")}
    assert flagged == attackers & {s["worker"] for s in spans}
    by_round: dict[int, set[int]] = {}
    for s in spans:
        if s.get("byzantine"):
            by_round.setdefault(s["base_version"], set()).add(s["worker"])
    assert sum(map(len, by_round.values())) == result.summary["byzantine_sampled"]
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").open()]
    assert any(0 < r.get("fed/byzantine", 0) < 1 for r in rows)


def test_without_attackers_nothing_is_marked(tiny_config):
    cfg = tiny_config(scheduler="fedavg", clients=6, local_steps=1, total_env_steps=120)
    result = hybrid.train(cfg)
    assert "byzantine_clients" not in result.summary
    assert "byzantine" not in (result.run_dir / "spans.jsonl").read_text()


def _client_settings(cfg: TrainConfig) -> ClientSettings:
    from hybrid.assembly import client_settings

    return client_settings(cfg)


@pytest.mark.parametrize("attack", ["reward_flip", "random_policy"])
def test_an_env_attack_reaches_the_clients_envs_in_a_run(tiny_config, attack):
    """With iid clients too: the attackers' envs are wrapped, so the run differs."""

    def final(**changes) -> str:
        cfg = tiny_config(
            scheduler="fedavg",
            clients=4,
            client_fraction=1.0,
            local_steps=2,
            total_env_steps=160,
            client_eval_clients=1,
            **changes,
        )
        return hybrid.train(cfg.replace(out=cfg.out + "_" + str(len(changes)))).summary[
            "final_params_sha256"
        ]

    assert final() != final(byzantine_fraction=0.5, byzantine_attack=attack)
