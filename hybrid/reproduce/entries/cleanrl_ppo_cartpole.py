"""CleanRL's ppo.py on CartPole-v1: 492.40 ± 13.05 (3 seeds, 500k steps)."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import (
    CLEANRL,
    CLEANRL_EVALUATION,
    CLEANRL_URL,
    LR_ANNEAL_PPO,
    TRUNCATION,
)
from hybrid.reproduce.entry import Entry, Published

# ppo.py's defaults: 4 envs x 128 steps, 4 epochs of 4 minibatches (128 samples), Adam
# 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2 with value clipping, ent 0.01,
# vf 0.5, grad norm 0.5, advantages normalized per minibatch, no value normalization.
CLEANRL_PPO = {
    "scheduler": "sync",
    "algo": "ppo",
    "workers": 1,
    "envs_per_worker": 4,
    "rollout_steps": 128,
    "ppo_epochs": 4,
    "ppo_minibatches": 4,
    "ppo_lr": 2.5e-4,
    "optimizer": "sgd",
    "lr": 1.0,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_coef": 0.2,
    "clip_vloss": True,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "ppo_advantage_norm": "minibatch",
    "value_norm": False,
    "normalize_obs": False,
    "stop_when_solved": False,
    "eval_episodes": 10,
}

CLEANRL_DEVIATIONS = (
    LR_ANNEAL_PPO,
    TRUNCATION,
    "minibatches: hybrid splits a batch into equal minibatches and drops the remainder "
    "when the batch does not divide (none here: 512 samples in 4 of 128); CleanRL's batch "
    "always divides",
    "the source's figure is the sampled policy's training episodes; hybrid's is a greedy "
    "evaluation, which on these tasks is usually higher",
)

ENTRY = Entry(
    name="cleanrl-ppo-cartpole",
    title="PPO, CartPole-v1 (CleanRL ppo.py)",
    source=CLEANRL,
    url=CLEANRL_URL,
    published=Published("492.40 ± 13.05", 492.40, 13.05, "3 seeds"),
    env_id="CartPole-v1",
    source_env_id="CartPole-v1",
    budget=500_000,
    parallel_envs="4 (hybrid: one worker x 4 envs x 128 steps)",
    evaluation=CLEANRL_EVALUATION + "; hybrid: greedy policy, 10 episodes at the end",
    return_convention="undiscounted episode return (sum of rewards)",
    source_seeds=3,
    config={"env": "CartPole-v1", **CLEANRL_PPO},
    deviations=CLEANRL_DEVIATIONS,
)
