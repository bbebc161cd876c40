"""Time ``hybrid.analysis`` on synthetic run directories (default: 100 runs x 1,000 rows).

    python benchmarks/compare_speed.py [--runs 100] [--rows 1000] [--repeats 3]

Prints the median wall time of each stage over the repeats. No assertions: this is for
spotting regressions by eye, e.g. a reader that parses every row into Python objects twice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybrid.analysis import compare, load_run

SCHEDULERS = ("sync", "async", "bounded", "impala")


def write_run(d: Path, scheduler: str, seed: int, rows: int, rng: np.random.Generator) -> None:
    """A finished run: 9 train rows per eval row, plus a crash-torn tail on some runs."""
    d.mkdir(parents=True)
    steps_per_row = 200
    config = {
        "env": "CartPole-v1",
        "scheduler": scheduler,
        "runtime": "serial",
        "algo": "a2c",
        "workers": 8,
        "seed": seed,
        "total_env_steps": rows * steps_per_row,
        "staleness_bound": 4,
        "lr": 0.001,
    }
    (d / "config.json").write_text(json.dumps(config))
    skill = rng.uniform(0.5, 1.0)
    lines = []
    for i in range(rows):
        step = (i + 1) * steps_per_row
        base = {"env_steps": step, "updates": i, "wall_s": step / 4000.0, "virtual_s": step / 8000}
        if i % 10 == 9:
            ret = 500.0 * skill * (1 - np.exp(-step / 50_000)) + rng.normal(0, 10)
            lines.append({"kind": "eval", **base, "eval/return_mean": ret, "eval/return_std": 9.0})
        else:
            lines.append(
                {
                    "kind": "train",
                    **base,
                    "charts/episode_return": float(rng.uniform(0, 500)),
                    "sched/staleness_mean": 1.3,
                    "sched/staleness_max": 4,
                    "perf/env_steps_per_s": 4000.0,
                    "loss/policy": float(rng.normal()),
                    "loss/value": float(rng.uniform()),
                }
            )
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if seed % 7 == 0:
        text += '{"kind": "train", "env_st'  # torn by a crash
    (d / "metrics.jsonl").write_text(text)
    hist = rng.integers(0, 100, size=5).tolist()
    total = rows * steps_per_row
    summary = {
        "solved": skill > 0.6,
        "env_steps_to_solve": int(total * (1.2 - skill)) if skill > 0.6 else None,
        "train_wall_s": total / 4000.0,
        "env_steps": total,
        "updates": rows,
        "env_steps_per_s": 4000.0,
        "staleness_mean": 1.3,
        "staleness_max": 4,
        "staleness_histogram": hist,
        "final_eval_return": 500.0 * skill,
        "virtual_time_s": total / 8000.0,
        "final_params_sha256": "0" * 64,
    }
    (d / "summary.json").write_text(json.dumps(summary))


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = []
        for i in range(args.runs):
            sched = SCHEDULERS[i % len(SCHEDULERS)]
            d = root / "runs" / f"{sched}_{i}"
            write_run(d, sched, i // len(SCHEDULERS), args.rows, rng)
            dirs.append(d)
        mib = sum(f.stat().st_size for f in (root / "runs").rglob("*")) / 2**20

        def run_compare() -> None:
            compare(dirs, root / "out")

        stages: list[tuple[str, Callable[[], object]]] = [
            ("load_run, all rows", lambda: [load_run(d) for d in dirs]),
            ("load_run, eval rows", lambda: [load_run(d, kinds=("eval",)) for d in dirs]),
            ("compare (stats + 10 figures + tables)", run_compare),
        ]
        print(f"{args.runs} runs x {args.rows} rows ({mib:.1f} MiB), median of {args.repeats}")
        print(f"| {'stage':<40} | {'seconds':>8} |")
        print(f"| {'-' * 40} | {'-' * 8}:|")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the torn tails are expected here
            for name, fn in stages:
                print(f"| {name:<40} | {median_time(fn, args.repeats):>8.3f} |")


if __name__ == "__main__":
    main()
