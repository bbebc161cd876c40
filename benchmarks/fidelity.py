"""Fidelity of the calibrated virtual clock: the serial runtime on a measured profile against
real runs of the same training on the same machine, cell by cell, over seeds.

    python benchmarks/fidelity.py [--quick] [--seeds 0 1 2] [--steps 20000]
                                  [--envs CartPole-v1 Acrobot-v1] [--runtimes processes ray]
                                  [--workers 1 2 4 8] [--ray-workers 1 2 4]
                                  [--schedulers async sync bounded] [--hybrid-workers 2 4]
                                  [--fedavg] [--fedavg-deadline-s S] [--extrapolate]
                                  [--profile P.json ...] [--reuse-real DIR]
                                  [--out runs/fidelity]

First each (runtime, env) is calibrated as ``hybrid calibrate --runtime R`` does (in-process
costs, then short real runs of the runtime whose spans fit the task cost's distribution, the
server's round trip, Hogwild!'s read delay and contention), unless ``--profile`` gives one.
Then every cell (runtime × scheduler × N, per env) trains with each seed twice: on the real
runtime, and on the serial runtime with ``--cluster`` that profile. ``bounded`` runs with
s = 1; the ``hybrid`` scheduler (a2c with V-trace) on processes; ``--fedavg`` adds fedavg with
20 edge clients taking turns on 4 processes (on the clock: the profile's task costs, its
server and 4 executors; the clients' links cost nothing there, as the real processes send
θ and Δ through the pipes the profile measured), with ``--fedavg-deadline-s`` as the round
deadline of both runs (default 0: none). Per cell:

- KS: Kolmogorov–Smirnov distance between the real and virtual staleness histograms, the
  median over seeds; its noise floor is the median KS between the real runs of two seeds.
  Target: KS ≤ max(0.1, floor + 0.05);
- steps/s: env steps per second, real (training wall time) and virtual (virtual time),
  medians over seeds, and the median of the per-seed ratios virtual / real; target ±15%;
- waiting: the share of its time a worker is not computing (``hybrid.timeline``), real
  and virtual, medians; target within ±10 points;
- for a miss, the measured difference the model lacks: mean task cost in a worker and
  median gap from a result to the next start, real minus virtual.

``--extrapolate`` calibrates processes held to one core (``hybrid calibrate --cores 1``), then
predicts the processes cells at N = 2 and 4 on this machine's cores and prints the error of
steps/s beside the real figure (target ≤ 20%). ``--quick``: processes, async and sync,
N = 1, 2, 4, CartPole-v1, seeds 0 and 1, 5,000 env steps.

``--reuse-real DIR`` trains only the virtual runs and reads each real run from an earlier
invocation's ``--out`` (``DIR/<cell>-s<seed>-real``): the clock re-measured against real runs
taken on a quiet machine while this one is busy. Its profiles are fitted again to its own
calibration runs (``DIR/calibration-profile-*``): after a change to the clock, the same
measurements modelled anew, nothing run for real. ``--profile`` takes a profile as it is
instead; without either, the calibration runs now.

``--report-only`` trains nothing and prints the table of the runs an earlier invocation
(interrupted, perhaps) finished in ``--out``: per cell, the seeds whose real and virtual
runs both finished.

The real runs are noisy: other jobs on a shared machine move them (the load average is
printed with the table). Nothing here asserts; it prints Markdown and writes results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling import ray_session  # benchmarks/ is on the path: this script's folder

import hybrid
from hybrid import TrainConfig
from hybrid.calibrate import (
    describe_profile,
    held_to_cores,
    measure,
    measure_runtime,
    profile_for,
    span_stats,
)
from hybrid.cluster_profile import ClusterProfile
from hybrid.defaults import apply_env_defaults
from hybrid.runtimes._parallel import physical_cores
from hybrid.stats import ks_distance

KS_TARGET = 0.1
KS_OVER_FLOOR = 0.05
RATE_TOLERANCE = 0.15
WAITING_POINTS = 0.10
EXTRAPOLATION_TARGET = 0.20


@dataclasses.dataclass(frozen=True)
class Cell:
    runtime: str
    scheduler: str
    workers: int
    env: str
    changes: tuple[tuple[str, Any], ...] = ()
    virtual_changes: tuple[tuple[str, Any], ...] = ()
    """Settings of the virtual run only (the modelled machine's, which a real run refuses)."""

    @property
    def name(self) -> str:
        return f"{self.env}-{self.runtime}-{self.scheduler}-{self.workers}"


def cells(args: argparse.Namespace) -> list[Cell]:
    out: list[Cell] = []
    for env in args.envs:
        for runtime in args.runtimes:
            workers = args.ray_workers if runtime == "ray" else args.workers
            for scheduler, n in itertools.product(args.schedulers, workers):
                bound = (("staleness_bound", 1),) if scheduler == "bounded" else ()
                out.append(Cell(runtime, scheduler, n, env, bound))
        if "processes" in args.runtimes:
            for n in args.hybrid_workers:
                out.append(Cell("processes", "hybrid", n, env, (("learner_batch", 2),)))
            if args.fedavg:
                fed: tuple[tuple[str, Any], ...] = (("clients", 20), ("local_steps", 2))
                if args.fedavg_deadline_s:
                    # both runs: wall seconds from dispatch on processes, virtual on the clock
                    fed += (("round_deadline_s", args.fedavg_deadline_s),)
                # a real executor gets θ and sends Δ over its pipe, which the profile's
                # dispatch and receive costs already measure: no edge link on top
                free_links = (("client_uplink_mbps", 1e9), ("client_downlink_mbps", 1e9))
                out.append(Cell("processes", "fedavg", 4, env, fed, free_links))
    return out


def base_config(args: argparse.Namespace, env: str, seed: int) -> TrainConfig:
    cfg = TrainConfig(
        env=env,
        algo=args.algo,
        seed=seed,
        total_env_steps=args.steps,
        stop_when_solved=False,
        eval_every=2**62,  # evaluation counts in neither clock; one at the end
        eval_episodes=1,
        checkpoint_every=0,
        progress=False,
    )
    return apply_env_defaults(cfg, keep={"algo"}).replace(env_defaults=False)


def train(cfg: TrainConfig) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # oversubscription is the point at N=8
        result = hybrid.train(cfg, workers=cfg.workers)
    assert result.summary is not None
    return run_figures(result.run_dir, result.summary)


def run_figures(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A finished run's figures, from its summary.json and spans.jsonl."""
    stats = span_stats(run_dir, summary, warm_up=1)
    return {
        "steps_per_s": stats.steps_per_s,
        "staleness_histogram": stats.staleness_histogram,
        "staleness_mean": summary["staleness_mean"],
        "waiting": stats.waiting,
        "task_mean_s": statistics.fmean(stats.durations) if stats.durations else None,
        "gap_median_s": statistics.median(stats.gaps) if stats.gaps else None,
        "late_dropped": summary.get("late_dropped", 0),  # a round deadline's victims
    }


def calibrate(
    args: argparse.Namespace, runtime: str, env: str, out: Path, cores: int | None = None
) -> Path:
    """Calibrate (runtime, env) as ``hybrid calibrate`` does; the profile's path. With
    ``--reuse-real``, the earlier invocation's profile is fitted again to its own
    calibration runs (the clock's model anew, nothing measured again) where it has them."""
    cfg = base_config(args, env, 0)
    suffix = f"-{cores}core" if cores else ""
    path = out / f"profile-{runtime}-{env}{suffix}.json"
    work_dir = out / f"calibration-{path.stem}"
    shutil.rmtree(work_dir, ignore_errors=True)  # a --report-only run calibrates again
    earlier = Path(args.reuse_real or out) / path.name
    earlier_runs = earlier.parent / work_dir.name
    if args.reuse_real and earlier.exists() and earlier_runs.is_dir():
        fitted = ClusterProfile.load(earlier)
        # the clock's fit runs as long as the real runs it is fitted to were
        run_s = fitted.fit.get("seconds_per_run", args.run_s)
        profile = measure_runtime(cfg, fitted, run_s, work_dir, refit_from=earlier_runs)
    else:
        with held_to_cores(cores):
            profile = profile_for(measure(cfg, args.budget_s), runtime)
            profile = measure_runtime(cfg, profile, args.run_s, work_dir, repeats=args.repeats)
    profile.save(path)
    print(f"calibrated {runtime} / {env}{suffix} ({path}):\n{describe_profile(profile)}\n")
    return path


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def finished(run_dir: Path) -> dict[str, Any] | None:
    """The figures of a run ``--report-only`` finds finished in ``run_dir``, else None."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return run_figures(run_dir, summary)


def reported_cell(args: argparse.Namespace, cell: Cell, out: Path) -> dict[str, Any] | None:
    """A cell's row from the runs an earlier (perhaps interrupted) invocation finished:
    the seeds whose real and virtual runs both finished."""
    reals, virtuals, seeds = [], [], []
    for seed in args.seeds:
        where = out / f"{cell.name}-s{seed}"
        real_dir = Path(args.reuse_real or out) / f"{cell.name}-s{seed}-real"
        real, virtual = finished(real_dir), finished(Path(str(where) + "-v"))
        if real is not None and virtual is not None:
            reals.append(real)
            virtuals += [virtual] if virtual is not None else []
            seeds.append(seed)
    return cell_row(cell, reals, virtuals) | {"seed_list": seeds} if reals else None


def run_cell(
    args: argparse.Namespace, cell: Cell, profile: Path | None, out: Path
) -> dict[str, Any]:
    reals, virtuals = [], []
    for seed in args.seeds:
        cfg = base_config(args, cell.env, seed).replace(
            scheduler=cell.scheduler, workers=cell.workers, **dict(cell.changes)
        )
        where = out / f"{cell.name}-s{seed}"
        if args.reuse_real:  # an earlier invocation's real run (a quiet moment's, say)
            reused = Path(args.reuse_real) / f"{cell.name}-s{seed}-real"
            if (real := finished(reused)) is None:
                sys.exit(f"--reuse-real: no finished run {str(reused)!r} for this cell and seed")
            reals.append(real)
        else:
            reals.append(train(cfg.replace(runtime=cell.runtime, out=str(where) + "-real")))
        if profile is not None:
            virtual = cfg.replace(runtime="serial", cluster=str(profile), out=str(where) + "-v")
            virtuals.append(train(virtual.replace(**dict(cell.virtual_changes))))
    return cell_row(cell, reals, virtuals)


def cell_row(cell: Cell, reals: list[dict], virtuals: list[dict]) -> dict[str, Any]:
    row: dict[str, Any] = {"cell": dataclasses.asdict(cell), "real": reals, "virtual": virtuals}
    row["seeds"] = len(reals)
    pairs = list(itertools.combinations(reals, 2))
    row["noise_floor"] = median(
        [ks_distance(a["staleness_histogram"], b["staleness_histogram"]) for a, b in pairs]
    )
    if virtuals:
        row["ks"] = median(
            [
                ks_distance(r["staleness_histogram"], v["staleness_histogram"])
                for r, v in zip(reals, virtuals, strict=True)
            ]
        )
        row["rate_ratio"] = median(
            [v["steps_per_s"] / r["steps_per_s"] for r, v in zip(reals, virtuals, strict=True)]
        )
    return row


def verdicts(row: dict[str, Any]) -> dict[str, bool]:
    if not row["virtual"]:
        return {"ks": False, "rate": False, "waiting": False}
    floor = row["noise_floor"] if row["noise_floor"] == row["noise_floor"] else 0.0
    waiting_real = median([r["waiting"] for r in row["real"]])
    waiting_virtual = median([v["waiting"] for v in row["virtual"]])
    return {
        "ks": row["ks"] <= max(KS_TARGET, floor + KS_OVER_FLOOR),
        "rate": abs(row["rate_ratio"] - 1) <= RATE_TOLERANCE,
        "waiting": abs(waiting_real - waiting_virtual) <= WAITING_POINTS,
    }


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def spread(runs: list[dict[str, Any]]) -> str:
    """The real runs' own steps/s over their median, lowest–highest: the pace one seed's
    run may land at on this machine, beside which a miss of the clock is read."""
    rates = [r["steps_per_s"] for r in runs]
    middle = median(rates)
    return f"{min(rates) / middle:.2f}–{max(rates) / middle:.2f}"


def table(rows: list[dict[str, Any]], args: argparse.Namespace, loads: list[str]) -> str:
    lines = [
        f"{args.algo}, {args.steps:,} env steps, seeds {args.seeds} (per cell: "
        f"{', '.join(sorted({str(r.get('seeds', len(r['real']))) for r in rows}))}), "
        "bounded s = 1; "
        f"{platform.node()}, {physical_cores()} cores; load average (1/5/15 min) "
        f"{loads[0]} before, {loads[-1]} after"
        f"{f' (the real runs reused from {args.reuse_real})' if args.reuse_real else ''}. "
        f"Targets: KS ≤ max({KS_TARGET}, floor + "
        f"{KS_OVER_FLOOR}), steps/s within ±{RATE_TOLERANCE:.0%}, waiting within "
        f"±{WAITING_POINTS * 100:.0f} points.",
        "",
        "| env | runtime | scheduler | N | KS τ (floor) | τ mean real / virtual | "
        "steps/s real / virtual | virtual / real (real runs' range) | waiting real / virtual | "
        "what the model lacks (real − virtual) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        cell, real, virtual = row["cell"], row["real"], row["virtual"]
        ok = verdicts(row)
        head = f"| {cell['env']} | {cell['runtime']} | {cell['scheduler']} | {cell['workers']} |"
        rate_real = median([r["steps_per_s"] for r in real])
        if not virtual:
            lines.append(
                f"{head} not modelled ✗ | {median([r['staleness_mean'] for r in real]):.2f} / — |"
                f" {rate_real:,.0f} / — | — ✗ | {median([r['waiting'] for r in real]):.1%} / — ✗"
                " | no virtual run |"
            )
            continue
        lacks = ""
        if not all(ok.values()):
            task = median(
                [r["task_mean_s"] - v["task_mean_s"] for r, v in zip(real, virtual, strict=True)]
            )
            gap = median(
                [r["gap_median_s"] - v["gap_median_s"] for r, v in zip(real, virtual, strict=True)]
            )
            lacks = f"task {task * 1e3:+.2f} ms, gap {gap * 1e3:+.2f} ms"
        if any(name == "round_deadline_s" for name, _ in cell["changes"]):
            late = (
                f"late updates dropped {median([r.get('late_dropped', 0) for r in real]):.0f}"
                f" / {median([v.get('late_dropped', 0) for v in virtual]):.0f}"
            )
            lacks = f"{lacks}; {late}" if lacks else late
        lines.append(
            f"{head} {row['ks']:.3f} ({row['noise_floor']:.3f}) {mark(ok['ks'])} | "
            f"{median([r['staleness_mean'] for r in real]):.2f} / "
            f"{median([v['staleness_mean'] for v in virtual]):.2f} | "
            f"{rate_real:,.0f} / {median([v['steps_per_s'] for v in virtual]):,.0f} | "
            f"{row['rate_ratio']:.2f} {mark(ok['rate'])} ({spread(real)}) | "
            f"{median([r['waiting'] for r in real]):.1%} / "
            f"{median([v['waiting'] for v in virtual]):.1%} {mark(ok['waiting'])} | {lacks} |"
        )
    modelled = [r for r in rows if r["virtual"]]
    counts = {k: sum(verdicts(r)[k] for r in rows) for k in ("ks", "rate", "waiting")}
    lines += [
        "",
        f"Cells: {len(rows)} ({len(modelled)} modelled). Pass: KS {counts['ks']}, "
        f"steps/s {counts['rate']}, waiting {counts['waiting']}.",
    ]
    return "\n".join(lines)


def extrapolation(
    args: argparse.Namespace, rows: list[dict[str, Any]], out: Path
) -> list[dict[str, Any]]:
    """Calibrated on one core, predicted on this machine's cores: the 2-core cells."""
    cores = physical_cores()
    one_core = ClusterProfile.load(calibrate(args, "processes", args.envs[0], out, cores=1))
    predicted = dataclasses.replace(one_core, cores=cores)
    path = out / "profile-one-core-predicting.json"
    predicted.save(path)
    results = []
    for row in rows:
        cell = row["cell"]
        if not (
            cell["runtime"] == "processes"
            and cell["env"] == args.envs[0]
            and cell["workers"] in (2, 4)
            and cell["scheduler"] in ("async", "sync", "bounded")
        ):
            continue
        ratios = []
        for seed, real in zip(row.get("seed_list", args.seeds), row["real"], strict=True):
            cfg = base_config(args, cell["env"], seed).replace(
                scheduler=cell["scheduler"], workers=cell["workers"], **dict(cell["changes"])
            )
            where = out / f"x-{cell['scheduler']}-{cell['workers']}-s{seed}"
            shutil.rmtree(where, ignore_errors=True)  # a --report-only run predicts again
            virtual = train(cfg.replace(runtime="serial", cluster=str(path), out=str(where)))
            ratios.append(virtual["steps_per_s"] / real["steps_per_s"])
        results.append({"cell": cell, "ratio": median(ratios), "seeds": len(ratios)})
    return results


def extrapolation_table(extra: list[dict[str, Any]]) -> str:
    cores = physical_cores()
    lines = [
        "",
        "",
        f"One core → {cores} cores (calibrated with --cores 1, predicted with cores = {cores});"
        f" steps/s virtual / real, target within ±{EXTRAPOLATION_TARGET:.0%}:",
        "",
        "| scheduler | N | seeds | virtual / real |",
        "| --- | ---: | ---: | ---: |",
    ]
    for item in extra:
        ok = abs(item["ratio"] - 1) <= EXTRAPOLATION_TARGET
        lines.append(
            f"| {item['cell']['scheduler']} | {item['cell']['workers']} | {item['seeds']} | "
            f"{item['ratio']:.2f} {mark(ok)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (see above)")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Acrobot-v1"])
    parser.add_argument("--runtimes", nargs="+", default=["processes", "ray"])
    parser.add_argument("--schedulers", nargs="+", default=["async", "sync", "bounded"])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--ray-workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hybrid-workers", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--fedavg", action="store_true", help="add the fedavg row")
    parser.add_argument(
        "--fedavg-deadline-s",
        type=float,
        default=0.0,
        help="the fedavg row's round deadline, in both runs (0: none)",
    )
    parser.add_argument("--extrapolate", action="store_true", help="one core → this machine")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algo", default="a2c")
    parser.add_argument("--budget-s", type=float, default=6.0, help="in-process calibration")
    parser.add_argument("--run-s", type=float, default=2.0, help="each calibration real run")
    parser.add_argument(
        "--repeats", type=int, default=3, help="calibration real runs per cell (median pace)"
    )
    parser.add_argument(
        "--calibrate-only",
        action="store_true",
        help="write the profiles to --out and stop (then --profile them, on a busy machine)",
    )
    parser.add_argument(
        "--profile",
        nargs="*",
        default=[],
        help="reuse these profiles (one per runtime and env, from hybrid calibrate)",
    )
    parser.add_argument("--out", default="runs/fidelity", help="runs, profiles, results.json")
    parser.add_argument(
        "--reuse-real",
        default=None,
        metavar="DIR",
        help="train only the virtual runs; the real ones, and the calibration runs its "
        "profiles are fitted to again, are read from an earlier invocation's --out (run on "
        "a quiet machine, say)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: the table of the runs finished in --out (an interrupted run's)",
    )
    args = parser.parse_args(argv)
    if not args.fedavg_deadline_s >= 0:
        parser.error(f"--fedavg-deadline-s: {args.fedavg_deadline_s} must be >= 0 seconds")
    if args.quick:
        args.envs, args.runtimes, args.schedulers = (
            ["CartPole-v1"],
            ["processes"],
            ["async", "sync"],
        )
        args.workers, args.hybrid_workers, args.seeds, args.steps = [1, 2, 4], [], [0, 1], 5_000
    out = Path(args.out)
    if args.reuse_real and Path(args.reuse_real).resolve() == out.resolve():
        parser.error("--reuse-real: give another --out (the runs there are removed first)")
    if args.report_only:  # the table of the runs an earlier invocation finished in --out
        rows = [r for c in cells(args) if (r := reported_cell(args, c, out)) is not None]
        report = table(rows, args, [load_average()])
        if args.extrapolate:
            report += extrapolation_table(extrapolation(args, rows, out))
        print(report)
        return 0
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    loads = [load_average()]
    given = {}
    for path in args.profile:
        profile = ClusterProfile.load(path)
        given[(profile.runtime, profile.measured_on.get("env"))] = Path(path)
    rows = []
    for runtime in args.runtimes:
        workers = args.ray_workers if runtime == "ray" else args.workers
        with ray_session(runtime, max(workers)):
            for env in args.envs:
                if (runtime, env) not in given:
                    given[(runtime, env)] = calibrate(args, runtime, env, out)
                if args.calibrate_only:
                    continue
                for cell in [c for c in cells(args) if c.runtime == runtime and c.env == env]:
                    row = run_cell(args, cell, given.get((runtime, env)), out)
                    rows.append(row)
                    print(f"  {cell.name}: {verdicts(row)}", file=sys.stderr, flush=True)
    if args.calibrate_only:
        return 0
    loads.append(load_average())
    report = table(rows, args, loads)
    extra = extrapolation(args, rows, out) if args.extrapolate else []
    if args.extrapolate:
        report += extrapolation_table(extra)
    (out / "results.json").write_text(
        json.dumps({"rows": rows, "extrapolation": extra, "load": loads}, indent=2) + "\n"
    )
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
