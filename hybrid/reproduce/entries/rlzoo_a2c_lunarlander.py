"""rl-zoo's A2C on LunarLander-v2: 155.751 ± 80.419 after 200k steps (hybrid runs v3)."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import rl_zoo_entry
from hybrid.reproduce.entries.rlzoo_a2c_cartpole import A2C_ZOO

LUNAR_V3 = (
    "the source ran LunarLander-v2; Gymnasium 1.x has only v3, which resets the wind and "
    "turbulence offset on every reset, destroys the Box2D world fully (v2 was not "
    "deterministic) and widens the observation bounds (x, y to ±2.5, velocities to ±10, "
    "angles to ±2π); wind is off by default in both, so the task is the same in kind but "
    "not bit for bit"
)

ENTRY = rl_zoo_entry(
    mean=155.751,
    std=80.419,
    evaluated="297 episodes (149,443 steps)",
    name="rlzoo-a2c-lunarlander",
    title="A2C, LunarLander (rl-zoo, v2 -> v3)",
    env_id="LunarLander-v3",
    source_env_id="LunarLander-v2",
    budget=200_000,
    parallel_envs="8 (hybrid: sync, 2 workers x 4 envs)",
    # rl-zoo: 8 envs x 5 steps, gamma 0.995, lr lin_0.00083, ent_coef 1e-5.
    config={
        "env": "LunarLander-v3",
        **A2C_ZOO,
        "gamma": 0.995,
        "lr": 8.3e-4,
        "lr_schedule": "linear",
        "ent_coef": 1e-5,
    },
    deviations=(LUNAR_V3,),
)
