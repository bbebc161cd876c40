"""``hybrid sweep SWEEP.yaml ...``: the command line, its checks, the plan it prints and the
table it ends with."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid.config import ConfigError
from hybrid.sweep import planning
from hybrid.sweep.backends import LocalBackend, run_on_node
from hybrid.sweep.params import SweepError, _unique
from hybrid.sweep.planning import PlannedRun, RunBuilder, plan, planned_runs
from hybrid.sweep.report import SUMMARY_FILE, _result, _write_summary
from hybrid.sweep.running import execute
from hybrid.sweep.search import BayesRuns, FixedRuns, Search
from hybrid.sweep.spec import Sweep, load_sweep
from hybrid.sweep.state import Outcome, _locked, check_finished, is_finished

if TYPE_CHECKING:
    from hybrid.runtimes.ray_tasks import RayBackend


BACKENDS = ("local", "ray")


def _parser() -> argparse.ArgumentParser:
    from hybrid.flags import OneLineParser

    p = OneLineParser(
        prog="hybrid sweep",
        description="Run a wandb-format sweep file offline: grid, random or bayes search, "
        "hyperband early termination, parallel runs here or on a Ray cluster, resumable "
        "(finished runs are skipped).",
    )
    p.add_argument("sweep", help="sweep YAML in wandb's format (see sweeps/README.md)")
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        help="runs at once (default: 1 locally; with --backend ray, as many as the cluster holds)",
    )
    p.add_argument("--out", help="directory of the run directories (default runs/<yaml name>)")
    p.add_argument(
        "--max-runs", type=int, metavar="K", help="run at most K runs (overrides run_cap)"
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the random and bayes search"
    )
    p.add_argument(
        "--backend",
        default="local",
        help="local: each run a process here; ray: each run a Ray task (default local)",
    )
    p.add_argument(
        "--ray-address",
        default="",
        metavar="ADDR",
        help="with --backend ray: a running cluster (host:port or auto); default a local Ray",
    )
    p.add_argument(
        "--cpus-per-run", type=float, default=1.0, metavar="C", help="Ray resources of a run"
    )
    p.add_argument(
        "--gpus-per-run", type=float, default=0.0, metavar="G", help="Ray resources of a run"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan; run and write nothing")
    return p


def _check_args(args: argparse.Namespace) -> None:
    if args.backend not in BACKENDS:
        raise SweepError(f"--backend must be local or ray, got {args.backend!r}")
    if args.jobs is not None and args.jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {args.jobs}")
    if args.max_runs is not None and args.max_runs < 1:
        raise SweepError(f"--max-runs must be >= 1, got {args.max_runs}")
    if args.seed < 0:
        raise SweepError(f"--seed must be >= 0, got {args.seed}")
    if args.backend != "ray":
        for flag, value, default in (
            ("--ray-address", args.ray_address, ""),
            ("--cpus-per-run", args.cpus_per_run, 1.0),
            ("--gpus-per-run", args.gpus_per_run, 0.0),
        ):
            if value != default:
                raise SweepError(f"{flag} applies with --backend ray only")
    if not (math.isfinite(args.cpus_per_run) and args.cpus_per_run >= 0):
        raise SweepError(f"--cpus-per-run must be >= 0, got {args.cpus_per_run:g}")
    if not (math.isfinite(args.gpus_per_run) and args.gpus_per_run >= 0):
        raise SweepError(f"--gpus-per-run must be >= 0, got {args.gpus_per_run:g}")


def _check_bayes(sweep: Sweep, build: RunBuilder) -> None:
    """Before anything runs, every parameter's extremes (and each categorical value) must make
    a config that hybrid train accepts: the proposals come later, one batch at a time."""
    middle = {p.name: p.draw(0.5) for p in sweep.params}
    for p in sweep.params:
        if p.distribution == "categorical":
            values = _unique(p.spec["values"])
        else:
            values = [p.draw(0.0), p.draw(1.0 - 1e-12)]
        for value in values:
            build({**middle, p.name: value})


def sweep_command(argv: Sequence[str]) -> int:
    """``hybrid sweep SWEEP.yaml [--jobs N] [--out DIR] [--max-runs K] [--seed S]
    [--backend local|ray] [--ray-address ADDR] [--dry-run]``.

    Exit 0 when every run finished (or was pruned), 1 when a run failed, 2 on bad input
    (nothing started), 130 when interrupted.
    """
    from hybrid.flags import fail
    from hybrid.schedulers import defer_user_schedulers

    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # --help, or a bad flag (reported in one line)
        return int(exc.code or 0)
    try:
        _check_args(args)
        # --dry-run promises to run nothing: a scheduler named by a path is not imported
        with defer_user_schedulers() if args.dry_run else contextlib.nullcontext():
            sweep = load_sweep(args.sweep)
            out = Path(args.out) if args.out else Path("runs") / sweep.name
            if out.exists() and not out.is_dir():
                raise SweepError(f"--out {out} is a file")
            searching = sweep.method == "bayes" or sweep.early_terminate is not None
            if searching and importlib.util.find_spec("optuna") is None:
                what = "method: bayes" if sweep.method == "bayes" else "early_terminate"
                raise SweepError(
                    f"{sweep.path}: {what} needs Optuna: pip install 'hybrid-rl[sweeps]'"
                )
            if sweep.method == "bayes":
                runs: list[PlannedRun] = []
                count = planned_runs(sweep, args.max_runs)
                build = RunBuilder(sweep, out)
                _check_bayes(sweep, build)
                done = {d.name for d in out.iterdir() if is_finished(d)} if out.is_dir() else set()
                stale = set()
            else:
                runs = plan(sweep, out, args.max_runs, args.seed)
                count = len(runs)
                done = {r.name for r in runs if is_finished(r.run_dir)}
                stale = {r.name for r in runs if r.name not in done and r.run_dir.exists()}
            for run in runs:
                if run.name in done:
                    check_finished(run, sweep)
                elif run.name in stale and not run.run_dir.is_dir():
                    raise SweepError(f"{run.run_dir} is a file, not a run directory")
    except SweepError as exc:
        return fail("sweep", str(exc))

    for note in sweep.notes:
        print(f"hybrid sweep: note: {note}", file=sys.stderr)
    todo = [r for r in runs if r.name not in done]
    seeded = f", seeded by --seed {args.seed}" if sweep.method in ("random", "bayes") else ""
    where = "here" if args.backend == "local" else "on Ray"
    jobs_text = f"{args.jobs} at a time" if args.jobs else "as many at once as it holds"
    if args.backend == "local":
        jobs_text = f"{args.jobs or 1} at a time"
    if sweep.method == "bayes":
        state = f"{len(done)} finished in {out}, proposed in batches"
    else:
        state = f"{len(done)} complete, {len(todo)} to run"
    print(
        f"hybrid sweep: {sweep.path.name}: {sweep.method}, {count} runs -> {out}{seeded}: "
        f"{state}, {jobs_text} {where}"
    )
    if sweep.early_terminate is not None:
        hb = sweep.early_terminate
        print(
            f"hybrid sweep: early_terminate: Optuna's Hyperband on {sweep.metric.eval_key} "
            f"(min_iter {hb.min_iter}, max_iter {hb.max_iter or 'auto'}, eta {hb.eta})"
        )
    if args.dry_run:
        named = {r.config.scheduler for r in runs}
        for p in sweep.params:  # bayes plans no runs up front
            if p.name == "scheduler":
                named |= {str(v) for v in p.spec.get("values", [p.spec.get("value")])}
        for name in sorted(n for n in named if ":" in n):
            print(
                f"hybrid sweep: note: --dry-run imports no scheduler file: {name} and its "
                "scheduler_arg values are checked when the sweep runs",
                file=sys.stderr,
            )
        for run in runs:
            state = "complete" if run.name in done else "incomplete" if run.name in stale else "new"
            # planning.TRAIN_COMMAND, read now: setting hybrid.sweep.TRAIN_COMMAND changes it
            flags = " ".join(run.argv[len(planning.TRAIN_COMMAND) :])
            print(f"  {state:<10} {run.name}: hybrid train {flags}")
        if sweep.method == "bayes":
            print("  (bayes proposes each batch from the results of the runs before it)")
        return 0

    failed: list[Outcome] = []
    outcomes: list[Outcome] = []
    finished = 0
    total = len(todo) if sweep.method != "bayes" else count

    def report(outcome: Outcome) -> None:
        nonlocal finished
        finished += 1
        outcomes.append(outcome)
        head = f"[{finished}/{total}] {outcome.run.name}"
        if outcome.status == "done":
            print(f"{head}: done in {outcome.seconds:.1f} s, {_result(outcome.run.run_dir)}")
        elif outcome.status == "pruned":
            print(f"{head}: {outcome.message} after {outcome.seconds:.1f} s")
        else:
            failed.append(outcome)
            print(f"{head}: FAILED after {outcome.seconds:.1f} s: {outcome.message}")
        sys.stdout.flush()

    backend: LocalBackend | RayBackend | None = None
    try:
        with _locked(out):
            for run in todo:  # hybrid train refuses a non-empty --out
                if run.name in stale and not is_finished(run.run_dir):
                    shutil.rmtree(run.run_dir)
            log_dir = out / ".logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            if args.backend == "ray":
                from hybrid.runtimes.ray_tasks import RayBackend  # Ray only when asked for

                try:
                    backend = RayBackend(
                        log_dir, args.ray_address, args.cpus_per_run, args.gpus_per_run, run_on_node
                    )
                except ConfigError as exc:
                    raise SweepError(str(exc).replace("ray_address", "--ray-address", 1)) from None
                jobs = args.jobs or backend.capacity
            else:
                backend = LocalBackend(log_dir)
                jobs = args.jobs or 1
            search = (
                Search(sweep, args.seed)
                if sweep.method == "bayes" or sweep.early_terminate
                else None
            )
            source: FixedRuns | BayesRuns
            if sweep.method == "bayes":
                assert search is not None
                source = BayesRuns(search, build, count, jobs, done)
            else:
                source = FixedRuns(todo)
                if search is not None:  # one trial per run, numbered in plan order
                    for run in runs:
                        trial = search.ask()
                        if run.name in done:
                            search.replay(run, trial)
                        else:
                            search.bind(run, trial)
            execute(source, jobs, log_dir, report, backend=backend, search=search)
    except SweepError as exc:
        return fail("sweep", str(exc))
    except KeyboardInterrupt:
        print(
            f"hybrid sweep: interrupted after {finished} of {total} runs; "
            "rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        if backend is not None:
            backend.close()

    pruned = sum(o.status == "pruned" for o in outcomes)
    skipped = [*(r for r in runs if r.name in done)]
    if isinstance(source, BayesRuns):
        skipped = source.skipped
        if source.stopped_because:
            print(f"hybrid sweep: bayes stopped early: {source.stopped_because}", file=sys.stderr)
    _write_summary(out, sweep, args.seed, outcomes, skipped)
    print(f"\n{'done':<8} {finished - len(failed) - pruned:>4}")
    if sweep.early_terminate is not None:
        print(f"{'pruned':<8} {pruned:>4}  (early_terminate: hyperband)")
    print(f"{'skipped':<8} {len(skipped):>4}  (already finished)")
    print(f"{'failed':<8} {len(failed):>4}")
    print(f"summary: {out / SUMMARY_FILE}")
    for outcome in failed:
        log = out / ".logs" / f"{outcome.run.name}.err"
        print(f"  {outcome.run.name}: {outcome.message}  (log: {log})", file=sys.stderr)
    return 1 if failed else 0
