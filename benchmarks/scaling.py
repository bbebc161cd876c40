"""Throughput scaling of the real runtimes, with the serial runtime beside them; time to solve.

    python benchmarks/scaling.py [--workers 1 2] [--runtimes serial processes ray]
                                 [--schedulers async sync] [--steps 30000] [--repeats 3]
                                 [--solve-seeds 0 1 2] [--ray-address HOST:PORT|auto]

Part 1: env steps per second of training wall time (evaluation and worker start-up
excluded, as in summary.json), median (and range) of ``--repeats`` fixed-budget runs
per cell, CartPole-v1, ``stop_when_solved`` off. Each repeat runs every cell once, and
the ratios are medians of ratios taken within a repeat, so load from other jobs that
comes and goes skews them less. "vs 1 worker" is the speed-up over the same runtime
and scheduler with one worker; "vs processes" compares with the processes runtime at
the same scheduler and worker count. The serial runtime's workers are simulated in
one process, so its rows show what the loop costs without any parallelism.
"processes" is Hogwild! (under async the workers step the shared θ and optimizer
statistics themselves); "processes-locked" is ``--no-lock-free``, where the main
process applies every update.

The "independent" rows are the ceiling for this machine: k unrelated one-worker
serial runs started at once in k processes, nothing shared and nothing
communicated, their env steps/s summed. No runtime can scale better than they do;
on a virtual machine whose vCPUs share physical cores (SMT siblings on the host)
the ceiling itself stays well below k×.

Part 2: wall time to solve CartPole-v1 with processes/async against serial/async
(same workers, the largest of ``--workers``), median over seeds.

``--ray-address`` runs the ray cells on a running cluster (``ray start``; see README, "On a
cluster") instead of a local Ray: the workers then spread over its nodes, and "vs processes"
compares the cluster with this one machine.

Prints Markdown. Nothing here asserts on time: other jobs on the machine, thermal
limits and the core count all move these figures. On a 16-core machine run
``--workers 1 2 4 8 16``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hybrid
from hybrid import TrainConfig
from hybrid.runtimes._parallel import physical_cores


def base_config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        env="CartPole-v1",
        envs_per_worker=args.envs_per_worker,
        rollout_steps=args.rollout_steps,
        progress=False,
    )


def run(cfg: TrainConfig) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # oversubscription is the point here
        return hybrid.train(cfg).summary


@contextlib.contextmanager
def ray_session(runtime: str, workers: int, address: str = "") -> Iterator[None]:
    """One Ray for all of its cells (started or joined as the runtime would), down after them.

    Starting Ray takes ~5 s per run; its daemons are stopped before other runtimes run,
    so that they do not take CPU from them. With ``address`` the cells join that cluster.
    """
    if runtime != "ray":
        yield
        return
    from hybrid.runtimes.ray import connect

    session = connect(address, workers)  # None: a Ray we did not start
    try:
        yield
    finally:
        if session is not None:
            session.close()  # Ray, its processes and the run's private token directory


Cell = tuple[str, str, int]  # runtime, scheduler, workers


def throughput(args: argparse.Namespace, tmp: Path) -> dict[Cell, list[float]]:
    """Env steps/s of every cell, repeat by repeat.

    The repeat loop is the outer one, so that a burst of load from other jobs falls on
    every cell of one repeat alike rather than on all repeats of one cell; ratios are
    then taken within a repeat (see ``paired``).
    """
    rates: dict[Cell, list[float]] = {}
    for repeat in range(args.repeats):
        for runtime in args.runtimes:
            with ray_session(runtime, max(args.workers), args.ray_address):
                for scheduler in args.schedulers:
                    for workers in args.workers:
                        cfg = base_config(args).replace(
                            runtime=runtime.removesuffix("-locked"),
                            lock_free=not runtime.endswith("-locked"),
                            scheduler=scheduler,
                            workers=workers,
                            seed=repeat,
                            total_env_steps=args.steps,
                            stop_when_solved=False,
                            eval_every=10**9,  # one evaluation, after the clock has stopped
                            eval_episodes=1,
                            out=str(tmp / f"{runtime}-{scheduler}-{workers}-{repeat}"),
                        )
                        if runtime == "ray":
                            cfg = cfg.replace(ray_address=args.ray_address)
                        rate = run(cfg)["env_steps_per_s"]
                        rates.setdefault((runtime, scheduler, workers), []).append(rate)
                        print(
                            f"  repeat {repeat}: {runtime}/{scheduler} workers={workers}: "
                            f"{rate:,.0f}",
                            file=sys.stderr,
                            flush=True,
                        )
    return rates


def _independent_rate(job: tuple[int, int, str]) -> float:
    seed, steps, out = job
    cfg = TrainConfig(env="CartPole-v1", progress=False, workers=1, scheduler="async")
    return float(
        run(
            cfg.replace(
                seed=seed,
                total_env_steps=steps,
                stop_when_solved=False,
                eval_every=10**9,
                eval_episodes=1,
                out=out,
            )
        )["env_steps_per_s"]
    )


def independent(args: argparse.Namespace, tmp: Path) -> dict[Cell, list[float]]:
    """The machine's ceiling: k one-worker serial runs at once in k processes, rates summed."""
    import multiprocessing

    rates: dict[Cell, list[float]] = {}
    ctx = multiprocessing.get_context("spawn")
    for repeat in range(args.repeats):
        for k in args.workers:
            jobs = [
                (repeat * 100 + i, args.steps, str(tmp / f"ind-{k}-{repeat}-{i}")) for i in range(k)
            ]
            with ctx.Pool(k) as pool:
                rate = sum(pool.map(_independent_rate, jobs))
            rates.setdefault(("independent", "–", k), []).append(rate)
            print(f"  repeat {repeat}: independent x{k}: {rate:,.0f}", file=sys.stderr, flush=True)
    return rates


def paired(rates: dict[Cell, list[float]], cell: Cell, base: Cell) -> str:
    """Median over repeats of the ratio cell/base within each repeat."""
    if cell not in rates or base not in rates:
        return "–"
    ratios = [a / b for a, b in zip(rates[cell], rates[base], strict=True)]
    return f"{statistics.median(ratios):.2f}×"


def time_to_solve(args: argparse.Namespace, tmp: Path) -> list[tuple[str, int, float, float]]:
    workers = max(args.workers)
    rows = []
    for runtime in ("processes", "serial"):
        walls, steps = [], []
        for seed in args.solve_seeds:
            summary = run(
                base_config(args).replace(
                    runtime=runtime,
                    scheduler="async",
                    workers=workers,
                    seed=seed,
                    total_env_steps=args.solve_budget,
                    out=str(tmp / f"solve-{runtime}-{seed}"),
                )
            )
            if summary["solved"]:
                walls.append(summary["train_wall_s"])
                steps.append(summary["env_steps_to_solve"])
            print(
                f"  solve {runtime}/async seed={seed}: solved={summary['solved']} "
                f"wall={summary['train_wall_s']:.1f}s steps={summary['env_steps_to_solve']}",
                file=sys.stderr,
                flush=True,
            )
        nan = float("nan")
        rows.append(
            (
                f"{runtime}/async, {workers} workers",
                len(walls),
                statistics.median(walls) if walls else nan,
                statistics.median(steps) if steps else nan,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--runtimes",
        nargs="+",
        default=["serial", "processes", "processes-locked", "ray"],
        help="processes-locked: the main process applies every update (no Hogwild!)",
    )
    parser.add_argument("--schedulers", nargs="+", default=["async", "sync"])
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per throughput run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--solve-seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    parser.add_argument("--solve-budget", type=int, default=300_000)
    parser.add_argument(
        "--envs-per-worker", type=int, default=TrainConfig.envs_per_worker, help="task size"
    )
    parser.add_argument(
        "--rollout-steps", type=int, default=TrainConfig.rollout_steps, help="task size"
    )
    parser.add_argument(
        "--ray-address",
        default="",
        metavar="ADDR",
        help="run the ray cells on this running cluster (host:port or auto); default a local Ray",
    )
    parser.add_argument(
        "--ceiling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure k independent one-worker runs at once (the machine's ceiling)",
    )
    args = parser.parse_args()
    if "ray" in args.runtimes and importlib.util.find_spec("ray") is None:
        print("ray is not installed: skipping the ray runtime", file=sys.stderr)
        args.runtimes.remove("ray")

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        rates = throughput(args, Path(tmp))
        if args.ceiling:
            rates |= independent(args, Path(tmp))
        solve = time_to_solve(args, Path(tmp)) if args.solve_seeds else []

    print(
        f"\n{platform.processor() or platform.machine()}, {physical_cores()} physical cores, "
        f"load average {load:.2f} at start; CartPole-v1, {args.steps:,} env steps per run, "
        f"{args.envs_per_worker * args.rollout_steps} env steps per task, "
        f"median of {args.repeats}.\n"
    )
    print("| runtime | scheduler | workers | env steps/s (min–max) | vs 1 worker | vs processes |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (runtime, scheduler, workers), values in rates.items():
        spread = f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"
        one = paired(rates, (runtime, scheduler, workers), (runtime, scheduler, 1))
        procs = paired(rates, (runtime, scheduler, workers), ("processes", scheduler, workers))
        print(f"| {runtime} | {scheduler} | {workers} | {spread} | {one} | {procs} |")
    if solve:
        print(f"\nTime to solve CartPole-v1 (median over seeds {args.solve_seeds}):\n")
        print("| run | solved | train wall s to solve | env steps to solve |")
        print("| --- | ---: | ---: | ---: |")
        for name, solved, wall, steps in solve:
            print(f"| {name} | {solved}/{len(args.solve_seeds)} | {wall:.1f} | {steps:,.0f} |")


if __name__ == "__main__":
    main()
