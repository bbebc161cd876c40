"""rl-zoo's A2C on CartPole-v1: 500.000 ± 0.000 after 500k steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import rl_zoo_entry

# SB3's A2C defaults with rl-zoo's row: 8 envs x 5 steps, RMSprop 7e-4 (alpha 0.99, eps
# 1e-5), gamma 0.99, no GAE (lambda 1), ent_coef 0, vf_coef 0.5, grad norm 0.5. sync with
# 2 workers x 4 envs averages the two gradients, sample-weighted: one gradient over 8 envs.
A2C_ZOO = {
    "scheduler": "sync",
    "algo": "a2c",
    "workers": 2,
    "envs_per_worker": 4,
    "rollout_steps": 5,
    "optimizer": "rmsprop",
    "lr": 7e-4,
    "adam_eps": 1e-5,
    "gamma": 0.99,
    "gae_lambda": 1.0,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantages": False,
    "stop_when_solved": False,
    "eval_episodes": 10,
}

ENTRY = rl_zoo_entry(
    mean=500.0,
    std=0.0,
    evaluated="300 episodes (150,000 steps)",
    name="rlzoo-a2c-cartpole",
    title="A2C, CartPole-v1 (rl-zoo)",
    env_id="CartPole-v1",
    source_env_id="CartPole-v1",
    budget=500_000,
    parallel_envs="8 (hybrid: sync, 2 workers x 4 envs, one averaged gradient)",
    config={"env": "CartPole-v1", **A2C_ZOO},
    deviations=(),
)
