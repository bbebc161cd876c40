"""Survival of worker faults on the processes and ray runtimes.

    python benchmarks/faults.py [--runs 10] [--kills 5] [--runtimes processes ray]

For each runtime, ``--runs`` seeds are trained twice: once fault-free and once with
``--kills`` workers SIGKILLed at seeded random times (``--inject-worker-faults``,
rate chosen so the expected kills per run equal ``--kills``). The table reports
runs completed, worker restarts, updates lost and the final evaluation return
against the fault-free runs of the same seeds. Nothing asserts on time.
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
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--runtimes", nargs="+", default=["processes", "ray"])
    parser.add_argument("--budget", type=int, default=30_000)
    parser.add_argument("--scheduler", default="async")
    args = parser.parse_args()

    tasks = args.budget // (2 * 5)  # env steps per task: envs_per_worker × rollout_steps
    rate = min(0.5, args.kills / tasks)
    print(
        f"CartPole-v1, {args.scheduler}, 2 workers, {args.budget:,} env steps, "
        f"kill rate {rate:.4f} per task (≈{args.kills} kills a run)\n"
    )
    print(
        "| runtime | completed | restarts (total) | updates lost (total) | "
        "eval return, faults (median) | eval return, no faults (median) |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        for runtime in args.runtimes:
            completed, restarts, lost, with_faults, without = 0, 0, 0, [], []
            for seed in range(args.runs):
                base = TrainConfig(
                    runtime=runtime,
                    scheduler=args.scheduler,
                    workers=2,
                    seed=seed,
                    total_env_steps=args.budget,
                    stop_when_solved=False,
                    progress=False,
                )
                clean = hybrid.train(base.replace(out=str(Path(tmp, f"{runtime}-{seed}-clean"))))
                without.append(clean.final_eval_return)
                try:
                    faulty = hybrid.train(
                        base.replace(
                            inject_worker_faults=rate,
                            out=str(Path(tmp, f"{runtime}-{seed}-faults")),
                        )
                    )
                except Exception as exc:  # a run that did not survive is the finding
                    print(f"  {runtime} seed {seed} failed: {type(exc).__name__}: {exc}")
                    continue
                completed += 1
                last = faulty.metrics("train")[-1]
                restarts += int(last.get("sched/worker_restarts", 0))
                lost += int(last.get("sched/lost_updates", 0))
                with_faults.append(faulty.final_eval_return)
            print(
                f"| {runtime} | {completed}/{args.runs} | {restarts} | {lost} | "
                f"{statistics.median(with_faults) if with_faults else float('nan'):.1f} | "
                f"{statistics.median(without):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
