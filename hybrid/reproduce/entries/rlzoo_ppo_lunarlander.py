"""rl-zoo's PPO on LunarLander-v2: 242.119 ± 31.823 after 1M steps (hybrid runs v3)."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import rl_zoo_entry
from hybrid.reproduce.entries.rlzoo_a2c_lunarlander import LUNAR_V3

# One PPO learner, as SB3's: a single worker holds all 16 envs x 1024 steps and takes
# 4 epochs of 256 minibatches of 64 on its local Adam (3e-4, SB3's default), sending Δ to a
# plain SGD server at lr 1 (which applies it as it is). No value or observation
# normalization, no value clipping (SB3's clip_range_vf is None), advantages normalized per
# minibatch (SB3's normalize_advantage).
PPO_SB3 = {
    "scheduler": "sync",
    "algo": "ppo",
    "workers": 1,
    "optimizer": "sgd",
    "lr": 1.0,
    "value_norm": False,
    "normalize_obs": False,
    "clip_vloss": False,
    "ppo_advantage_norm": "minibatch",
    "clip_coef": 0.2,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "stop_when_solved": False,
    "eval_episodes": 10,
}

ENTRY = rl_zoo_entry(
    mean=242.119,
    std=31.823,
    evaluated="369 episodes (149,636 steps)",
    name="rlzoo-ppo-lunarlander",
    title="PPO, LunarLander (rl-zoo, v2 -> v3)",
    env_id="LunarLander-v3",
    source_env_id="LunarLander-v2",
    budget=1_000_000,
    parallel_envs="16 (hybrid: one worker x 16 envs x 1024 steps)",
    config={
        "env": "LunarLander-v3",
        **PPO_SB3,
        "envs_per_worker": 16,
        "rollout_steps": 1024,
        "ppo_epochs": 4,
        "ppo_minibatches": 256,
        "ppo_lr": 3e-4,
        "gamma": 0.999,
        "gae_lambda": 0.98,
        "ent_coef": 0.01,
    },
    deviations=(LUNAR_V3,),
)
