"""Fidelity of the calibrated virtual clock: the serial runtime on a measured profile against
real runs of the same training on the same machine.

    python benchmarks/fidelity.py [--workers 1 2 4 8] [--schedulers async sync bounded]
                                  [--runtimes processes ray] [--ray-workers 1 2]
                                  [--steps 20000] [--seed 0] [--profile PROFILE.json ...]
                                  [--out runs/fidelity]

First ``hybrid calibrate``'s measurement runs on this machine (skipped with ``--profile``,
one file per runtime, as ``hybrid calibrate --runtime processes|ray`` writes them). Then every
cell (runtime × scheduler × N workers) trains twice with the same env, algorithm, seed and
env-step budget: on the real runtime, and on the serial runtime with ``--cluster`` the
profile of that runtime. ``bounded`` runs with s = 1. Per cell it prints:

- KS: the Kolmogorov–Smirnov distance between the two staleness histograms
  (``summary.json``'s ``staleness_histogram``); target ≤ 0.1;
- steps/s: env steps per second, real (training wall time) and virtual (virtual time), and
  their ratio virtual / real; target within ±15%;
- waiting: the fraction of its time a worker spends not computing, between finishing a
  task and starting its next (``hybrid.timeline.waiting_fraction`` over ``spans.jsonl``:
  real seconds, or virtual ones), over all workers;
- final return: each run's last evaluation (evaluation time counts in neither clock).

The real runs are noisy: other jobs on the machine move them, and a loaded machine
slows the real runs while the profile holds the CPU costs measured (per thread). Run on
a quiet machine. Nothing here asserts; it prints Markdown (and writes results.json).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling import ray_session  # benchmarks/ is on the path: this script's folder

import hybrid
from hybrid import TrainConfig
from hybrid.calibrate import describe_profile, measure, profile_for
from hybrid.cluster_profile import ClusterProfile
from hybrid.stats import ks_distance
from hybrid.timeline import read_spans, waiting_fraction

KS_TARGET = 0.1
RATE_TOLERANCE = 0.15


def train(cfg: TrainConfig) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # oversubscription is the point at N=8
        # workers as a keyword: left at its default (8) in the config, the real runtimes
        # would replace it by one worker per core (hybrid/defaults.py)
        result = hybrid.train(cfg, workers=cfg.workers)
    if result.config.workers != cfg.workers:
        raise RuntimeError(f"{cfg.out} ran {result.config.workers} workers, not {cfg.workers}")
    summary = result.summary
    clock = summary["virtual_time_s"] or summary["train_wall_s"]
    return {
        "steps_per_s": summary["env_steps"] / clock,
        "staleness_histogram": summary["staleness_histogram"],
        "staleness_mean": summary["staleness_mean"],
        "waiting": waiting_fraction(read_spans(cfg.out)),
        "final_return": summary["final_eval_return"],
    }


def profiles(args: argparse.Namespace, out: Path) -> dict[str, Path]:
    """The profile file of each runtime: those ``--profile`` names, or measured now."""
    if args.profile:
        paths = {}
        for path in args.profile:
            given = ClusterProfile.load(path)
            paths[given.runtime] = Path(path)
            print(f"profile {path} ({given.runtime}):\n{describe_profile(given)}\n")
        return paths
    measured = measure(base_config(args))
    paths = {}
    for runtime in args.runtimes:
        profile = profile_for(measured, runtime)
        paths[runtime] = out / f"profile-{runtime}.json"
        profile.save(paths[runtime])
        print(f"measured for {runtime} ({paths[runtime]}):\n{describe_profile(profile)}\n")
    return paths


def base_config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        env=args.env,
        algo=args.algo,
        seed=args.seed,
        total_env_steps=args.steps,
        stop_when_solved=False,
        eval_every=max(args.steps // 4, 1),
        eval_episodes=args.eval_episodes,
        progress=False,
    )


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--ray-workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--schedulers", nargs="+", default=["async", "sync", "bounded"])
    parser.add_argument("--runtimes", nargs="+", default=["processes", "ray"])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--algo", default="a2c")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument(
        "--profile",
        nargs="*",
        default=[],
        help="reuse these profiles (one per runtime, from hybrid calibrate) instead of measuring",
    )
    parser.add_argument("--out", default="runs/fidelity", help="runs, profiles, results.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    paths = profiles(args, out)
    if missing := [r for r in args.runtimes if r not in paths]:
        parser.error(f"no profile for {', '.join(missing)}: pass one per runtime, or --runtimes")
    rows = []
    for runtime in args.runtimes:
        workers = args.ray_workers if runtime == "ray" else args.workers
        with ray_session(runtime, max(workers)):
            for scheduler in args.schedulers:
                for n in workers:
                    bound = {"staleness_bound": 1} if scheduler == "bounded" else {}
                    cfg = base_config(args).replace(scheduler=scheduler, workers=n, **bound)
                    name = f"{runtime}-{scheduler}-{n}"
                    real = train(cfg.replace(runtime=runtime, out=str(out / f"{name}-real")))
                    virtual = train(
                        cfg.replace(
                            runtime="serial",
                            cluster=str(paths[runtime]),
                            out=str(out / f"{name}-virtual"),
                        )
                    )
                    row = {
                        "runtime": runtime,
                        "scheduler": scheduler,
                        "workers": n,
                        "ks": ks_distance(
                            real["staleness_histogram"], virtual["staleness_histogram"]
                        ),
                        "rate_ratio": virtual["steps_per_s"] / real["steps_per_s"],
                        "real": real,
                        "virtual": virtual,
                    }
                    rows.append(row)
                    print(
                        f"  {name}: KS {row['ks']:.3f}, steps/s {real['steps_per_s']:,.0f} real, "
                        f"{virtual['steps_per_s']:,.0f} virtual",
                        file=sys.stderr,
                        flush=True,
                    )
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows, args))
    return 0


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.env} / {args.algo}, {args.steps:,} env steps, seed {args.seed}, bounded s = 1; "
        f"{platform.node()}. Targets: KS ≤ {KS_TARGET}, steps/s within "
        f"±{RATE_TOLERANCE:.0%}.",
        "",
        "| runtime | scheduler | N | KS τ | τ mean real / virtual | steps/s real | "
        "steps/s virtual | virtual / real | waiting real / virtual | "
        "final return real / virtual |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        real, virtual = r["real"], r["virtual"]
        ks_ok = r["ks"] <= KS_TARGET
        rate_ok = abs(r["rate_ratio"] - 1) <= RATE_TOLERANCE
        lines.append(
            f"| {r['runtime']} | {r['scheduler']} | {r['workers']} | "
            f"{r['ks']:.3f} {mark(ks_ok)} | "
            f"{real['staleness_mean']:.2f} / {virtual['staleness_mean']:.2f} | "
            f"{real['steps_per_s']:,.0f} | {virtual['steps_per_s']:,.0f} | "
            f"{r['rate_ratio']:.2f} {mark(rate_ok)} | "
            f"{real['waiting']:.1%} / {virtual['waiting']:.1%} | "
            f"{real['final_return']:.1f} / {virtual['final_return']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
