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
        # workers as a keyword: CartPole's family defaults would replace a config's 8 (the
        # global default) with their 2; eight make async's staleness visible
        results[scheduler, seed] = hybrid.train(cfg, workers=8)
        s = results[scheduler, seed].summary
        print(f"{scheduler:5s} seed {seed}: solved={s['solved']} at {s['env_steps_to_solve']} "
              f"env steps, eval {s['final_eval_return']:.0f}, {s['env_steps_per_s']:,.0f} steps/s")
"""),
    md("""
## Learning curves

Each run's `metrics.jsonl` holds one row per event. `hybrid.load_runs` reads the
evaluation rows of many runs into one pandas DataFrame (`result.frame("eval")` does it
for one run), with every config field as a column to group by. The x-axis is
environment steps, so the comparison is about sample efficiency.
"""),
    code("""
evals = hybrid.load_runs(results.values(), "eval")
evals[["scheduler", "seed", "env_steps", "eval/return_mean"]].head()
"""),
    code("""
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
for (scheduler, seed), run in evals.groupby(["scheduler", "seed"]):
    ax.plot(run["env_steps"], run["eval/return_mean"],
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
# run.config holds the values in effect; env_defaults=False keeps them all (its 8 workers
# equal the global default, which CartPole's family defaults would otherwise replace)
again = hybrid.train(run.config.replace(out=str(run.run_dir) + "-again", env_defaults=False))
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

import hybrid
from hybrid import TrainConfig

SEEDS = [0] if SCALE == 1 else list(range(5))
BUDGET = 30_000 * SCALE
BOUNDS = [0, 1, 4, 16, None]  # None: async, no bound
"""),
    code("""
runs = {}
for bound in BOUNDS:
    # async has neither a bound nor the staleness-aware step (both are bounded's knobs)
    for aware in (False,) if bound is None else (False, True):
        knobs = {} if bound is None else {"staleness_bound": bound, "staleness_aware_lr": aware}
        for seed in SEEDS:
            cfg = TrainConfig(
                scheduler="async" if bound is None else "bounded", **knobs,
                cluster="stragglers", straggler_fraction=0.25, straggler_slowdown=4.0,
                seed=seed, total_env_steps=BUDGET, stop_when_solved=False, eval_every=4_000,
                out=f"runs/staleness/s={bound}-aware={aware}-seed={seed}", progress=False,
            )
            runs[bound, aware, seed] = hybrid.train(cfg, workers=8)  # 8, not CartPole's 2
print(len(runs), "runs")
"""),
    md("""
## Return against virtual time and against environment steps

A tight bound makes fast workers wait for stragglers (less progress per second);
a loose one applies staler gradients (less progress per sample).
"""),
    code("""
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for i, bound in enumerate(BOUNDS):
    evals = hybrid.load_runs([runs[bound, False, seed] for seed in SEEDS], "eval")
    evals["k"] = evals.groupby("run").cumcount()  # the k-th evaluation of each run
    mean = evals.groupby("k")[["virtual_s", "env_steps", "eval/return_mean"]].mean()
    for x, ax in zip(["virtual_s", "env_steps"], axes):
        ax.plot(mean[x], mean["eval/return_mean"],
                color=f"C{i}", label="s=∞ (async)" if bound is None else f"s={bound}")
axes[0].set_xlabel("virtual time (s)")
axes[1].set_xlabel("environment steps")
axes[0].set_ylabel("evaluation return (mean over seeds)")
axes[1].legend()
plt.show()
"""),
    md("""
## The table

`hybrid.compare` aggregates over seeds with the interquartile mean and a
stratified-bootstrap 95% CI. It returns the table (shown below; `comparison.table` is
the DataFrame), the figures (`comparison.figures`) and `save`, which writes what
`hybrid compare` writes: Markdown and LaTeX tables, `results.json` and the figures.
"""),
    code("""
comparison = hybrid.compare(runs.values(),
                            group_by=["scheduler", "staleness_bound", "staleness_aware_lr"])
comparison.save("runs/staleness/report")
comparison
"""),
    code("""
# Mean staleness and virtual seconds for the budget, by bound (mean over seeds).
summary = hybrid.load_runs(runs.values(), "summary")
summary = summary[~summary["staleness_aware_lr"]]
summary.groupby("staleness_bound", dropna=False)[["staleness_mean", "virtual_time_s"]].mean()
"""),
]

NOTEBOOKS["02_scheduler_comparison.ipynb"] = [
    md("""
# Scheduler comparison: one task, every scheduler, several seeds

**Question.** On the same task, worker count and budget, how do the schedulers
compare in sample efficiency and in (virtual) time: `sync` (A2C), `async`
(A3C), `bounded` (SSP, s=2), `hybrid` (IMPALA: asynchronous actors, batched
V-trace learner) and `fedavg` (federated averaging over edge clients)? Only
the `scheduler` field changes between runs.

The table is the one `hybrid compare` writes: interquartile mean over seeds with
a stratified-bootstrap 95% CI, and the probability that one scheduler's final
return beats another's.
"""),
    code("""
SCALE = 1  # 10: paper-sized (ten seeds, larger budget)

import hybrid
from hybrid import TrainConfig

SEEDS = [0, 1] if SCALE == 1 else list(range(10))
BUDGET = 40_000 * SCALE
SCHEDULERS = {
    "sync": {},
    "async": {},
    "bounded": {"staleness_bound": 2},
    "hybrid": {"learner_batch": 4},
    "fedavg": {"clients": 8, "client_fraction": 0.5, "local_steps": 20,
               "optimizer": "sgd", "lr": 1.0},
}
"""),
    code("""
results = []
for name, extra in SCHEDULERS.items():
    for seed in SEEDS:
        cfg = TrainConfig(scheduler=name, seed=seed, total_env_steps=BUDGET,
                          cluster="heterogeneous", out=f"runs/compare/{name}-s{seed}",
                          progress=False, **extra)
        result = hybrid.train(cfg, workers=8)  # a keyword: 8, not CartPole's default 2
        results.append(result)
        s = result.summary
        print(f"{name:8s} seed {seed}: eval {s['final_eval_return']:6.1f}  "
              f"solved at {s['env_steps_to_solve']}  staleness {s['staleness_mean']:.2f}")
"""),
    code("""
comparison = hybrid.compare(results, group_by="scheduler")
comparison
"""),
    md("""
`comparison.table` is the same table as a DataFrame, numbers with their CI bounds
in columns, ready for pandas:
"""),
    code("""
comparison.table[["iqm", "iqm_low", "iqm_high", "solved", "staleness_mean"]]
"""),
    md("""
Learning curves (IQM over seeds, 95% CI bands) against environment steps and
against the virtual clock. `save` writes every figure as PNG and PDF, with
`table.tex` ready to `\\input` in a paper.
"""),
    code("""
from IPython.display import Image, display

comparison.save("runs/compare/report")
display(Image("runs/compare/report/curves_env_steps.png"))
display(Image("runs/compare/report/curves_time.png"))
print(open("runs/compare/report/table.tex").read())
"""),
]

NOTEBOOKS["04_federated_edge_clients.ipynb"] = [
    md("""
# Federated RL across simulated edge clients

**Question.** How much do non-IID client dynamics (each client's CartPole has its
own pole length, from 0.25 to 1.0 m) cost FedAvg, does FedProx's proximal term
help, who pays (the worst 10% of clients), and how many bytes does top-k
compression save on the uplink?

Clients are simulated on the serial runtime's virtual clock: each is built on
demand from its seed and profile, so the client count only costs memory for the
clients of a round.
"""),
    code("""
SCALE = 1  # 10: paper-sized (more clients, rounds and seeds)

import matplotlib.pyplot as plt

import hybrid
from hybrid import TrainConfig

CLIENTS = 20 * SCALE
ROUNDS = 12 * SCALE
SEED = 0
base = TrainConfig(scheduler="fedavg", clients=CLIENTS, client_fraction=0.5, local_steps=20,
                   optimizer="sgd", lr=1.0, seed=SEED, stop_when_solved=False,
                   progress=False, client_eval_clients=CLIENTS)
BUDGET = ROUNDS * int(CLIENTS * 0.5) * 20 * base.rollout_steps * base.envs_per_worker
"""),
    code("""
runs = {}
for dynamics in ["iid", "pole_length"]:
    for label, extra in {"FedAvg": {}, "FedProx": {"prox_mu": 1.0},
                         "FedAvg+topk": {"codec": "topk", "topk_ratio": 0.01}}.items():
        cfg = base.replace(client_dynamics=dynamics, total_env_steps=BUDGET,
                           out=f"runs/federated/{dynamics}-{label}", **extra)
        runs[dynamics, label] = hybrid.train(cfg)
        s = runs[dynamics, label].summary
        print(f"{dynamics:11s} {label:12s} default env {s['final_eval_return']:6.1f}  "
              f"client mean {s['client_eval_mean']:6.1f}  worst 10% {s['client_eval_worst10']:6.1f}"
              f"  uploaded {s['bytes_up'] / 1e6:.2f} MB")
"""),
    md("""
## Fairness: the return of every client under the final global model
"""),
    code("""
fig, ax = plt.subplots(figsize=(7, 3.5))
labels, values = [], []
for (dynamics, label), result in runs.items():
    labels.append(f"{dynamics}\\n{label}")
    values.append(result.summary["client_eval_returns"])
ax.boxplot(values)
ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
ax.set_ylabel("return on the client's own env")
plt.show()
"""),
    md("""
## Bytes on the uplink

Top-k at 1% with error feedback sends the largest 1% of each Δ's entries (plus
their indices) and carries the rest into the client's next upload.
"""),
    code("""
for dynamics in ["iid", "pole_length"]:
    full = runs[dynamics, "FedAvg"].summary["bytes_up"]
    packed = runs[dynamics, "FedAvg+topk"].summary["bytes_up"]
    print(f"{dynamics}: {full / 1e6:.2f} MB → {packed / 1e6:.3f} MB ({full / packed:.0f}× less)")
"""),
]

NOTEBOOKS["05_cooperative_multiagent.ipynb"] = [
    md("""
# Cooperative multi-agent RL: MAPPO against IPPO under two schedulers

**Question.** On PettingZoo's `simple_spread_v3` (three agents cover three
landmarks), does a centralized critic fed from the global `state()` (MAPPO) beat
independent critics (IPPO), and does it matter whether the workers' updates are
synchronous or asynchronous? The return logged is the per-agent mean (the MAPPO
paper's convention); steps count joint environment steps.

A multi-agent env is one more worker workload: the same loop, schedulers and
runtimes run it. The random policy's return on the same evaluation seeds is in
every summary (`random_return_mean`).
"""),
    code("""
SCALE = 1  # 10: paper-sized (three seeds, 500k joint steps)

import matplotlib.pyplot as plt

import hybrid
from hybrid import TrainConfig

SEEDS = [0] if SCALE == 1 else [0, 1, 2]
BUDGET = 20_000 * SCALE
base = TrainConfig(env="mpe2/simple_spread_v3", workers=4, envs_per_worker=4, rollout_steps=25,
                   gamma=0.95, gae_lambda=0.95, optimizer="sgd", lr=1.0,
                   total_env_steps=BUDGET, eval_every=5_000, progress=False)
"""),
    code("""
runs = {}
for algo in ["mappo", "ippo"]:
    for scheduler in ["sync", "async"]:
        for seed in SEEDS:
            cfg = base.replace(algo=algo, scheduler=scheduler, seed=seed,
                               out=f"runs/multiagent/{algo}-{scheduler}-s{seed}")
            runs[algo, scheduler, seed] = hybrid.train(cfg)
            s = runs[algo, scheduler, seed].summary
            print(f"{algo:5s} {scheduler:5s} seed {seed}: per-agent return "
                  f"{s['final_eval_return']:7.2f} (random {s['random_return_mean']:7.2f}), "
                  f"{s['env_steps_per_s']:,.0f} joint steps/s")
"""),
    code("""
evals = hybrid.load_runs(runs.values(), "eval")
fig, ax = plt.subplots(figsize=(6.5, 3.5))
for i, ((algo, scheduler, seed), run) in enumerate(evals.groupby(["algo", "scheduler", "seed"])):
    ax.plot(run["env_steps"], run["eval/return_mean"], label=f"{algo} / {scheduler}",
            color=f"C{i}")
random = next(iter(runs.values())).summary["random_return_mean"]
ax.axhline(random, ls="--", color="grey", lw=1, label="random policy")
ax.set_xlabel("joint environment steps")
ax.set_ylabel("per-agent mean return")
ax.legend(fontsize=8)
plt.show()
"""),
]

NOTEBOOKS["06_scale_out.ipynb"] = [
    md("""
# Scale out: the same config on processes and on Ray

**Question.** Does a run move from the deterministic serial runtime to real
parallel workers, and on to a cluster, without changing anything but one field?
`runtime="processes"` gives each worker its own process, the global parameters
in shared memory (Hogwild!-style lock-free reads); `runtime="ray"` runs the
workers as Ray actors, local and loopback-only by default.
"""),
    code("""
SCALE = 1  # 10: a longer budget

import os

import hybrid
from hybrid import TrainConfig

WORKERS = min(2, os.cpu_count() or 1) if SCALE == 1 else os.cpu_count()
base = TrainConfig(scheduler="async", workers=WORKERS, total_env_steps=15_000 * SCALE,
                   seed=0, progress=False)
"""),
    code("""
summaries = {}
for runtime in ["serial", "processes", "ray"]:
    result = hybrid.train(base.replace(runtime=runtime, out=f"runs/scale/{runtime}"))
    summaries[runtime] = result.summary
    s = result.summary
    print(f"{runtime:9s} {s['env_steps_per_s']:8,.0f} env steps/s  eval {s['final_eval_return']:6.1f}"
          f"  virtual time {s['virtual_time_s']}")
"""),
    md("""
On these 2-core machines the numbers are modest; run with `SCALE = 10` on a
bigger machine to see the scaling curve (`benchmarks/scaling.py` measures it).

## Pointing the same run at a cluster

Start Ray on the cluster (`ray start --head` on one node, `ray start
--address=HEAD:6379` on the others), then change one field:

```python
hybrid.train(base.replace(runtime="ray", ray_address="HEAD_NODE:6379", workers=64))
```

or on the command line `hybrid train --runtime ray --ray-address HEAD_NODE:6379`.
"""),
]


NOTEBOOKS["07_your_own_scheduler.ipynb"] = [
    md("""
# Your own scheduler: drop stale gradients

**Question.** Asynchronous workers apply gradients computed from parameters several
versions old. What if the server simply *refused* a gradient older than k versions,
instead of bounding how far workers may run ahead (`bounded`, SSP) or accepting
everything (`async`)? That rule is not built in; this notebook writes it in one cell,
registers it, and compares it with `async` and `bounded` over a few seeds.

## The contract

A scheduler is a pure policy over updates; the loop owns control flow. Subclass
`hybrid.Scheduler` and:

- implement `ready(idle, version)` (which idle workers start a task now) and `full()`
  (whether the buffered updates become a step now);
- override `admit(update, staleness)` to keep (`Verdict.BUFFER`) or drop
  (`Verdict.DROP`) an arriving update, and `combine()` if the sample-weighted mean of the
  buffer is not your rule;
- put your hyperparameters in a dataclass assigned to `Settings`: the constructor is
  then `__init__(self, workers, settings)`, and the values come from
  `TrainConfig.scheduler_args`, type-checked against the dataclass;
- say what workers do (`task_kind`: `ComputeGradient` sends a gradient, `TrainLocally`
  trains `local_steps` steps and sends Δ, `CollectExperience` sends a trajectory to a
  learner; from `hybrid`), the unit your staleness counts (`staleness_unit`), and whether
  every update is applied alone on arrival (`applies_alone`).

It **may** read θ and its version through `self.model`, keep copies, and draw random
numbers from `self.rng` (seeded from the run, saved in checkpoints). It **may not** write
θ, step an optimizer, do I/O, or start threads or processes: the loop applies what
`combine()` returns, the same way on every runtime.
"""),
    code("""
SCALE = 1  # 10: paper-sized (five seeds, larger budget)

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from IPython.display import display

import hybrid
from hybrid import Scheduler, TrainConfig, Update, Verdict

SEEDS = [0, 1, 2] if SCALE == 1 else list(range(5))
BUDGET = 6_000 * SCALE
"""),
    md("""
## The rule, in one cell

`applies_alone` stays False: with it, the `processes` runtime would let each worker
apply its own gradient to shared memory (Hogwild!), and `admit` could no longer refuse
one. Dropped updates are counted by the loop (`dropped` in summary.json); the
staleness it measures, and passes to `admit`, is the number of steps applied to θ since
the worker read it.
"""),
    code("""
@dataclass
class DropStaleSettings:
    max_staleness: int = 3
    \"\"\"Gradients computed more than this many versions ago are dropped, not applied.\"\"\"

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness: {self.max_staleness} must be >= 0")


class DropStale(Scheduler):
    \"\"\"`async`, except that a gradient staler than `max_staleness` is discarded.\"\"\"

    Settings = DropStaleSettings

    def __init__(self, workers: int, settings: DropStaleSettings) -> None:
        super().__init__(workers)
        self.settings = settings

    def ready(self, idle: Sequence[int], version: int) -> list[int]:
        return list(idle)  # nobody waits: every idle worker starts from the newest θ

    def admit(self, update: Update, staleness: int) -> Verdict:
        if staleness > self.settings.max_staleness:
            return Verdict.DROP
        return super().admit(update, staleness)  # buffered; combine() is the default mean

    def full(self) -> bool:
        return bool(self.buffer)  # every admitted gradient is a step of its own


hybrid.register_scheduler("drop-stale", DropStale)
"""),
    md("""
From the command line or a sweep, name the class by its file instead of registering it:
`hybrid train --scheduler my_rules.py:DropStale --scheduler-arg max_staleness=3`.
A bad setting is a one-line `ConfigError` before anything runs:
"""),
    code("""
try:
    TrainConfig(scheduler="drop-stale", scheduler_args={"max_staleness": "a few"}).validate()
except hybrid.ConfigError as error:
    print(error)
"""),
    md("""
## Train beside `async` and `bounded`

Eight workers with lognormal speeds (`cluster="heterogeneous"`) on the serial runtime's
virtual clock, so staleness arises and every run reproduces bit for bit. Only the
scheduler changes between the three configurations.
"""),
    code("""
CANDIDATES = {
    "drop-stale": {"scheduler_args": {"max_staleness": 3}},
    "async": {},
    "bounded": {"staleness_bound": 2},
}
results = []
for name, extra in CANDIDATES.items():
    for seed in SEEDS:
        cfg = TrainConfig(scheduler=name, seed=seed, total_env_steps=BUDGET,
                          cluster="heterogeneous", eval_every=2_000, eval_episodes=3,
                          out=f"runs/own_scheduler/{name}-s{seed}", progress=False, **extra)
        result = hybrid.train(cfg, workers=8)  # a keyword: 8, not CartPole's default 2
        results.append(result)
        s = result.summary
        print(f"{name:10s} seed {seed}: eval {s['final_eval_return']:6.1f}  "
              f"solved at {s['env_steps_to_solve']}  staleness {s['staleness_mean']:.2f} "
              f"(max {s['staleness_max']})  dropped {s['dropped']}/{s['tasks']}")
"""),
    md("""
## IQM with 95% confidence intervals

`hybrid.compare` groups the runs by scheduler, takes the interquartile mean
of the final evaluation return over seeds with a stratified-bootstrap 95% CI, and
estimates the probability that one scheduler's final return beats another's. With
three seeds the intervals are wide: set `SCALE = 10` before reading anything into them.
"""),
    code("""
comparison = hybrid.compare(results, x_axes=["env_steps"])
comparison.save("runs/own_scheduler/report")
comparison
"""),
    code("""
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for i, (label, curve) in enumerate(comparison.curves["env_steps"].items()):
    ax.plot(curve.x, curve.iqm, color=f"C{i}", label=f"{label} (n={curve.n_runs})")
    ax.fill_between(curve.x, curve.low, curve.high, color=f"C{i}", alpha=0.2, linewidth=0)
ax.axhline(475, ls="--", color="grey", lw=1)
ax.set_xlabel("environment steps")
ax.set_ylabel("evaluation return (IQM, 95% CI)")
ax.legend(fontsize=8)
plt.show()
"""),
    md("""
A dropped gradient still cost its worker's environment steps, so dropping trades
samples for freshness: compare the staleness each rule lets through with what it
throws away.
"""),
    code("""
counts = hybrid.load_runs(results, "summary").groupby("scheduler")[["dropped", "tasks"]].sum()
display(comparison.table[["staleness_mean", "staleness_max"]].join(counts))

# The rule held: no gradient older than max_staleness reached θ.
assert comparison.groups["drop-stale"].staleness_max <= CANDIDATES["drop-stale"][
    "scheduler_args"]["max_staleness"]
"""),
    md("""
## Going further

- Two published rules written with the same public API ship in `examples/schedulers/`:
  DC-ASGD (Zheng et al. 2017; reads θ through `self.model` to compensate the delay) and
  FedBuff (Nguyen et al. 2022; `task_kind = TrainLocally`, a staleness-weighted `combine`).
  `benchmarks/user_schedulers.py` compares them with `async` and `fedavg`.
- A scheduler that keeps state across steps returns it from `state_dict()` and takes it
  back in `load_state_dict()`, so `--resume` stays bit-exact.
"""),
]


def main() -> None:
    names = sys.argv[1:] or list(NOTEBOOKS)
    for name in names:
        write(name, NOTEBOOKS[name])
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
