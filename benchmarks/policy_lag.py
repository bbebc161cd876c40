"""Policy lag against V-trace, and prioritized against uniform replay (issue: hybrid scheduler).

    python benchmarks/policy_lag.py [--seeds 0 1 2 3 4] [--budget 60000] [--skip-replay]

Part 1 raises the policy lag of the ``hybrid`` scheduler (more actors, larger learner
batches) with and without V-trace and reports the deterministic evaluation return
after a fixed budget: IQM over seeds with a 95% stratified-bootstrap CI.
Part 2 compares Ape-X n-step Q-learning with prioritized and with uniform replay:
env steps to solve CartPole-v1. Prints Markdown tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

import hybrid
from hybrid import TrainConfig
from hybrid.stats import iqm, stratified_bootstrap_ci

LAG_SETTINGS = [  # (actors, learner batch): lag grows with actors per batch
    (4, 4),
    (16, 4),
    (32, 2),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=60_000)
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory() as tmp:
        print(f"## Policy lag, CartPole-v1, {args.budget:,} env steps, seeds {args.seeds}\n")
        print("| actors | B | correction | mean lag | max lag | eval return IQM [95% CI] |")
        print("|--:|--:|---|--:|--:|---|")
        for workers, batch in LAG_SETTINGS:
            for correction in ("vtrace", "none"):
                returns, lags, max_lags = [], [], []
                for seed in args.seeds:
                    cfg = TrainConfig(
                        scheduler="hybrid",
                        workers=workers,
                        learner_batch=batch,
                        correction=correction,
                        seed=seed,
                        total_env_steps=args.budget,
                        stop_when_solved=False,
                        progress=False,
                        out=str(Path(tmp, f"lag-{workers}-{batch}-{correction}-{seed}")),
                    )
                    result = hybrid.train(cfg)
                    returns.append(result.summary["final_eval_return"])
                    lags.append(result.summary["staleness_mean"])
                    max_lags.append(result.summary["staleness_max"])
                scores = np.array(returns)[:, None]
                low, high = stratified_bootstrap_ci(scores, iqm, reps=2000, rng=rng)
                print(
                    f"| {workers} | {batch} | {correction} | {statistics.mean(lags):.1f} | "
                    f"{max(max_lags)} | {iqm(scores):.1f} [{low:.1f}, {high:.1f}] |",
                    flush=True,
                )

        if args.skip_replay:
            return
        print(f"\n## Ape-X n-step Q: prioritized vs uniform replay, seeds {args.seeds}\n")
        print("| replay | env steps to solve (median) | solved | per seed |")
        print("|---|--:|--:|---|")
        for replay in ("prioritized", "uniform"):
            steps = []
            for seed in args.seeds:
                cfg = TrainConfig(
                    scheduler="hybrid",
                    algo="nstep_q",
                    replay=replay,
                    seed=seed,
                    total_env_steps=200_000,
                    progress=False,
                    out=str(Path(tmp, f"replay-{replay}-{seed}")),
                )
                s = hybrid.train(cfg).summary
                steps.append(s["env_steps_to_solve"] or float("inf"))
            solved = sum(x != float("inf") for x in steps)
            print(
                f"| {replay} | {statistics.median(steps):,.0f} | {solved}/{len(steps)} | "
                f"{', '.join(f'{x:,.0f}' for x in steps)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
