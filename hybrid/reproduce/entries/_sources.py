"""Sources the entries share: where rl-zoo's and CleanRL's tables are, how they evaluated."""

from __future__ import annotations

from typing import Any

from hybrid.reproduce.entry import Entry, Published

RL_ZOO = "rl-baselines3-zoo benchmark.md (Stable-Baselines3's zoo), one trained agent per row"
RL_ZOO_URL = (
    "https://github.com/DLR-RM/rl-baselines3-zoo/blob/"
    "0088472b8cb622732bdbc4aa3d0d0abde86c67ed/benchmark.md"
)
RL_ZOO_SPREAD = "evaluation episodes of one trained agent (not seeds)"
RL_ZOO_RETURN = "undiscounted episode return (sum of rewards)"

CLEANRL = "CleanRL docs, ppo.py results table (Huang et al. 2022), 3 seeds"
CLEANRL_URL = "https://docs.cleanrl.dev/rl-algorithms/ppo/#experiment-results_1"
CLEANRL_EVALUATION = (
    "sampled (stochastic) policy: the average episodic return of the training episodes, "
    "not a separate evaluation"
)

DETERMINISTIC_EVAL = "hybrid: deterministic (greedy) policy, 10 episodes at the end of the run"
EVAL_DEVIATION = (
    "hybrid's final evaluation is 10 greedy episodes; the source's figure comes from a "
    "longer evaluation (see its evaluation protocol)"
)
SEED_DEVIATION = (
    "the source's figure is one trained agent; hybrid reports 5 seeds, so its spread is "
    "over seeds and the source's over episodes of one agent"
)
LR_ANNEAL_PPO = (
    "the source anneals the learning rate linearly; hybrid's PPO runs the epochs on each "
    "worker's local Adam, whose learning rate does not anneal"
)
TRUNCATION = (
    "time limits: hybrid bootstraps a truncated episode from the value of the state it cut "
    "off; the source treats truncation as termination (no bootstrap)"
)


def rl_zoo_entry(
    *, mean: float, std: float, evaluated: str, deviations: tuple[str, ...] = (), **fields: Any
) -> Entry:
    """One row of rl-zoo's benchmark.md: one trained agent's mean ± std over its evaluation
    episodes (``evaluated``: how many, in how many steps), under what every rl-zoo entry
    shares; ``deviations`` are the entry's own, before the shared ones."""
    return Entry(
        source=RL_ZOO,
        url=RL_ZOO_URL,
        published=Published(f"{mean:.3f} ± {std:.3f}", mean, std, RL_ZOO_SPREAD),
        evaluation=f"deterministic, {evaluated}; {DETERMINISTIC_EVAL}",
        return_convention=RL_ZOO_RETURN,
        source_seeds=1,
        deviations=(*deviations, EVAL_DEVIATION, SEED_DEVIATION),
        **fields,
    )
