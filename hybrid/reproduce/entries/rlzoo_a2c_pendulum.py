"""rl-zoo's A2C on Pendulum-v1: -162.965 ± 103.210 after 1M steps."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import rl_zoo_entry
from hybrid.reproduce.entries.rlzoo_a2c_cartpole import A2C_ZOO

ENTRY = rl_zoo_entry(
    mean=-162.965,
    std=103.210,
    evaluated="750 episodes (150,000 steps)",
    name="rlzoo-a2c-pendulum",
    title="A2C, Pendulum-v1 (rl-zoo)",
    env_id="Pendulum-v1",
    source_env_id="Pendulum-v1",
    budget=1_000_000,
    parallel_envs="8 (hybrid: sync, 2 workers x 4 envs)",
    # rl-zoo's "almost tuned" Pendulum A2C: 8 envs x 8 steps, lambda 0.9, vf_coef 0.4,
    # RMSprop lin_7e-4, normalize, log_std_init -2, no advantage normalization, gSDE.
    config={
        "env": "Pendulum-v1",
        **A2C_ZOO,
        "rollout_steps": 8,
        "gae_lambda": 0.9,
        "vf_coef": 0.4,
        "lr_schedule": "linear",
        "normalize_obs": True,
        "normalize_reward": True,
        "log_std_init": -2.0,
    },
    deviations=(
        "no generalized state-dependent exploration (gSDE): hybrid's Gaussian policy has a "
        "state-independent log std (--state-dependent-std makes it a network output, not "
        "gSDE's noise matrix)",
    ),
)
