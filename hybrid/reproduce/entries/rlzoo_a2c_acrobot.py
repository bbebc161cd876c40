"""rl-zoo's A2C on Acrobot-v1: -83.353 ± 17.213 after 500k steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import rl_zoo_entry
from hybrid.reproduce.entries.rlzoo_a2c_cartpole import A2C_ZOO

ENTRY = rl_zoo_entry(
    mean=-83.353,
    std=17.213,
    evaluated="1,778 episodes (149,979 steps)",
    name="rlzoo-a2c-acrobot",
    title="A2C, Acrobot-v1 (rl-zoo)",
    env_id="Acrobot-v1",
    source_env_id="Acrobot-v1",
    budget=500_000,
    parallel_envs="16 (hybrid: sync, 2 workers x 8 envs)",
    # rl-zoo: normalize: true (VecNormalize of observations and rewards), 16 envs, ent 0.
    config={
        "env": "Acrobot-v1",
        **A2C_ZOO,
        "envs_per_worker": 8,
        "normalize_obs": True,
        "normalize_reward": True,
    },
    deviations=(
        "observation normalization statistics are global state updated from every "
        "worker's rollouts (VecNormalize's are one process's)",
    ),
)
