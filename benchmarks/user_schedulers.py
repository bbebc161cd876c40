"""Schedulers written with the public API (examples/schedulers) against built-in ones.

    python benchmarks/user_schedulers.py [--seeds 0 1 2 3 4] [--steps 50000] [--jobs 2]

DC-ASGD (Zheng et al. 2017) and FedBuff (Nguyen et al. 2022), loaded from their files in
``examples/schedulers/`` as a user would (``--scheduler path/to/file.py:Class``), beside
``async`` (A3C) and ``fedavg`` on CartPole-v1, serial runtime, eight workers whose speeds
are drawn lognormally (``--cluster heterogeneous``), so that asynchronous updates arrive
with varied staleness: the thing DC-ASGD compensates and FedBuff down-weights.

- ``async`` and DC-ASGD share A3C's defaults (2 envs × 5 steps per gradient, Adam 1e-3 on
  the server); DC-ASGD only corrects each gradient before the server's Adam sees it.
- FedBuff and ``fedavg`` share their local training (``local_steps`` Adam steps of 10 env
  steps per task) and a plain server step (``--optimizer sgd --lr 1``): ``fedavg`` waits
  for all eight workers each round, FedBuff steps whenever ``buffer_size`` Δs arrived.

A run stops when its evaluation reaches 475 or at ``--steps``. Prints one Markdown table
from ``hybrid.analysis.compare`` (which also writes figures and ``table.md`` under
``--out/report``): steps to solve as the Kaplan–Meier median over every run, an unsolved run
censored at its budget, with its 95% CI ("not reached" when fewer than half solve), the
IQM over solved runs only as a labeled extra, and the final eval return's IQM with a
stratified-bootstrap 95% CI. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "schedulers"
DC_ASGD = f"{EXAMPLES / 'dc_asgd.py'}:DCASGD"
FEDBUFF = f"{EXAMPLES / 'fedbuff.py'}:FedBuff"

LOCAL_TRAINING: dict[str, Any] = dict(local_steps=10, local_optimizer="adam", local_lr=1e-3)
"""Per task: 10 local Adam steps, each a rollout of 2 envs × 5 steps (100 env steps)."""
PLAIN_SERVER: dict[str, Any] = dict(optimizer="sgd", lr=1.0)
"""Apply the (mean) Δ as it is: FedAvg's server, and FedBuff's with η_g = 1."""


@dataclass(frozen=True)
class Setting:
    """One row of the table: a scheduler and the config fields that make it."""

    label: str
    scheduler: str
    settings: str
    """What the row changes, as a reader would pass it on the command line."""
    config: dict[str, Any] = field(default_factory=dict)


SETTINGS: list[Setting] = [
    Setting("async", "async", "A3C defaults (Adam 1e-3)"),
    Setting(
        "dc-asgd λ=0.04",
        DC_ASGD,
        "lam=0.04 (the paper's CIFAR λ₀)",
        dict(scheduler_args={"lam": 0.04}),
    ),
    Setting("dc-asgd λ=4", DC_ASGD, "lam=4", dict(scheduler_args={"lam": 4.0})),
    Setting("dc-asgd λ=25", DC_ASGD, "lam=25", dict(scheduler_args={"lam": 25.0})),
    Setting(
        "dc-asgd-a λ₀=2",
        DC_ASGD,
        "lam=2 adaptive=true (DC-ASGD-a)",
        dict(scheduler_args={"lam": 2.0, "adaptive": True}),
    ),
    Setting(
        "fedavg",
        "fedavg",
        "client_fraction=1, local_steps=10, sgd lr 1",
        dict(client_fraction=1.0, **LOCAL_TRAINING, **PLAIN_SERVER),
    ),
    Setting(
        "fedbuff K=4",
        FEDBUFF,
        "buffer_size=4, local_steps=10, sgd lr 1",
        dict(scheduler_args={"buffer_size": 4}, **LOCAL_TRAINING, **PLAIN_SERVER),
    ),
    Setting(
        "fedbuff K=2",
        FEDBUFF,
        "buffer_size=2, local_steps=10, sgd lr 1",
        dict(scheduler_args={"buffer_size": 2}, **LOCAL_TRAINING, **PLAIN_SERVER),
    ),
]


def train_one(job: dict[str, Any]) -> str:
    """One training run in a fresh process (one torch thread); returns its run directory."""
    import torch

    import hybrid

    torch.set_num_threads(1)
    return str(hybrid.train(hybrid.TrainConfig(**job)).run_dir)


def jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for setting in SETTINGS:
        for seed in args.seeds:
            out.append(
                dict(
                    scheduler=setting.scheduler,
                    exp_name=setting.label,  # the group key of the comparison
                    # A3C's global defaults, as described above: CartPole's family recipe
                    # (2 workers x 4 envs, RMSprop) would replace settings left at them.
                    env_defaults=False,
                    seed=seed,
                    workers=args.workers,
                    cluster=args.cluster,
                    total_env_steps=args.steps,
                    eval_every=args.eval_every,
                    out=str(Path(args.out, f"{_slug(setting.label)}-s{seed}")),
                    progress=False,
                    **setting.config,
                )
            )
    return out


def _slug(label: str) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in label)


def _count(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) else "–"


def _steps(x: float) -> str:
    return "not reached" if x == math.inf else _count(x)


def _ci(value: float, low: float, high: float, fmt: str = "{:,.0f}") -> str:
    if not math.isfinite(value):
        return "–"
    return f"{fmt.format(value)} [{fmt.format(low)}, {fmt.format(high)}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=50_000, help="env-step budget per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one core each)")
    parser.add_argument("--out", default="runs/user_schedulers", help="run directories, report")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--cluster", default="heterogeneous", help="worker speeds")
    parser.add_argument("--eval-every", type=int, default=2_500)
    args = parser.parse_args()

    from hybrid.analysis import compare

    started = time.perf_counter()
    todo = jobs(args)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            run_dirs = list(pool.map(train_one, todo))
    else:
        run_dirs = [train_one(job) for job in todo]
    comparison = compare(run_dirs, Path(args.out, "report"), group_by=["exp_name"])

    print(
        f"CartPole-v1, serial runtime, {args.workers} workers ({args.cluster}), "
        f"seeds {' '.join(map(str, args.seeds))}, budget {args.steps:,} env steps; "
        "IQM / median over seeds [95% stratified-bootstrap CI]\n"
    )
    print(
        "| scheduler | settings | median steps to solve, every run [95% CI] "
        "| IQM steps over solved runs, k/n | final eval return IQM [95% CI] | solved "
        "| staleness mean |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for setting in SETTINGS:
        group = comparison.groups[setting.label]
        median = group.median_steps_to_solve
        print(
            f"| {setting.label} | {setting.settings} "
            f"| {_steps(median.value)} [{_steps(median.low)}, {_steps(median.high)}] "
            f"| {_count(group.steps_to_solve_iqm.value)} ({group.n_solved}/{group.n_runs}) "
            f"| {_ci(*group.iqm, fmt='{:.1f}')} "
            f"| {group.n_solved}/{group.n_runs} "
            f"| {group.staleness_mean:.2f} |"
        )
    print(
        "\nMedian steps to solve: Kaplan–Meier over every run, an unsolved run censored at the "
        "budget; not reached when fewer than half solved. Staleness is in each scheduler's "
        "unit: updates for async and DC-ASGD, server steps for FedBuff, rounds for fedavg."
    )
    print(f"\n{len(todo)} runs in {time.perf_counter() - started:.0f} s wall", file=sys.stderr)


if __name__ == "__main__":
    main()
