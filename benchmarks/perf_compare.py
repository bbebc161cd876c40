"""The throughput targets' figures (targets 2, 4, 5), each next to its target, optionally side by
side with another checkout of hybrid (the base of a change) measured in the same run.

    python benchmarks/perf_compare.py [--base /tmp/base-ec0df18] [--repeats 3]
                                      [--steps 50000] [--process-steps 100000] [--rounds 20]
                                      [--peers .venv-peers/bin/python | --no-peers]

Every cell runs in a fresh Python process (``-c`` with ``PYTHONPATH`` set to one checkout).
Each repeat runs every cell once, the checkouts alternating, so that load from other jobs
that comes and goes skews both alike; figures are medians over the repeats and the ratio
column is the median of the per-repeat ratios (this checkout against ``--base``).

Cells:
- serial ``sync`` and ``async``, CartPole-v1 defaults, a fixed budget without evaluation:
  env steps/s of training (summary.json's figure) and CPU seconds per 10k env steps (the
  process's own CPU time, which other jobs on the machine disturb less than wall time);
- ``--runtime processes --scheduler async --workers 2 --envs-per-worker 8`` beside its
  ceiling, two independent one-worker serial async runs of 8 envs started at once (their
  env steps/s summed): nothing shared, nothing communicated;
- fedavg, 100 clients, 10 per round, 1 local step of 5 env steps: milliseconds per round
  (steady state), seconds from process start to the end of the first round, peak RSS, and
  whether ``torch._dynamo`` (and heavy optional modules) were imported.

Peers (``--peers``, the interpreter of ``make peers``'s venv; used by default when it exists):
each repeat also runs benchmarks/peers/measure.py once for each peer that a measured cell is
compared with, its place among the checkouts alternating: SB3 A2C's env steps/s at the same
budget (sync and async), TorchRL's 2x8 collector frames/s (processes), Flower's simulation
(fedavg: ms per round, start-up, RSS). Next to each cell: the peer's figure with the targets, the
peer today, this / peer (median of per-repeat ratios) and the target as a ratio to
the peer. Without peers, the quoted peer figures.

Prints Markdown. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.peers, from a checkout

from benchmarks.peers import side_by_side as peers  # noqa: E402

TRAIN_CHILD = r"""
import sys, tempfile, time, resource, warnings
warnings.filterwarnings("ignore")
import hybrid
from hybrid import TrainConfig
changes = eval(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    cfg = TrainConfig(progress=False, stop_when_solved=False, eval_every=10**9, out=tmp + "/run",
                      **changes)
    cpu = time.process_time()
    summary = hybrid.train(cfg).summary
    cpu = time.process_time() - cpu
print({"rate": summary["env_steps_per_s"], "cpu_per_10k": 1e4 * cpu / summary["env_steps"],
       "sha": summary["final_params_sha256"][:16]})
"""

FED_CHILD = r"""
import sys, time
launched = float(sys.argv[1])
rounds = int(sys.argv[2])
import resource, tempfile, warnings
warnings.filterwarnings("ignore")
import hybrid
from hybrid import Callback, TrainConfig

walls = []
class Rounds(Callback):
    def on_log(self, row):
        walls.append((time.time(), row["wall_s"]))

with tempfile.TemporaryDirectory() as tmp:
    cfg = TrainConfig(scheduler="fedavg", clients=100, client_fraction=0.1, local_steps=1,
                      rollout_steps=5, envs_per_worker=1, total_env_steps=rounds * 50,
                      log_every=50, eval_every=10**9, stop_when_solved=False, progress=False,
                      out=tmp + "/run")
    hybrid.train(cfg, callbacks=[Rounds()])
heavy = [m for m in ("torch._dynamo", "wandb", "matplotlib", "scipy", "ray", "pandas")
         if m in sys.modules]
steady = [b[1] - a[1] for a, b in zip(walls[1:], walls[2:])]  # rounds after the second
print({"first_round_s": walls[0][0] - launched, "round_ms": 1000 * sorted(steady)[len(steady) // 2],
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "heavy": heavy})
"""


def child(checkout: Path, code: str, *args: str) -> subprocess.Popen[str]:
    env = {
        "PYTHONPATH": str(checkout),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(process: subprocess.Popen[str]) -> dict:
    out, err = process.communicate()
    if process.returncode:
        raise RuntimeError(f"a benchmark child failed:\n{err[-3000:]}")
    return ast.literal_eval(out.strip().splitlines()[-1])


def train(checkout: Path, **changes: object) -> dict:
    return result(child(checkout, TRAIN_CHILD, repr(changes)))


def independent(checkout: Path, steps: int) -> dict:
    """Two unrelated one-worker serial async runs of 8 envs, started at once."""
    changes = repr({"scheduler": "async", "workers": 1, "envs_per_worker": 8,
                    "total_env_steps": steps})  # fmt: skip
    runs = [child(checkout, TRAIN_CHILD, changes) for _ in range(2)]
    rates = [result(r)["rate"] for r in runs]
    return {"rate": sum(rates)}


def fedavg(checkout: Path, rounds: int) -> dict:
    return result(child(checkout, FED_CHILD, repr(time.time()), str(rounds)))


CELLS = {
    # name: (run, figure, target text, higher is better)
    "sync env steps/s": (lambda c, a: train(c, scheduler="sync", total_env_steps=a.steps), "rate"),
    "sync CPU s per 10k env steps": (
        lambda c, a: train(c, scheduler="sync", total_env_steps=a.steps),
        "cpu_per_10k",
    ),
    "async env steps/s": (
        lambda c, a: train(c, scheduler="async", total_env_steps=a.steps),
        "rate",
    ),
    "async CPU s per 10k env steps": (
        lambda c, a: train(c, scheduler="async", total_env_steps=a.steps),
        "cpu_per_10k",
    ),
    "processes async 2x8 env steps/s": (
        lambda c, a: train(
            c,
            scheduler="async",
            runtime="processes",
            workers=2,
            envs_per_worker=8,
            total_env_steps=a.process_steps,
        ),
        "rate",
    ),
    "2 independent serial 1x8 runs, env steps/s summed": (
        lambda c, a: independent(c, a.process_steps),
        "rate",
    ),
    "fedavg ms per round": (lambda c, a: fedavg(c, a.rounds), "round_ms"),
    "fedavg s from start to first round's end": (lambda c, a: fedavg(c, a.rounds), "first_round_s"),
    "fedavg peak RSS MB": (lambda c, a: fedavg(c, a.rounds), "rss_mb"),
}
TARGETS = {
    "sync env steps/s": ">= 30,000",
    "async env steps/s": ">= 20,000",
    "processes async 2x8 env steps/s": ">= 45,000",
    "fedavg ms per round": "<= 10",
    "fedavg s from start to first round's end": "< 1",
    "fedavg peak RSS MB": "<= 250",
}
# Cells that share one run: (run key) -> the cells that read a figure from it.
RUNS = {
    "sync": ["sync env steps/s", "sync CPU s per 10k env steps"],
    "async": ["async env steps/s", "async CPU s per 10k env steps"],
    "processes": ["processes async 2x8 env steps/s"],
    "independent": ["2 independent serial 1x8 runs, env steps/s summed"],
    "fedavg": [
        "fedavg ms per round",
        "fedavg s from start to first round's end",
        "fedavg peak RSS MB",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--base", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50_000, help="serial runs' budget")
    parser.add_argument("--process-steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20, help="fedavg rounds per run")
    parser.add_argument("--only", nargs="+", choices=sorted(RUNS), default=sorted(RUNS))
    parser.add_argument("--peers", metavar="PYTHON", help="the peers' venv's python")
    parser.add_argument("--no-peers", action="store_true", help="quote the targets' figures")
    args = parser.parse_args()
    peer_python = peers.peers_python(args.peers, args.no_peers)
    peer_args = {
        "sb3-rate": ["--rate-steps", str(args.steps)],
        "torchrl": ["--frames", str(args.process_steps)],
        "flower": ["--rounds", str(args.rounds)],
    }

    checkouts = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    figures: dict[tuple[str, str], list[float]] = {}
    peer: dict[str, list[float]] = {}
    heavy: dict[str, set[str]] = {name: set() for name in checkouts}
    hashes: dict[tuple[str, str], set[str]] = {}
    for repeat in range(args.repeats):
        peers_done: set[str] = set()  # sync and async share one SB3 run per repeat
        for run in args.only:
            order: list[tuple[str, Path | None]] = list(checkouts.items())
            peer_run = peers.PERF_PEER_RUN.get(run) if peer_python is not None else None
            if peer_run is not None and peer_run not in peers_done:
                order.append(("peer", None))
                peers_done.add(peer_run)
            if repeat % 2:
                order.reverse()
            for name, checkout in order:
                if checkout is None:
                    assert peer_python is not None and peer_run is not None
                    measured_peer = peers.measure(
                        peer_python, peer_run, "--repeats", "1", *peer_args[peer_run]
                    )
                    peers.merge(peer, measured_peer)
                    continue
                cell = RUNS[run][0]
                measured = CELLS[cell][0](checkout, args)
                for cell in RUNS[run]:
                    figures.setdefault((cell, name), []).append(float(measured[CELLS[cell][1]]))
                heavy[name].update(measured.get("heavy", []))
                if "sha" in measured:
                    hashes.setdefault((run, name), set()).add(measured["sha"])
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr, flush=True)

    cells = [cell for run in args.only for cell in RUNS[run]]
    with_base = "base" in checkouts
    side = peer_python is not None
    print(f"median of {args.repeats} repeats; this checkout: {ROOT}")
    if side:
        print(
            f"peers measured in this run by {peer_python} (torch threads 1, as hybrid's "
            "default); this / peer: median of per-repeat ratios"
        )
    if with_base:
        print(f"base: {checkouts['base']}; ratio = this / base, median of per-repeat ratios\n")
        columns = ["figure", "base", "this", "ratio", "target"]
        columns += peers.peer_columns(side, "this vs ")
    else:
        print()
        columns = ["figure", "measured", "target", "runs", *peers.peer_columns(side)]
    print(peers.markdown_header(columns))
    for cell in cells:
        this = figures[(cell, "this")]
        target = TARGETS.get(cell, "-")
        figure = peers.PERF_CELLS.get(cell)
        peer_runs = (peer.get(figure.name, []) if figure is not None else []) if side else None
        peer_cells = peers.peer_cells(figure, this, peer_runs, paired=True)
        if with_base:
            base = figures[(cell, "base")]
            ratio = statistics.median(t / b for t, b in zip(this, base, strict=True))
            own = [cell, f"{statistics.median(base):,.2f}", f"{statistics.median(this):,.2f}"]
            own += [f"{ratio:.2f}x", target]
        else:
            runs = ", ".join(f"{x:,.1f}" for x in this)
            own = [cell, f"{statistics.median(this):,.2f}", target, runs]
        print(peers.markdown_row([*own, *peer_cells]))
    for line in peers.peer_only_lines(peer):
        print(f"\n{line}")
    for name in checkouts:
        print(f"\n{name}: modules imported by fedavg: {', '.join(sorted(heavy[name])) or 'none'}")
    serial = [(run, name) for (run, name) in hashes if run in ("sync", "async")]
    for run in sorted({run for run, _ in serial}):
        same = {name: sorted(hashes[(run, name)]) for name in checkouts}
        print(f"{run} final params sha256 (serial: reproducible): {same}")


if __name__ == "__main__":
    main()
