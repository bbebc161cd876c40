"""``hybrid`` command line: a thin wrapper over ``hybrid.train`` and the analysis tools.

Errors in what the user typed end in one line on stderr and exit code 2,
with nothing written to disk.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from hybrid.config import ConfigError, TrainConfig
from hybrid.errors import SchedulerFault
from hybrid.flags import OneLineParser, fail, given_fields, parse_train_args

__all__ = ["fail", "main", "parse_train_args"]

USAGE = """usage: hybrid COMMAND [flags]   (hybrid --version prints the version)

commands:
  train     train one run (hybrid train --help lists every flag)
  sweep     run a wandb-format sweep YAML locally and offline (resumable, parallel)
  compare   aggregate run directories into figures and tables
  timeline  per-worker Gantt chart and Chrome trace of one run
  calibrate measure this machine into a profile for the virtual clock (--cluster PATH.json)
  demo      a small scheduler comparison on CartPole-v1
  reproduce published results beside hybrid's (hybrid reproduce --list names them)
"""


def train_command(argv: Sequence[str]) -> int:
    from hybrid.core.loop import Diverged, Interrupted
    from hybrid.trainer import train

    try:
        cfg = parse_train_args(argv)
        # the flags given are keywords: train() keeps them even at their global default
        result = train(cfg, **{name: getattr(cfg, name) for name in given_fields(argv)})
    except ConfigError as exc:
        return fail("train", str(exc))
    except Interrupted as exc:
        print(f"hybrid train: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # StartupInterrupted (a runtime starting) has a code
        print(f"hybrid train: {exc or 'interrupted'}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))
    except (Diverged, SchedulerFault) as exc:  # a run-time failure, not a bad setting
        print(f"hybrid train: {exc}", file=sys.stderr)
        return 1
    s = result.summary
    solved = f"solved at {s['env_steps_to_solve']:,} env steps" if s["solved"] else "not solved"
    print(
        f"{result.run_dir}: {solved}; final eval return {s['final_eval_return']:.1f}; "
        f"{s['env_steps']:,} env steps in {s['train_wall_s']:.1f} s "
        f"({s['env_steps_per_s']:,.0f}/s); staleness mean {s['staleness_mean']:.2f}; "
        f"{defaults_note(cfg) if not cfg.resume else 'settings as recorded in config.json'}"
    )
    return 0


def defaults_note(cfg: TrainConfig) -> str:
    """Which defaults of hybrid/defaults.py the run got (config.json has their values)."""
    if cfg.env_defaults is not True:
        return "env defaults off"
    from hybrid.defaults import defaults_for

    try:
        source = defaults_for(cfg.env, cfg)[0]
    except ConfigError:
        return "env defaults: none"
    return f"env defaults: {source}"


def compare_command(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="hybrid compare",
        description="Aggregate finished runs across seeds: IQM with bootstrap CIs, "
        "learning curves, staleness histograms, Markdown and LaTeX tables.",
    )
    parser.add_argument("runs", nargs="+", help="run directories, or folders that hold them")
    parser.add_argument("--out", required=True, help="where figures and tables are written")
    parser.add_argument("--group-by", nargs="+", default=["scheduler"], help="config fields")
    parser.add_argument("--metric", default="final_eval_return", help="a summary.json key")
    args = parser.parse_args(argv)
    import warnings

    from hybrid.analysis import AnalysisWarning, CompareError, compare, find_runs

    run_dirs = []
    for path in map(Path, args.runs):
        if not path.is_dir():
            return fail("compare", f"runs: {str(path)!r} is not a directory")
        run_dirs += [path] if (path / "config.json").exists() else find_runs(path)
    if not run_dirs:
        return fail("compare", "runs: no run directory (one holding config.json) found")
    with warnings.catch_warnings():
        warnings.simplefilter("always", AnalysisWarning)
        warnings.showwarning = _one_line_warning  # restored when the block ends
        try:
            # --out is checked before the runs are aggregated, then the report written there.
            comparison = compare(run_dirs, args.out, group_by=args.group_by, metric=args.metric)
        except CompareError as exc:
            return fail("compare", str(exc))
    print(comparison.to_markdown())
    print(f"figures and tables written to {args.out}")
    return 0


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object) -> None:
    """A skipped run as one line on stderr, not Python's file:line + source-line format."""
    print(f"hybrid compare: warning: {message}", file=sys.stderr)


def timeline_command(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="hybrid timeline",
        description="Draw a run's per-worker Gantt chart (compute, upload, wait) and export "
        "its spans as Chrome trace events (open trace.json in Perfetto or chrome://tracing).",
    )
    parser.add_argument("run", help="a run directory")
    parser.add_argument("--out", default=None, help="output folder (default: the run directory)")
    parser.add_argument("--window", type=float, default=None, help="only the first SECONDS")
    args = parser.parse_args(argv)
    if not (Path(args.run) / "spans.jsonl").exists():
        return fail("timeline", f"run: {args.run!r} holds no spans.jsonl (not a run directory?)")
    from hybrid.timeline import timeline

    paths = timeline(args.run, args.out, args.window)
    print(f"wrote {paths['png']} and {paths['trace']}")
    return 0


# What each scheduler needs beyond the shared defaults to be itself in the demo.
DEMO_SETTINGS: dict[str, dict[str, object]] = {
    "sync": {},
    "async": {},
    "bounded": {"staleness_bound": 2},
    "hybrid": {"learner_batch": 4},
    # FedAvg proper: 8 clients, half of them a round, server SGD with lr 1. Twenty local A2C
    # steps keep A3C's entropy bonus: with the classic-control recipe's 0, two of the three
    # seeds' policies collapsed before solving (all three solve with 0.01).
    "fedavg": {
        "clients": 8,
        "client_fraction": 0.5,
        "local_steps": 20,
        "optimizer": "sgd",
        "lr": 1.0,
        "ent_coef": 0.01,
    },
}


def demo_command(argv: Sequence[str]) -> int:
    """Train every scheduler on a few seeds, then compare: the README's `make demo`."""
    parser = OneLineParser(prog="hybrid demo", description=demo_command.__doc__)
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--schedulers", nargs="+", default=list(DEMO_SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--total-env-steps", type=int, default=100_000)
    parser.add_argument(
        "--cluster",
        default="heterogeneous",
        help="worker speeds on the virtual clock; with equal speeds bounded(s=4) never waits",
    )
    args = parser.parse_args(argv)
    from hybrid.trainer import train

    out = Path(args.out)
    for scheduler in args.schedulers:
        for seed in args.seeds:
            run_dir = out / f"{scheduler}-s{seed}"
            if (run_dir / "summary.json").exists():
                print(f"{run_dir}: done before, kept")
                continue
            shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted earlier attempt
            cfg = TrainConfig(
                env=args.env,
                scheduler=scheduler,
                seed=seed,
                total_env_steps=args.total_env_steps,
                cluster=args.cluster,
                out=str(run_dir),
                progress=False,
            )
            try:
                # keywords: kept even where they equal a global default (ent_coef 0.01)
                s = train(cfg, **DEMO_SETTINGS.get(scheduler, {})).summary
            except ConfigError as exc:
                return fail("demo", str(exc))
            solved = (
                f"solved at {s['env_steps_to_solve']:,} env steps"
                if s["solved"]
                else f"not solved in {s['env_steps']:,} env steps"
            )
            print(
                f"{run_dir}: {solved}, eval {s['final_eval_return']:.0f}, "
                f"{s['env_steps_per_s']:,.0f} steps/s, staleness {s['staleness_mean']:.2f}"
            )
    return compare_command(
        [str(out / f"{sch}-s{seed}") for sch in args.schedulers for seed in args.seeds]
        + ["--out", str(out / "report")]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from hybrid import __version__

        print(f"hybrid {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "train":
        return train_command(rest)
    if command == "compare":
        return compare_command(rest)
    if command == "demo":
        return demo_command(rest)
    if command == "timeline":
        return timeline_command(rest)
    if command == "calibrate":
        from hybrid.calibrate import calibrate_command

        return calibrate_command(rest)
    if command == "sweep":
        from hybrid.sweep import sweep_command

        return sweep_command(rest)
    if command == "reproduce":
        from hybrid.reproduce.cli import reproduce_command

        return reproduce_command(rest)
    return fail(
        command,
        f"unknown command {command!r}; "
        "choose one of train, sweep, compare, timeline, calibrate, demo, reproduce",
    )


if __name__ == "__main__":
    sys.exit(main())
