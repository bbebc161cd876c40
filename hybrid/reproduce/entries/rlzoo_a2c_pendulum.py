"""rl-zoo's A2C on Pendulum-v1: -162.965 ± 103.210 after 1M steps."""

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
    name="rlzoo-a2c-pendulum",
    title="A2C, Pendulum-v1 (rl-zoo)",
    source=RL_ZOO,
    url=RL_ZOO_URL,
    published=Published("-162.965 ± 103.210", -162.965, 103.210, RL_ZOO_SPREAD),
    env_id="Pendulum-v1",
    source_env_id="Pendulum-v1",
    budget=1_000_000,
    parallel_envs="8 (hybrid: sync, 2 workers x 4 envs)",
    evaluation="deterministic, 750 episodes (150,000 steps); " + DETERMINISTIC_EVAL,
    return_convention=RL_ZOO_RETURN,
    source_seeds=1,
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
        EVAL_DEVIATION,
        SEED_DEVIATION,
    ),
)
