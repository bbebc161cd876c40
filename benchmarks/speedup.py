"""The A3C paper's scaling table beside what the calibrated virtual clock predicts.

    python benchmarks/speedup.py --profile machine.json [--cores 16] [--workers 1 2 4 8 16]
                                 [--steps 20000] [--seeds 0 1 2]

Mnih et al. 2016 (Table 2) report A3C's training speed-up with 1, 2, 4, 8 and 16 threads
on a 16-core machine: 1.0 / 2.1 / 3.7 / 6.9 / 12.5 (Atari, averaged over seven games;
their speed-up is in the time to reach a score, not raw throughput). This script runs the
serial runtime on a profile from ``hybrid calibrate`` with its ``cores`` replaced by
``--cores`` and prints the env-steps-per-second speed-up the clock predicts at each N
(async, Hogwild! on a processes profile), beside the paper's figures. A prediction for a
machine we do not have: its error is only known where the machine is at hand
(``benchmarks/gpu_check.sh`` measures the same table for real).

The predictor itself is ``hybrid.speedup`` (``hybrid reproduce a3c-speedup`` runs the same
configuration); it is re-exported here for the scripts that import it from this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybrid.cluster_profile import ClusterProfile
from hybrid.speedup import predict_speedups, predicted_rate

__all__ = ["A3C_SPEEDUPS", "main", "predict_speedups", "predicted_rate", "table"]

A3C_SPEEDUPS: dict[int, float] = {1: 1.0, 2: 2.1, 4: 3.7, 8: 6.9, 16: 12.5}
"""Mnih et al. 2016, Table 2: A3C's speed-up at 1, 2, 4, 8 and 16 threads (16 cores)."""


def table(predicted: dict[int, float], cores: int, real: dict[int, float] | None = None) -> str:
    """Markdown: N, the paper's speed-up, the clock's prediction (and a measured column)."""
    head = "| workers | A3C paper (Table 2) | clock predicts |"
    rule = "| ---: | ---: | ---: |"
    if real is not None:
        head, rule = head + " measured | predicted / measured |", rule + " ---: | ---: |"
    lines = [f"Speed-up over one worker on {cores} cores (env steps/s ratio).", "", head, rule]
    for n, value in predicted.items():
        paper = f"{A3C_SPEEDUPS[n]:.1f}×" if n in A3C_SPEEDUPS else "—"
        line = f"| {n} | {paper} | {value:.2f}× |"
        if real is not None:
            measured = real.get(n)
            line += f" {measured:.2f}× | {value / measured:.2f} |" if measured else " — | — |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="a profile from hybrid calibrate")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per virtual run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    profile = ClusterProfile.load(args.profile)
    predicted = predict_speedups(profile, args.workers, args.cores, args.steps, args.seeds)
    print(
        f"profile {args.profile} (measured on {profile.cores} cores, "
        f"{profile.measured_on.get('env')} / {profile.measured_on.get('algo')}), "
        f"seeds {args.seeds}, {args.steps:,} env steps per run\n"
    )
    print(table(predicted, args.cores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
