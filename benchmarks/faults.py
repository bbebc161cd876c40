"""Survival of faults: workers SIGKILLed mid-run, and whole runs SIGKILLed and resumed.

    python benchmarks/faults.py [workers] [--runs 10] [--kills 5] [--runtimes processes ray]
    python benchmarks/faults.py resume [--kills 50] [--budget 4000] [--checkpoint-every 5]
        [--scheduler async|hybrid|fedavg...]
    python benchmarks/faults.py ray [--kills 3]

``workers``: for each runtime, ``--runs`` seeds are trained twice: once fault-free and once with
``--kills`` workers SIGKILLed at seeded random times (``--inject-worker-faults``,
rate chosen so the expected kills per run equal ``--kills``). The table reports
runs completed, worker restarts, updates lost and the final evaluation return
against the fault-free runs of the same seeds.

``resume``: one serial run (CartPole, async, a checkpoint every few versions) is trained
uninterrupted once; then ``--kills`` times a copy of it is SIGKILLed at a seeded random
moment of its training (a fraction of the uninterrupted run's time from its first
metrics row to its end, drawn from ``--seed``) and resumed with ``--resume`` until it
finishes (a run killed before its first checkpoint starts over, as a user would). The
table reports runs completed, metrics.jsonl
rows lost or duplicated against the uninterrupted run (train and eval rows, keyed by kind
and env steps; target 0), rows changed (same key, other values: every column but the
wall-clock ones; target 0), torn lines, and final parameter hashes equal to the
uninterrupted run's (target: all). ``--scheduler hybrid`` checks the actor-learner's rows
(its loss and policy-lag columns average the learner steps since the previous row).

``ray``: ``hybrid train --runtime ray`` and ``hybrid sweep --backend ray`` are each started
``--kills`` times and SIGKILLed once their first run is training; the table counts the
processes of their local Ray (found by its private folder in their command line or
environment) still alive, and private folders still on disk, 60 s after each kill
(target: 0 and 0). Each run is a child forked from this process, which
has imported torch and trained the uninterrupted run already, so a trial costs the
training it runs, not imports and first-call set-up.

Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import hybrid
from hybrid import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", nargs="?", choices=("workers", "resume", "ray"), default="workers")
    parser.add_argument("--runs", type=int, default=10, help="workers: seeds per runtime")
    parser.add_argument(
        "--kills", type=int, default=None, help="workers: per run (5); resume: runs killed (50)"
    )
    parser.add_argument("--runtimes", nargs="+", default=["processes", "ray"])
    parser.add_argument("--budget", type=int, default=None, help="env steps (30,000 / 4,000)")
    parser.add_argument("--scheduler", default="async")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="resume: versions")
    parser.add_argument("--seed", type=int, default=0, help="resume: seeds the kill times")
    args = parser.parse_args()
    if args.study == "resume":
        resume_study(args.kills or 50, args.budget or 4_000, args)
    elif args.study == "ray":
        ray_study(args.kills or 3)
    else:
        args.kills = 5 if args.kills is None else args.kills
        args.budget = args.budget or 30_000
        workers_study(args)


def workers_study(args: argparse.Namespace) -> None:
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


# --- resume: whole runs SIGKILLed and resumed -------------------------------------------------


def _train_child(cfg: TrainConfig) -> None:
    """A forked child's body: train (or resume), quietly; exit 0 on a finished run."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        hybrid.train(cfg)
    except BaseException as exc:  # kept beside the run: a failed resume must be explainable
        Path(f"{cfg.out}.err").write_text(f"{type(exc).__name__}: {exc}\n")
        os._exit(1)
    os._exit(0)


def _run(cfg: TrainConfig, kill_after: float | None = None) -> tuple[int, float]:
    """Run ``cfg`` in a forked child; with ``kill_after``, SIGKILL it that many seconds after
    its first metrics row (so kills land in training, not in start-up). Returns the exit
    code and the seconds from the first row to the end."""
    child = multiprocessing.get_context("fork").Process(target=_train_child, args=(cfg,))
    metrics = Path(cfg.out, "metrics.jsonl")
    child.start()
    while child.is_alive() and not (metrics.exists() and metrics.stat().st_size):
        time.sleep(0.005)
    started = time.perf_counter()
    child.join(kill_after)
    if child.is_alive():
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    return child.exitcode, time.perf_counter() - started


WALL_CLOCK = {"wall_s", "perf/env_steps_per_s", "perf/virtual_clock_s"}
"""Columns that measure elapsed time: they never repeat between two runs."""


def _rows(run_dir: Path) -> tuple[Counter, dict, int]:
    """(kind, env_steps) of every train and eval row, counted; each key's row without its
    wall-clock columns (the last one met); and the lines that do not parse."""
    keys: Counter = Counter()
    rows: dict = {}
    torn = 0
    for line in (run_dir / "metrics.jsonl").read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            torn += 1
            continue
        if row.get("kind") in ("train", "eval"):
            key = (row["kind"], row.get("env_steps"))
            keys[key] += 1
            rows[key] = {k: v for k, v in row.items() if k not in WALL_CLOCK}
    return keys, rows, torn


def resume_study(kills: int, budget: int, args: argparse.Namespace) -> None:
    base = TrainConfig(
        scheduler=args.scheduler,
        workers=2,
        seed=0,
        total_env_steps=budget,
        stop_when_solved=False,
        checkpoint_every=args.checkpoint_every,
        log_every=100,
        eval_every=max(budget // 4, 1),
        eval_episodes=2,
        progress=False,
    )
    rng = random.Random(f"faults/resume/{args.seed}")
    print(
        f"CartPole-v1, serial, {args.scheduler}, 2 workers, {budget:,} env steps, a checkpoint "
        f"every {args.checkpoint_every} versions; {kills} runs SIGKILLed once at a seeded "
        "random moment, then resumed\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp, "reference")
        # In this process: it warms up what every forked child would otherwise pay for.
        hybrid.train(base.replace(out=str(reference)))
        # A forked, unkilled copy times the training the kills are drawn over.
        code, seconds = _run(base.replace(out=str(Path(tmp, "timing"))))
        if code != 0:
            raise SystemExit(f"the uninterrupted run failed in a forked child (exit {code})")
        expected_hash = json.loads((reference / "summary.json").read_text())["final_params_sha256"]
        expected_rows, expected_values, _ = _rows(reference)
        completed = same_hash = lost = duplicated = changed = torn = started_over = unkilled = 0
        for k in range(kills):
            run_dir = Path(tmp, f"killed-{k}")
            cfg = base.replace(out=str(run_dir))
            _run(cfg, kill_after=rng.uniform(0.05, 1.0) * seconds)
            unkilled += (run_dir / "summary.json").exists()  # it finished before its kill
            for _attempt in range(3):
                if (run_dir / "summary.json").exists():
                    break
                code, _ = _run(cfg.replace(resume=str(run_dir)))
                if code != 0 and not (run_dir / "summary.json").exists():
                    # No checkpoint yet (killed early), or one the resume refused: start over,
                    # as a user would, and count it (resume itself failing shows up here).
                    started_over += 1
                    why = Path(f"{run_dir}.err")
                    reason = why.read_text().strip() if why.exists() else f"exit {code}"
                    print(f"  kill {k}: resume failed ({reason[:200]}); started over", flush=True)
                    _rmtree(run_dir)
                    _run(cfg)
            if not (run_dir / "summary.json").exists():
                print(f"  kill {k}: the run did not finish after resuming", flush=True)
                continue
            completed += 1
            summary = json.loads((run_dir / "summary.json").read_text())
            same_hash += summary["final_params_sha256"] == expected_hash
            rows, values, bad = _rows(run_dir)
            lost += sum((expected_rows - rows).values())
            duplicated += sum(n - 1 for n in rows.values() if n > 1)
            changed += sum(values[key] != expected_values.get(key, values[key]) for key in values)
            torn += bad
        print(
            "| scheduler | runs | killed | completed | started over | rows lost | rows duplicated "
            "| rows changed | torn lines | final hash = uninterrupted |"
        )
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        print(
            f"| {args.scheduler} | {kills} | {kills - unkilled} | {completed}/{kills} | "
            f"{started_over} | {lost} | {duplicated} | {changed} | {torn} | {same_hash}/{kills} |"
        )


# --- ray: the local Ray of a SIGKILLed run or sweep ------------------------------------------

LEFT_AFTER_S = 60.0
"""How long after a kill the processes and folders left are counted."""


def ray_study(kills: int) -> None:
    import secrets
    import subprocess
    import sys

    from hybrid.runtimes._ray_watchdog import processes_of

    print(
        f"hybrid train --runtime ray (1 worker) and hybrid sweep --backend ray (2 runs), each "
        f"started {kills} times and SIGKILLed once training; counted {LEFT_AFTER_S:.0f} s "
        "after each kill\n",
        flush=True,
    )
    print(
        "| command | started | killed | Ray processes left | private folders left | "
        "killed before Ray | ended before the kill |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|")
    for command in ("train", "sweep"):
        left_processes = left_dirs = missed = failed = 0
        for k in range(kills):
            with tempfile.TemporaryDirectory() as work:
                # a short temp dir of its own: Ray's socket paths must fit, and this run's
                # private folder is told apart from other Rays on the machine
                tmp = Path("/tmp") / f"hfk-{secrets.token_hex(3)}"
                tmp.mkdir(mode=0o700)
                out = Path(work, "out")
                if command == "train":
                    argv = ["train", "--runtime", "ray", "--workers", "1", "--seed", str(k),
                            "--total-env-steps", "10000000", "--stop-when-solved=False",
                            "--out", str(out)]  # fmt: skip
                    metrics = out / "metrics.jsonl"
                else:
                    spec = Path(work, "s.yaml")
                    spec.write_text(
                        'command: ["${env}", hybrid, train, "${args}"]\nmethod: grid\n'
                        "parameters:\n  seed: {values: [0, 1]}\n"
                        "  total_env_steps: {value: 10000000}\n"
                        "  stop_when_solved: {value: false}\n"
                    )
                    argv = ["sweep", str(spec), "--backend", "ray", "--out", str(out)]
                    metrics = out / "seed=0" / "metrics.jsonl"
                err_log = open(Path(work, "stderr"), "w")  # noqa: SIM115 (closed after the child)
                child = subprocess.Popen(
                    [sys.executable, "-m", "hybrid.cli", *argv],
                    stdout=subprocess.DEVNULL,
                    stderr=err_log,
                    env=dict(os.environ, TMPDIR=str(tmp), WANDB_MODE="offline"),
                    start_new_session=True,
                )
                deadline = time.monotonic() + 300
                while not (metrics.exists() and metrics.stat().st_size):
                    if child.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                dirs = [d for d in tmp.iterdir() if d.name.startswith("hybrid-ray-")]
                if child.poll() is not None:  # it ended by itself (Ray failed to start): counted
                    failed += 1
                else:
                    missed += not dirs
                    os.kill(child.pid, signal.SIGKILL)
                child.wait()
                err_log.close()
                if child.returncode != -signal.SIGKILL:
                    last = Path(work, "stderr").read_text().strip().splitlines()[-1:]
                    print(f"  {command} {k}: ended by itself: {last}", flush=True)
                time.sleep(LEFT_AFTER_S)
                for folder in dirs:
                    left = processes_of(folder)
                    left_processes += len(left)
                    left_dirs += folder.exists()
                    for pid in left:  # not left running for the next trial
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"| hybrid {command} | {kills} | {kills - failed} | {left_processes} | {left_dirs} | "
            f"{missed} | {failed} |",
            flush=True,
        )


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
