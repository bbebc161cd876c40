"""rl-zoo's PPO on CartPole-v1: 500.000 ± 0.000 after 100k steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import (
    LR_ANNEAL_PPO,
    rl_zoo_entry,
)
from hybrid.reproduce.entries.rlzoo_ppo_lunarlander import PPO_SB3

ENTRY = rl_zoo_entry(
    mean=500.0,
    std=0.0,
    evaluated="300 episodes (150,000 steps)",
    name="rlzoo-ppo-cartpole",
    title="PPO, CartPole-v1 (rl-zoo)",
    env_id="CartPole-v1",
    source_env_id="CartPole-v1",
    budget=100_000,
    parallel_envs="8 (hybrid: one worker x 8 envs x 32 steps)",
    # rl-zoo (tuned): 8 envs x 32 steps, batch 256 (one minibatch), 20 epochs, gamma 0.98,
    # lambda 0.8, ent 0, lr lin_0.001, clip lin_0.2.
    config={
        "env": "CartPole-v1",
        **PPO_SB3,
        "envs_per_worker": 8,
        "rollout_steps": 32,
        "ppo_epochs": 20,
        "ppo_minibatches": 1,
        "ppo_lr": 1e-3,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "ent_coef": 0.0,
    },
    deviations=(
        LR_ANNEAL_PPO,
        "the source anneals the clip range (lin_0.2) to 0; hybrid's clip_coef is constant",
    ),
)
