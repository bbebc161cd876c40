"""Simulated scale on the serial runtime: per-update cost and memory per idle worker.

    python benchmarks/simulated_scale.py [--workers 8 4096] [--updates 2000] [--repeats 3]

For each worker count, serial ``async`` on CartPole-v1 with one env per worker (the
performance-target setting), in a fresh process per measurement:

* per-update cost: training wall seconds per applied update in the steady state (the
  first round, in which every worker starts, is excluded: it is start-up), median over
  ``--repeats`` runs of ``--updates`` updates after that round;
* memory per idle worker: the resident-set growth from building the runtime's workers
  (envs, generator, normalizer, codec; the model is shared), divided by their number.

Targets: cost at the largest count <= 1.5x the cost at the smallest; <= 100 KB
per idle worker. Prints Markdown. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, tempfile, warnings
warnings.filterwarnings("ignore")
import torch
import hybrid
from hybrid import Callback, TrainConfig
from hybrid.envs import describe
from hybrid.assembly import runtime_settings, worker_pool
from hybrid.runtimes.serial import SerialRuntime

workers, updates, what = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)

def rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

cfg = TrainConfig(env="CartPole-v1", scheduler="async", workers=workers, envs_per_worker=1,
                  rollout_steps=5, progress=False, eval_every=10**9, stop_when_solved=False)
if what == "memory":
    info = describe(cfg.env)
    small = cfg.replace(workers=8)
    SerialRuntime(runtime_settings(small), info, worker_pool(small, info))  # first-use costs
    gc.collect()
    before = rss()
    runtime = SerialRuntime(runtime_settings(cfg), info, worker_pool(cfg, info))
    gc.collect()
    print(json.dumps({"bytes_per_worker": (rss() - before) / workers}))
else:
    rows = []

    class Rows(Callback):
        def on_log(self, row):
            rows.append((row["updates"], row["wall_s"]))

    steps = 5 * (workers + updates)  # the first round (every worker starts), then `updates`
    with tempfile.TemporaryDirectory() as tmp:
        hybrid.train(cfg.replace(total_env_steps=steps, log_every=250,
                                 out=tmp + "/run"), callbacks=[Rows()])
    first = next(r for r in rows if r[0] >= workers)  # the start-up round is over
    last = rows[-1]
    print(json.dumps({"s_per_update": (last[1] - first[1]) / (last[0] - first[0])}))
"""


def child(workers: int, updates: int, what: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(workers), str(updates), what],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(f"{workers} workers, {what}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 4096])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    cost: dict[int, list[float]] = {w: [] for w in args.workers}
    for _ in range(args.repeats):  # alternate the counts, so that load skews them alike
        for w in args.workers:
            cost[w].append(child(w, args.updates, "cost")["s_per_update"])
    memory = {w: child(w, 0, "memory")["bytes_per_worker"] for w in args.workers}
    smallest = min(args.workers)
    base = statistics.median(cost[smallest])
    print("Serial async, CartPole-v1, 1 env per worker; medians over", args.repeats, "runs\n")
    print(
        "| simulated workers | ms per update | vs smallest | target | KB per idle worker | target |"
    )
    print("|--:|--:|--:|--:|--:|--:|")
    for w in args.workers:
        ms = 1000 * statistics.median(cost[w])
        ratio = statistics.median(cost[w]) / base
        print(f"| {w:,} | {ms:.2f} | {ratio:.2f}x | <= 1.5x | {memory[w] / 1024:.0f} | <= 100 |")


if __name__ == "__main__":
    main()
