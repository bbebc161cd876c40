"""Scheduler comparison on CartPole-v1, serial runtime: steps to solve and throughput.

    python benchmarks/cartpole.py [--seeds 0 1 2] [--schedulers sync async bounded]

Prints a Markdown table of medians over seeds. Throughput is measured on
separate fixed-budget runs (no evaluation stop), so solving early does not
shorten the sample. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import hybrid
from hybrid import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--schedulers", nargs="+", default=["sync", "async", "bounded"])
    parser.add_argument("--throughput-steps", type=int, default=40_000)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scheduler in args.schedulers:
            solve, wall, sps, overhead = [], [], [], []
            for seed in args.seeds:
                base = TrainConfig(scheduler=scheduler, seed=seed, progress=False)
                solved = hybrid.train(base.replace(out=str(Path(tmp, f"{scheduler}-{seed}"))))
                steps = solved.summary["env_steps_to_solve"]
                solve.append(steps if steps is not None else float("inf"))
                wall.append(solved.summary["train_wall_s"])
                fixed = hybrid.train(
                    base.replace(
                        out=str(Path(tmp, f"{scheduler}-{seed}-fixed")),
                        total_env_steps=args.throughput_steps,
                        stop_when_solved=False,
                        eval_every=10**9,
                    )
                )
                sps.append(fixed.summary["env_steps_per_s"])
                clock_s = fixed.metrics("train")[-1]["perf/virtual_clock_s"]
                overhead.append(clock_s / fixed.summary["train_wall_s"])
            rows.append(
                (
                    scheduler,
                    statistics.median(solve),
                    sum(s != float("inf") for s in solve),
                    statistics.median(wall),
                    statistics.median(sps),
                    statistics.median(overhead),
                    solve,
                )
            )

    print(f"CartPole-v1, serial runtime, seeds {args.seeds}; medians over seeds\n")
    print(
        "| scheduler | env steps to solve | solved | train wall s (to solve) | "
        "env steps/s | virtual-clock overhead | steps to solve per seed |"
    )
    print("|---|--:|--:|--:|--:|--:|---|")
    for name, steps, n_solved, wall_s, rate, frac, per_seed in rows:
        print(
            f"| {name} | {steps:,.0f} | {n_solved}/{len(args.seeds)} | {wall_s:.1f} | "
            f"{rate:,.0f} | {100 * frac:.2f}% | {', '.join(f'{s:,.0f}' for s in per_seed)} |"
        )


if __name__ == "__main__":
    main()
