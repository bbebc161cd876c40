"""CleanRL's ppo.py on Acrobot-v1: -89.93 ± 6.34 (3 seeds, 500k steps)."""

from __future__ import annotations

from hybrid.reproduce.entries._sources import CLEANRL, CLEANRL_EVALUATION, CLEANRL_URL
from hybrid.reproduce.entries.cleanrl_ppo_cartpole import CLEANRL_DEVIATIONS, CLEANRL_PPO
from hybrid.reproduce.entry import Entry, Published

ENTRY = Entry(
    name="cleanrl-ppo-acrobot",
    title="PPO, Acrobot-v1 (CleanRL ppo.py)",
    source=CLEANRL,
    url=CLEANRL_URL,
    published=Published("-89.93 ± 6.34", -89.93, 6.34, "3 seeds"),
    env_id="Acrobot-v1",
    source_env_id="Acrobot-v1",
    budget=500_000,
    parallel_envs="4 (hybrid: one worker x 4 envs x 128 steps)",
    evaluation=CLEANRL_EVALUATION + "; hybrid: greedy policy, 10 episodes at the end",
    return_convention="undiscounted episode return (sum of rewards)",
    source_seeds=3,
    config={"env": "Acrobot-v1", **CLEANRL_PPO},
    deviations=CLEANRL_DEVIATIONS,
)
