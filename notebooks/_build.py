"""Writes the notebooks from readable cell lists (run: python notebooks/_build.py).

Notebooks are committed without outputs; editing them here keeps diffs reviewable.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent


def write(name: str, cells: list[tuple[str, str]]) -> None:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        new_markdown_cell(src.strip()) if kind == "md" else new_code_cell(src.strip())
        for kind, src in cells
    ]
    nbformat.write(nb, HERE / name)


def md(text: str) -> tuple[str, str]:
    return ("md", text)


def code(text: str) -> tuple[str, str]:
    return ("code", text)


NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

NOTEBOOKS["01_quickstart.ipynb"] = [
    md("""
# Quickstart: A3C and A2C on CartPole-v1

**Question.** Does applying every gradient the moment it arrives (A3C, `async`) learn
faster per environment step than averaging a synchronous round of gradients (A2C,
`sync`)? Both run here on the serial runtime: eight simulated workers on a
deterministic virtual clock, so every number below reproduces bit for bit.

`SCALE` sets the budget: 1 runs in well under a minute on 2 CPU cores; 10 is a
paper-sized run with five seeds.
"""),
    code("""
SCALE = 1  # 10: paper-sized (more seeds, larger budget)

import hybrid
from hybrid import TrainConfig

SEEDS = [0] if SCALE == 1 else list(range(5))
BUDGET = 60_000 * SCALE
"""),
    md("""
## Train

`hybrid.train` takes a `TrainConfig` (or its fields as keywords) and returns a
`Result`; the same fields are the flags of `hybrid train`. A run stops when the
mean return of 10 deterministic evaluation episodes reaches CartPole's threshold
(475) or at its budget.
"""),
    code("""
results = {}
for scheduler in ["async", "sync"]:
    for seed in SEEDS:
        cfg = TrainConfig(scheduler=scheduler, seed=seed, total_env_steps=BUDGET,
                          out=f"runs/quickstart/{scheduler}-s{seed}", progress=False)
        results[scheduler, seed] = hybrid.train(cfg)
        s = results[scheduler, seed].summary
        print(f"{scheduler:5s} seed {seed}: solved={s['solved']} at {s['env_steps_to_solve']} "
              f"env steps, eval {s['final_eval_return']:.0f}, {s['env_steps_per_s']:,.0f} steps/s")
"""),
    md("""
## Learning curves

Each run's `metrics.jsonl` holds one row per event; `Result.metrics("eval")` reads
the evaluation rows back. The x-axis is environment steps, so the comparison is
about sample efficiency.
"""),
    code("""
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
for (scheduler, seed), result in results.items():
    rows = result.metrics("eval")
    ax.plot([r["env_steps"] for r in rows], [r["eval/return_mean"] for r in rows],
            label=f"{scheduler} (seed {seed})", color="C0" if scheduler == "async" else "C1")
ax.axhline(475, ls="--", color="grey", lw=1)
ax.set_xlabel("environment steps")
ax.set_ylabel("evaluation return")
ax.legend()
plt.show()
"""),
    md("""
## Staleness

Under `async` a gradient is applied τ versions after the parameters it was
computed from. With eight workers τ centres near seven; under `sync` it is
always zero.
"""),
    code("""
fig, ax = plt.subplots(figsize=(6, 3))
for scheduler in ["async", "sync"]:
    histogram = results[scheduler, SEEDS[0]].summary["staleness_histogram"]
    ax.bar([tau + (0.2 if scheduler == "sync" else -0.2) for tau in range(len(histogram))],
           histogram, width=0.4, label=scheduler)
ax.set_xlabel("staleness τ (versions)")
ax.set_ylabel("updates applied")
ax.legend()
plt.show()
"""),
    md("""
## The run on disk

Every run directory holds `config.json`, `metrics.jsonl` (the source of truth for
analysis), `spans.jsonl` (one line per worker task) and `summary.json`, whose
`final_params_sha256` lets anyone check a reproduction.
"""),
    code("""
run = results["async", SEEDS[0]]
print(run.run_dir)
print(sorted(p.name for p in run.run_dir.iterdir()))
print(run.summary["final_params_sha256"])
again = hybrid.train(run.config.replace(out=str(run.run_dir) + "-again"))
assert again.summary["final_params_sha256"] == run.summary["final_params_sha256"]
print("reproduced bit for bit")
"""),
    md("""
## wandb (optional)

`track=True` logs to wandb as well. With nothing configured it writes an offline
run under the run directory (sync it later with `wandb sync`). To go online, run
`wandb login` once (or set `WANDB_API_KEY`) and `WANDB_MODE=online`.
"""),
    code("""
import os

os.environ.setdefault("WANDB_MODE", "offline")  # remove after `wandb login` to go online
os.environ.setdefault("WANDB_SILENT", "true")
tracked = hybrid.train(scheduler="async", total_env_steps=2_000, track=True,
                       exp_name="quickstart", out="runs/quickstart/tracked", progress=False)
print(sorted(p.name for p in (tracked.run_dir / "wandb").iterdir()))
"""),
]

NOTEBOOKS["03_staleness_ablation.ipynb"] = [
    md("""
# Staleness ablation with stragglers

**Question.** When a quarter of the workers are four times slower, how much does
bounding staleness cost in time and buy in sample efficiency? We sweep the SSP
bound s ∈ {0, 1, 4, 16, ∞} (∞ is `async`), with and without the staleness-aware
step size α/τ (Zhang et al. 2016), and plot the evaluation return against
*virtual* time (what a cluster with these speeds would see) and against
environment steps.

The serial runtime's virtual clock makes the stragglers a config line
(`cluster="stragglers"`) and every run deterministic.
"""),
    code("""
SCALE = 1  # 10: paper-sized (five seeds, larger budget)

import matplotlib.pyplot as plt
import numpy as np

import hybrid
from hybrid import TrainConfig

SEEDS = [0] if SCALE == 1 else list(range(5))
BUDGET = 30_000 * SCALE
BOUNDS = [0, 1, 4, 16, None]  # None: async, no bound
"""),
    code("""
runs = {}
for bound in BOUNDS:
    for aware in (False, True):
        for seed in SEEDS:
            cfg = TrainConfig(
                scheduler="async" if bound is None else "bounded",
                staleness_bound=bound or 0, staleness_aware_lr=aware,
                cluster="stragglers", straggler_fraction=0.25, straggler_slowdown=4.0,
                seed=seed, total_env_steps=BUDGET, stop_when_solved=False, eval_every=4_000,
                out=f"runs/staleness/s={bound}-aware={aware}-seed={seed}", progress=False,
            )
            runs[bound, aware, seed] = hybrid.train(cfg)
print(len(runs), "runs")
"""),
    md("""
## Return against virtual time and against environment steps

A tight bound makes fast workers wait for stragglers (less progress per second);
a loose one applies staler gradients (less progress per sample).
"""),
    code("""
def curve(result, x):
    rows = result.metrics("eval")
    return np.array([r[x] for r in rows]), np.array([r["eval/return_mean"] for r in rows])


fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for i, bound in enumerate(BOUNDS):
    for x, ax in zip(["virtual_s", "env_steps"], axes):
        xs, ys = zip(*(curve(runs[bound, False, seed], x) for seed in SEEDS))
        n = min(len(v) for v in ys)
        ax.plot(np.mean([v[:n] for v in xs], 0), np.mean([v[:n] for v in ys], 0),
                color=f"C{i}", label="s=∞ (async)" if bound is None else f"s={bound}")
axes[0].set_xlabel("virtual time (s)")
axes[1].set_xlabel("environment steps")
axes[0].set_ylabel("evaluation return (mean over seeds)")
axes[1].legend()
plt.show()
"""),
    md("""
## The table

`hybrid.analysis.compare` aggregates over seeds with the interquartile mean and a
stratified-bootstrap 95% CI, and writes the same table `hybrid compare` writes
(Markdown and LaTeX) plus figures.
"""),
    code("""
from IPython.display import Markdown, display

from hybrid.analysis import compare

comparison = compare([r.run_dir for r in runs.values()], "runs/staleness/report",
                     group_by=["scheduler", "staleness_bound", "staleness_aware_lr"])
display(Markdown(comparison.to_markdown()))
"""),
    code("""
staleness = {
    ("∞" if b is None else str(b)): runs[b, False, SEEDS[0]].summary["staleness_mean"]
    for b in BOUNDS
}
virtual = {
    ("∞" if b is None else str(b)): np.mean([runs[b, False, s].summary["virtual_time_s"]
                                            for s in SEEDS])
    for b in BOUNDS
}
print("mean staleness by bound:", {k: round(v, 2) for k, v in staleness.items()})
print("virtual seconds for the budget:", {k: round(v, 1) for k, v in virtual.items()})
"""),
]


def main() -> None:
    names = sys.argv[1:] or list(NOTEBOOKS)
    for name in names:
        write(name, NOTEBOOKS[name])
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
