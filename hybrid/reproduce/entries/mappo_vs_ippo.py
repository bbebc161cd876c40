"""MAPPO vs IPPO on MPE simple_spread (Yu et al. 2022), at a budget this machine runs."""

from __future__ import annotations

from hybrid.defaults import MPE
from hybrid.reproduce.entry import Arm, Entry, Published

AGENTS = 3
"""simple_spread_v3's agents (N = 3): the team's sum is the per-agent mean times 3."""

ENTRY = Entry(
    name="mappo-vs-ippo-spread",
    title="MAPPO vs IPPO, MPE simple_spread_v3",
    source="Yu et al. 2022, The Surprising Effectiveness of PPO in Cooperative Multi-Agent "
    "Games (arXiv 2103.01955), MPE results",
    url="https://arxiv.org/abs/2103.01955",
    published=Published(
        "MAPPO at least as good as IPPO on MPE Spread (the released script "
        "train_mpe_spread.sh: 20M env steps, 128 rollout threads, 10 epochs, lr 7e-4)"
    ),
    env_id="mpe2/simple_spread_v3",
    source_env_id="MPE simple_spread (the paper's own MPE copy; mpe2 continues PettingZoo's)",
    budget=20_000_000,
    parallel_envs="source: 128 rollout threads; hybrid: 2 workers x 16 envs (the MPE "
    "recipe), 32 in all",
    evaluation="hybrid: greedy policy, 10 episodes of 25 steps; both return conventions "
    "are reported (per-agent mean, and the team's sum = 3 x the mean)",
    return_convention="per-agent mean episode return (hybrid's logged return); the team "
    "sum over the 3 agents is 3 x that",
    source_seeds=None,
    config={
        "env": "mpe2/simple_spread_v3",
        **MPE,
        "scheduler": "sync",
        "stop_when_solved": False,
    },
    arms=(Arm("mappo", {"algo": "mappo"}), Arm("ippo", {"algo": "ippo"})),
    kind="direction",
    metric_name="final eval return, per-agent mean",
    deviations=(
        "budget: the released script trains 20M env steps; this machine runs a small "
        "fraction of that (--budget-scale), so the verdict says 'not comparable' and the "
        "gap is stated",
        "32 parallel envs, not the released code's 128 (MPE results depend on it)",
        "hybrid's MAPPO defaults differ from the released code: MSE value loss (Huber δ = "
        "10 there), grad norm 0.5 (10), one Adam for actor and critic (two), ValueNorm "
        "updated once per batch (per minibatch); docs/multiagent.md lists them",
        "gamma 0.95 (the MPE recipe), the released code's 0.99; tanh MLPs, the released "
        "script's ReLU",
    ),
    notes="agrees when MAPPO's IQM CI lies above IPPO's; 'inconclusive' with overlapping "
    "CIs is consistent with 'at least as good'",
)
