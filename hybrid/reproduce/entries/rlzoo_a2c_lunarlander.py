"""rl-zoo's A2C on LunarLander-v2: 155.751 ± 80.419 after 200k steps (hybrid runs v3)."""

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

LUNAR_V3 = (
    "the source ran LunarLander-v2; Gymnasium 1.x has only v3, which resets the wind and "
    "turbulence offset on every reset, destroys the Box2D world fully (v2 was not "
    "deterministic) and widens the observation bounds (x, y to ±2.5, velocities to ±10, "
    "angles to ±2π); wind is off by default in both, so the task is the same in kind but "
    "not bit for bit"
)

ENTRY = Entry(
    name="rlzoo-a2c-lunarlander",
    title="A2C, LunarLander (rl-zoo, v2 -> v3)",
    source=RL_ZOO,
    url=RL_ZOO_URL,
    published=Published("155.751 ± 80.419", 155.751, 80.419, RL_ZOO_SPREAD),
    env_id="LunarLander-v3",
    source_env_id="LunarLander-v2",
    budget=200_000,
    parallel_envs="8 (hybrid: sync, 2 workers x 4 envs)",
    evaluation="deterministic, 297 episodes (149,443 steps); " + DETERMINISTIC_EVAL,
    return_convention=RL_ZOO_RETURN,
    source_seeds=1,
    # rl-zoo: 8 envs x 5 steps, gamma 0.995, lr lin_0.00083, ent_coef 1e-5.
    config={
        "env": "LunarLander-v3",
        **A2C_ZOO,
        "gamma": 0.995,
        "lr": 8.3e-4,
        "lr_schedule": "linear",
        "ent_coef": 1e-5,
    },
    deviations=(LUNAR_V3, EVAL_DEVIATION, SEED_DEVIATION),
)
