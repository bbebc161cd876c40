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

``predict_speedups`` is the importable part (``hybrid reproduce`` calls it).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybrid import TrainConfig
from hybrid.cluster_profile import ClusterProfile

A3C_SPEEDUPS: dict[int, float] = {1: 1.0, 2: 2.1, 4: 3.7, 8: 6.9, 16: 12.5}
"""Mnih et al. 2016, Table 2: A3C's speed-up at 1, 2, 4, 8 and 16 threads (16 cores)."""


def predicted_rate(
    profile: ClusterProfile,
    workers: int,
    steps: int = 20_000,
    seed: int = 0,
    scheduler: str = "async",
) -> float:
    """Env steps per virtual second of a run on ``profile`` with ``workers`` workers."""
    import hybrid

    measured = profile.measured_on
    cfg = TrainConfig(
        env=measured.get("env", TrainConfig.env),
        algo=measured.get("algo", TrainConfig.algo),
        envs_per_worker=measured.get("envs_per_worker", TrainConfig.envs_per_worker),
        rollout_steps=measured.get("rollout_steps", TrainConfig.rollout_steps),
        hidden=measured.get("hidden", TrainConfig.hidden),
        optimizer=measured.get("optimizer", TrainConfig.optimizer),
        scheduler=scheduler,
        workers=workers,
        seed=seed,
        total_env_steps=steps,
        stop_when_solved=False,
        eval_every=2**62,
        eval_episodes=1,
        progress=False,
        env_defaults=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        profile.save(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result = hybrid.train(cfg, cluster=str(path), out=str(Path(tmp) / "run"))
    summary = result.summary
    assert summary is not None and summary["virtual_time_s"]
    return summary["env_steps"] / summary["virtual_time_s"]


def predict_speedups(
    profile: ClusterProfile,
    workers: Sequence[int] = (1, 2, 4, 8, 16),
    cores: int = 16,
    steps: int = 20_000,
    seeds: Sequence[int] = (0,),
) -> dict[int, float]:
    """The clock's speed-up over one worker at each N of ``workers``, on ``profile`` with
    ``cores`` cores (median over ``seeds`` of the ratio to the same seed's N = 1 rate)."""
    machine = dataclasses.replace(profile, cores=cores)
    ratios: dict[int, list[float]] = {n: [] for n in workers}
    for seed in seeds:
        alone = predicted_rate(machine, 1, steps, seed)
        for n in workers:
            rate = alone if n == 1 else predicted_rate(machine, n, steps, seed)
            ratios[n].append(rate / alone)
    return {n: statistics.median(values) for n, values in ratios.items()}


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
