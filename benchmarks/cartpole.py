"""Scheduler comparison on CartPole-v1, serial runtime: steps to solve and throughput,
each next to its issue 18 target.

    python benchmarks/cartpole.py [--seeds 0 1 ... 9] [--schedulers sync async bounded]
                                  [--throughput-steps 50000] [--throughput-repeats 3]

Table 1 (sample efficiency): with the defaults, env steps and training wall seconds to
solve (mean of 10 deterministic evaluation episodes >= 475, evaluation every 2,500 env
steps, evaluation time excluded), median over seeds. The reference is Stable-Baselines3
A2C with rl-zoo's settings as measured for issue 18 on this machine (5 seeds, median
12,480 env steps, 0.81 s); SB3 is not a dependency, so its figures are quoted, not rerun.

Table 2 (throughput): env steps per second of training at a fixed budget (no evaluation
until the end, no early stop), median over ``--throughput-repeats`` runs, the schedulers
alternating so that load from other jobs skews them alike.

Prints Markdown. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hybrid
from hybrid import TrainConfig

SB3_STEPS, SB3_WALL_S = 12_480, 0.81
"""SB3 A2C (rl-zoo settings) on CartPole-v1, median of 5 seeds, measured for issue 18."""
STEPS_TARGET = {"sync": SB3_STEPS, "async": 1.5 * SB3_STEPS}
WALL_TARGET = {"sync": 0.5 * SB3_WALL_S}
RATE_TARGET = {"sync": 30_000, "async": 20_000}


def target(table: dict[str, float], scheduler: str, fmt: str) -> str:
    return f"<= {table[scheduler]:{fmt}}" if scheduler in table else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--schedulers", nargs="+", default=["sync", "async", "bounded"])
    parser.add_argument("--throughput-steps", type=int, default=50_000)
    parser.add_argument("--throughput-repeats", type=int, default=3)
    args = parser.parse_args()

    solve: dict[str, list[float]] = {s: [] for s in args.schedulers}
    wall: dict[str, list[float]] = {s: [] for s in args.schedulers}
    rate: dict[str, list[float]] = {s: [] for s in args.schedulers}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for scheduler in args.schedulers:
                cfg = TrainConfig(scheduler=scheduler, seed=seed, progress=False)
                summary = hybrid.train(
                    cfg.replace(out=str(Path(tmp, f"{scheduler}-{seed}")))
                ).summary
                steps = summary["env_steps_to_solve"]
                solve[scheduler].append(steps if steps is not None else float("inf"))
                wall[scheduler].append(
                    summary["train_wall_s"] if steps is not None else float("inf")
                )
        for repeat in range(args.throughput_repeats):
            for scheduler in args.schedulers:
                fixed = TrainConfig(
                    scheduler=scheduler,
                    seed=repeat,
                    progress=False,
                    total_env_steps=args.throughput_steps,
                    stop_when_solved=False,
                    eval_every=10**9,
                    out=str(Path(tmp, f"{scheduler}-fixed-{repeat}")),
                )
                rate[scheduler].append(hybrid.train(fixed).summary["env_steps_per_s"])

    print(f"CartPole-v1, serial runtime, defaults, seeds {args.seeds}; medians over seeds\n")
    print(
        "| scheduler | env steps to solve | target | solved | train wall s to solve | target "
        "| per seed |"
    )
    print("|---|--:|--:|--:|--:|--:|---|")
    print(f"| SB3 A2C (rl-zoo; issue 18, 5 seeds) | {SB3_STEPS:,} | | | {SB3_WALL_S} | | |")
    for s in args.schedulers:
        solved = sum(x != float("inf") for x in solve[s])
        print(
            f"| {s} | {statistics.median(solve[s]):,.0f} | {target(STEPS_TARGET, s, ',.0f')} "
            f"| {solved}/{len(args.seeds)} | {statistics.median(wall[s]):.2f} "
            f"| {target(WALL_TARGET, s, '.2f')} | {', '.join(f'{x:,.0f}' for x in solve[s])} |"
        )
    print(
        f"\nThroughput at a fixed {args.throughput_steps:,}-step budget, "
        f"median of {args.throughput_repeats} runs\n"
    )
    print("| scheduler | env steps/s | target | runs |")
    print("|---|--:|--:|---|")
    for s in args.schedulers:
        goal = f">= {RATE_TARGET[s]:,}" if s in RATE_TARGET else "-"
        runs = ", ".join(f"{x:,.0f}" for x in rate[s])
        print(f"| {s} | {statistics.median(rate[s]):,.0f} | {goal} | {runs} |")


if __name__ == "__main__":
    main()
