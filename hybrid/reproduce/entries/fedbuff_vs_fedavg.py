"""FedBuff (Nguyen et al. 2022): buffered async aggregation reaches a target sooner than
synchronous FedAvg under heterogeneous client speeds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid.reproduce.entry import Arm, Entry, Published

FEDBUFF_PATH = Path(__file__).resolve().parents[3] / "examples" / "schedulers" / "fedbuff.py"
"""FedBuff is an example scheduler written with the public API (a source checkout has it)."""

# benchmarks/user_schedulers.py's local training and plain server: 10 local Adam steps of
# 2 envs x 5 steps a task, Δ applied as it is (sgd, lr 1: FedAvg's server, FedBuff's η_g 1).
LOCAL_TRAINING = {
    "local_steps": 10,
    "local_optimizer": "adam",
    "local_lr": 1e-3,
    "optimizer": "sgd",
    "lr": 1.0,
}


def time_to_target(summary: Mapping[str, Any]) -> float:
    """Virtual seconds until the evaluation first reached the env's threshold (the run
    stops there); infinite when it never did (censored at the budget)."""
    if not summary.get("solved"):
        return math.inf
    return float(summary["virtual_time_s"])


ENTRY = Entry(
    name="fedbuff-vs-fedavg",
    title="FedBuff vs FedAvg: virtual time to target, heterogeneous clients",
    source="Nguyen et al. 2022, FedBuff (AISTATS; arXiv 2106.06639); FedScale's FedBuff "
    "run on FEMNIST",
    url="https://arxiv.org/abs/2106.06639",
    published=Published(
        "up to 3.3x faster than synchronous FL (paper); FedScale: 27,618 s vs 18,913 s of "
        "virtual time to the same accuracy (ratio 1.46)",
        values=(3.3, 27_618 / 18_913),
    ),
    env_id="CartPole-v1",
    source_env_id="image and language tasks (CelebA, Sent140, CIFAR-10, FEMNIST)",
    budget=60_000,
    parallel_envs="hybrid: 8 workers (clients) x 2 envs, lognormal speeds (cluster "
    "heterogeneous); FedBuff buffer K = 4",
    evaluation="target: CartPole-v1's reward threshold 475 (greedy, 10 episodes); the run "
    "stops when reached and its virtual time is the time to target",
    return_convention="undiscounted episode return",
    source_seeds=None,
    config={
        "env": "CartPole-v1",
        "workers": 8,
        "envs_per_worker": 2,
        "cluster": "heterogeneous",
        "stop_when_solved": True,
        "eval_every": 2_500,  # the resolution of the time to target
        **LOCAL_TRAINING,
    },
    arms=(
        # every client takes part in every round: FedBuff's clients all run at once
        Arm("fedavg", {"scheduler": "fedavg", "client_fraction": 1.0}),
        Arm(
            "fedbuff K=4",
            {"scheduler": f"{FEDBUFF_PATH}:FedBuff", "scheduler_args": {"buffer_size": 4}},
        ),
    ),
    kind="time_ratio",
    metric=time_to_target,
    metric_name="virtual s to target",
    deviations=(
        "an RL task (CartPole-v1), not supervised learning: the target is a return, not "
        "an accuracy",
        "8 persistent workers with lognormal speeds stand in for a large client population "
        "with measured device speeds",
        "the ratio is of medians over seeds, unsolved runs counted as never arriving",
    ),
    notes="agrees when FedBuff's median time to target is shorter (ratio > 1)",
)
