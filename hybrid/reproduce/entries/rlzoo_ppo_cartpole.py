"""rl-zoo's PPO on CartPole-v1: 500.000 ± 0.000 after 100k steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import (
    DETERMINISTIC_EVAL,
    EVAL_DEVIATION,
    LR_ANNEAL_PPO,
    RL_ZOO,
    RL_ZOO_RETURN,
    RL_ZOO_SPREAD,
    RL_ZOO_URL,
    SEED_DEVIATION,
)
from hybrid.reproduce.entries.rlzoo_ppo_lunarlander import PPO_SB3
from hybrid.reproduce.entry import Entry, Published

ENTRY = Entry(
    name="rlzoo-ppo-cartpole",
    title="PPO, CartPole-v1 (rl-zoo)",
    source=RL_ZOO,
    url=RL_ZOO_URL,
    published=Published("500.000 ± 0.000", 500.0, 0.0, RL_ZOO_SPREAD),
    env_id="CartPole-v1",
    source_env_id="CartPole-v1",
    budget=100_000,
    parallel_envs="8 (hybrid: one worker x 8 envs x 32 steps)",
    evaluation="deterministic, 300 episodes (150,000 steps); " + DETERMINISTIC_EVAL,
    return_convention=RL_ZOO_RETURN,
    source_seeds=1,
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
        EVAL_DEVIATION,
        SEED_DEVIATION,
    ),
)
