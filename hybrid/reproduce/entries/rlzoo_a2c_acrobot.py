"""rl-zoo's A2C on Acrobot-v1: -83.353 ± 17.213 after 500k steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import (
    DETERMINISTIC_EVAL,
    EVAL_DEVIATION,
    RL_ZOO,
    RL_ZOO_RETURN,
    RL_ZOO_SPREAD,
    RL_ZOO_URL,
    SEED_DEVIATION,
)
from hybrid.reproduce.entries.rlzoo_a2c_cartpole import A2C_ZOO
from hybrid.reproduce.entry import Entry, Published

ENTRY = Entry(
    name="rlzoo-a2c-acrobot",
    title="A2C, Acrobot-v1 (rl-zoo)",
    source=RL_ZOO,
    url=RL_ZOO_URL,
    published=Published("-83.353 ± 17.213", -83.353, 17.213, RL_ZOO_SPREAD),
    env_id="Acrobot-v1",
    source_env_id="Acrobot-v1",
    budget=500_000,
    parallel_envs="16 (hybrid: sync, 2 workers x 8 envs)",
    evaluation="deterministic, 1,778 episodes (149,979 steps); " + DETERMINISTIC_EVAL,
    return_convention=RL_ZOO_RETURN,
    source_seeds=1,
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
        EVAL_DEVIATION,
        SEED_DEVIATION,
    ),
)
