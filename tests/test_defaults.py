"""Defaults per env family: which family an id belongs to, the recipe an id of no
family gets from its spaces, and the rule that a field you set stays yours."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import hybrid
from hybrid import envs as hybrid_envs
from hybrid.config import TrainConfig
from hybrid.defaults import (
    ATARI_A2C,
    BOX2D_PPO,
    CONTINUOUS_PPO,
    DISCRETE_A2C,
    ENV_DEFAULTS,
    FAMILIES,
    MPE,
    apply_env_defaults,
    defaults_for,
    family_of,
)
from hybrid.envs import register_env


@pytest.fixture
def no_env_built(monkeypatch):
    """Fail the test if anything builds an env."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"an env was built: {args}")

    monkeypatch.setattr(gym, "make", refuse)
    monkeypatch.setattr(hybrid_envs, "make_env", refuse)


@pytest.mark.parametrize(
    ("env_id", "family"),
    [
        ("CartPole-v1", "classic_control"),
        ("Acrobot-v1", "classic_control"),
        ("MountainCarContinuous-v0", "classic_control"),
        ("LunarLander-v3", "box2d"),
        ("BipedalWalker-v3", "box2d"),
        ("HalfCheetah-v5", "mujoco"),
        ("InvertedPendulum-v5", "mujoco"),
        ("ALE/Pong-v5", "atari"),
        ("ALE/Breakout-v5", "atari"),
        ("mpe2/simple_spread_v3", "mpe"),
        ("mpe2/simple_reference_v3", "mpe"),
        ("pettingzoo.butterfly/pistonball_v6", "pettingzoo"),
        ("no-such-env-v0", None),
    ],
)
def test_family_comes_from_the_id_and_the_registry_without_building_the_env(
    no_env_built, env_id, family
):
    assert family_of(env_id) == family


def test_families_without_a_choice_of_action_space_build_nothing(no_env_built):
    assert defaults_for("HalfCheetah-v5") == ("mujoco", CONTINUOUS_PPO)
    assert defaults_for("ALE/Breakout-v5") == ("atari", ATARI_A2C)
    assert defaults_for("mpe2/simple_v3") == ("mpe", MPE)
    assert defaults_for("Pendulum-v1") == ("env id", ENV_DEFAULTS["Pendulum-v1"])


def test_the_action_space_picks_the_recipe_within_a_family():
    assert defaults_for("Acrobot-v1") == ("classic_control", DISCRETE_A2C)
    assert defaults_for("MountainCarContinuous-v0") == ("classic_control", CONTINUOUS_PPO)
    assert defaults_for("LunarLander-v3") == ("box2d", BOX2D_PPO)


class _Env(gym.Env):
    def __init__(self, obs: gym.Space, act: gym.Space) -> None:
        self.observation_space, self.action_space = obs, act

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


def _image_env() -> gym.Env:
    return _Env(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(4))


def _continuous_env() -> gym.Env:
    return _Env(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))


def _discrete_env() -> gym.Env:
    return _Env(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))


@pytest.mark.parametrize(
    ("factory", "source", "recipe"),
    [
        (_image_env, "spaces: image", ATARI_A2C),
        (_continuous_env, "spaces: continuous", CONTINUOUS_PPO),
        (_discrete_env, "spaces: discrete", DISCRETE_A2C),
    ],
)
def test_an_id_of_no_family_gets_the_recipe_its_spaces_call_for(factory, source, recipe):
    name = f"test-defaults-{factory.__name__}"
    register_env(name, factory)
    assert family_of(name) is None
    assert defaults_for(name) == (source, recipe)
    cfg = apply_env_defaults(TrainConfig(env=name))
    assert {k: getattr(cfg, k) for k in recipe} == recipe


def test_a_field_you_set_stays_yours_under_a_family():
    cfg = apply_env_defaults(TrainConfig(env="Acrobot-v1", lr=3e-3, workers=3, ent_coef=0.02))
    assert (cfg.lr, cfg.workers, cfg.ent_coef) == (3e-3, 3, 0.02)  # set by the user: kept
    assert cfg.optimizer == DISCRETE_A2C["optimizer"]  # left alone: the family's
    kept = apply_env_defaults(TrainConfig(env="HalfCheetah-v5"), keep={"algo", "workers"})
    assert (kept.algo, kept.workers) == (TrainConfig().algo, TrainConfig().workers)
    assert kept.rollout_steps == CONTINUOUS_PPO["rollout_steps"]
    off = TrainConfig(env="Acrobot-v1", env_defaults=False)
    assert apply_env_defaults(off) == off


def test_every_recipe_is_a_valid_config_for_its_family():
    examples = {  # family: (an id with discrete actions, one with continuous actions)
        "classic_control": ("CartPole-v1", "Pendulum-v1"),
        "box2d": ("LunarLander-v3", "BipedalWalker-v3"),
        "mujoco": ("HalfCheetah-v5", "HalfCheetah-v5"),
        "atari": ("ALE/Pong-v5", "ALE/Pong-v5"),
        "mpe": ("mpe2/simple_v3", "mpe2/simple_v3"),
        "pettingzoo": ("mpe2/simple_v3", "mpe2/simple_v3"),
    }
    assert set(examples) == set(FAMILIES)
    for family, recipes in FAMILIES.items():
        for env, recipe in zip(examples[family], recipes, strict=True):
            TrainConfig(env=env, **recipe).validate()  # unknown fields raise TypeError
    assert apply_env_defaults(TrainConfig(env="ALE/Pong-v5")).algo == "a2c"  # no extra needed


def test_classic_control_defaults_apply_to_an_unnamed_classic_control_id(tmp_path):
    assert "Acrobot-v1" not in ENV_DEFAULTS
    result = hybrid.train(
        TrainConfig(env="Acrobot-v1", total_env_steps=40, eval_every=10**9, eval_episodes=1),
        progress=False,
        out=str(tmp_path / "run"),
    )
    stored = json.loads((result.run_dir / "config.json").read_text())
    for name, value in DISCRETE_A2C.items():
        assert stored[name] == value == getattr(result.config, name), name


def test_a_flag_given_on_the_command_line_stays_even_at_its_global_default(tmp_path):
    from hybrid.cli import main
    from hybrid.flags import given_fields

    argv = ["--workers", "8", "--no-stop-when-solved", "--scheduler-arg", "k=1", "--lr=0.001"]
    assert given_fields(argv) == {"workers", "stop_when_solved", "scheduler_args", "lr"}
    out = tmp_path / "run"
    common = ["--total-env-steps", "80", "--eval-every", "1000000", "--eval-episodes", "1"]
    assert main(["train", "--env", "Acrobot-v1", "--workers", "8", *common, "--out", str(out)]) == 0
    stored = json.loads((out / "config.json").read_text())
    assert stored["workers"] == 8  # given: kept, though 8 is the global default
    assert stored["envs_per_worker"] == DISCRETE_A2C["envs_per_worker"]  # not given: family's


def test_another_algorithm_than_the_recipes_keeps_the_global_server_optimizer():
    # MPE's recipe applies MAPPO's Δ with SGD at lr 1; an A2C gradient must not get that step
    a2c = apply_env_defaults(TrainConfig(env="mpe2/simple_v3"), keep={"algo"})  # --algo a2c
    assert (a2c.algo, a2c.optimizer, a2c.lr) == ("a2c", TrainConfig().optimizer, TrainConfig().lr)
    assert a2c.rollout_steps == MPE["rollout_steps"]  # the rest of the family's stays
    ippo = apply_env_defaults(TrainConfig(env="mpe2/simple_v3", algo="ippo"))  # Δ too: SGD
    assert (ippo.algo, ippo.optimizer, ippo.lr) == ("ippo", MPE["optimizer"], MPE["lr"])
    ppo = apply_env_defaults(TrainConfig(env="Acrobot-v1", algo="ppo"))  # Δ, not A2C's gradient
    assert (ppo.optimizer, ppo.lr) == (TrainConfig().optimizer, TrainConfig().lr)
    assert ppo.workers == DISCRETE_A2C["workers"]


def test_a_scheduler_whose_clients_train_locally_keeps_the_global_server_optimizer():
    # fedavg's clients send Δ: the classic-control recipe's RMSProp was tuned for A2C
    # gradients, so the server optimizer stays the global one ...
    fed = apply_env_defaults(TrainConfig(env="CartPole-v1", scheduler="fedavg"))
    assert (fed.optimizer, fed.lr) == (TrainConfig().optimizer, TrainConfig().lr)
    assert fed.workers == DISCRETE_A2C["workers"]  # the rest of the recipe applies
    # ... while a Δ recipe (PPO's SGD at lr 1) is FedAvg's own server step
    ppo = apply_env_defaults(TrainConfig(env="InvertedPendulum-v5", scheduler="fedavg"))
    assert (ppo.optimizer, ppo.lr) == ("sgd", 1.0)
