"""Decentralized vs centralized schedulers side by side, on the serial runtime's virtual clock.

    python benchmarks/decentralized.py [--env CartPole-v1] [--workers 4 8 16] [--seeds 5]
        [--budget 150000] [--cluster heterogeneous] [--runtime serial]
        [--out decentralized_runs.jsonl]

For every worker count N and seed, one run per scheduler: ``sync`` (A2C, all-reduce of
gradients through a server), ``async`` (A3C), ``gossip`` on a ring, a 2-D torus and the
exponential graph (D-PSGD), ``ad-psgd`` on the exponential graph, and ``sgp`` (push-sum on
the time-varying exponential graph). Workers have heterogeneous speeds (``--cluster``,
seeded per run). Each run stops when the mean evaluation return reaches the env's
threshold or at ``--budget`` env steps.

Reported per scheduler and N: runs solved; env steps and virtual seconds to solve as
Kaplan-Meier medians with 95 % CIs (``hybrid.stats.median_steps_to_solve``: an unsolved
run is censored at its budget and its final time, "not reached" when fewer than half
solve, ∞ for a bound the runs cannot place); final evaluation return and the
decentralized runs' mean consensus distance as means with 95 % bootstrap CIs over seeds
(``hybrid.stats.aggregate``); each scheduler against ``sync`` in the same cell, the
log-rank test's p-value in env steps and in time to solve (``scipy.stats.logrank``,
censored runs counted): with 5 seeds a Kaplan-Meier CI is unbounded above, and this is
the comparison the runs can still make. Rows go to ``--out``
as JSON lines as they finish, so an interrupted sweep keeps what it ran; ``--table`` prints
the table of an existing file without running anything.

``--runtime processes`` runs the same grid on worker processes (real time: the
``wall s to solve`` column, training seconds without evaluation, is what to read there;
``--cluster`` only shapes the virtual clock: processes run at this machine's speed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np

SCHEDULERS: dict[str, tuple[str, dict[str, object]]] = {
    "sync": ("sync", {}),
    "async": ("async", {}),
    "gossip-ring": ("gossip", {"topology": "ring"}),
    "gossip-torus": ("gossip", {"topology": "torus"}),
    "gossip-exponential": ("gossip", {"topology": "exponential"}),
    "ad-psgd": ("ad-psgd", {"topology": "exponential"}),
    "sgp": ("sgp", {}),
}


def run_one(label: str, workers: int, seed: int, args: argparse.Namespace) -> dict[str, object]:
    import hybrid

    scheduler, scheduler_args = SCHEDULERS[label]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = hybrid.train(
            env=args.env,
            scheduler=scheduler,
            scheduler_args=dict(scheduler_args),
            workers=workers,
            seed=seed,
            # speeds are a virtual-clock setting: real workers run at this machine's speed
            cluster=args.cluster if args.runtime == "serial" else "homogeneous",
            runtime=args.runtime,
            total_env_steps=args.budget,
            eval_every=args.eval_every,
            eval_episodes=args.eval_episodes,
            torch_threads=1,
            progress=False,
            out=f"{tmp}/run",
        )
        evals = result.metrics("eval")
    summary = result.summary
    solved_row = next(
        (r for r in evals if summary["solved"] and r["env_steps"] == summary["env_steps_to_solve"]),
        None,
    )
    return {
        "env": args.env,
        "runtime": args.runtime,
        "scheduler": label,
        "workers": workers,
        "seed": seed,
        "solved": bool(summary["solved"]),
        "env_steps_to_solve": summary["env_steps_to_solve"] or summary["env_steps"],
        "virtual_s_to_solve": solved_row["virtual_s"] if solved_row else summary["virtual_time_s"],
        "wall_s_to_solve": solved_row["wall_s"] if solved_row else summary["train_wall_s"],
        "final_eval_return": summary["final_eval_return"],
        "consensus_distance_mean": summary.get("consensus_distance_mean"),
        "bytes_per_worker_per_mix": summary.get("bytes_per_worker_per_mix"),
        "train_wall_s": summary["train_wall_s"],
    }


def _cell_key(row: dict[str, object]) -> tuple[str, str, int]:
    """A table cell's env, runtime and N (rows written before env was recorded ran CartPole)."""
    return (
        str(row.get("env", "CartPole-v1")),
        str(row.get("runtime", "serial")),
        int(row["workers"]),  # type: ignore[call-overload]
    )


def table(rows: list[dict[str, object]]) -> str:
    from scipy.stats import CensoredData, logrank

    from hybrid.stats import aggregate, median_steps_to_solve

    def censored(group: list[dict[str, object]], key: str) -> CensoredData:
        values = np.array([r[key] for r in group], dtype=float)
        solved = np.array([bool(r["solved"]) for r in group])
        return CensoredData(uncensored=values[solved], right=values[~solved])

    def mean(values: list[float], digits: int) -> str:
        stats = aggregate(np.asarray(values, dtype=float), reps=2000, rng=0)
        low, high = stats["mean_ci"]  # type: ignore[misc]
        return f"{stats['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    def median(values: list[float], solved: list[bool]) -> str:
        # Kaplan-Meier: an unsolved run is censored where it stopped, never dropped
        point, low, high = median_steps_to_solve(values, solved)

        def shown(x: float) -> str:
            return "∞" if np.isinf(x) else f"{x:.1f}"

        head = "not reached" if np.isinf(point) else shown(point)
        return f"{head} [{shown(low)}, {shown(high)}]"

    def against_sync(group: list[dict[str, object]], sync: list[dict[str, object]]) -> str:
        """Log-rank p-values of the group against sync's runs in the same cell, in env steps
        and in time to solve (censored runs counted; scipy's ``stats.logrank``)."""
        if not sync:
            return "—"
        p = [
            logrank(censored(group, key), censored(sync, key)).pvalue
            for key in ("env_steps_to_solve", clock_of(group))
        ]
        return f"{p[0]:.2f} / {p[1]:.2f}"

    def clock_of(group: list[dict[str, object]]) -> str:
        # the virtual clock's seconds on serial, training wall seconds elsewhere
        serial = group[0].get("runtime", "serial") == "serial"
        return "virtual_s_to_solve" if serial else "wall_s_to_solve"

    lines = [
        "| env | runtime | N | scheduler | solved | env steps to solve (k) | time to solve (s) "
        "| final return | consensus distance | log-rank p vs sync (steps / time) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted({_cell_key(r) for r in rows})
    for env, runtime, workers in keys:
        where = (env, runtime, workers)
        sync = [r for r in rows if _cell_key(r) == where and r["scheduler"] == "sync"]
        for label in SCHEDULERS:
            group = [r for r in rows if _cell_key(r) == where and r["scheduler"] == label]
            if not group:
                continue
            clock = clock_of(group)
            solved = [bool(r["solved"]) for r in group]
            consensus = [r["consensus_distance_mean"] for r in group]
            lines.append(
                f"| {env} | {runtime} | {workers} | {label} "
                f"| {sum(solved)}/{len(group)} "
                f"| {median([r['env_steps_to_solve'] / 1000 for r in group], solved)} "  # type: ignore[operator]
                f"| {median([r[clock] for r in group], solved)} "  # type: ignore[misc]
                f"| {mean([r['final_eval_return'] for r in group], 1)} "  # type: ignore[misc]
                f"| {mean(consensus, 4) if consensus[0] is not None else '—'} "  # type: ignore[arg-type]
                f"| {against_sync(group, sync) if label != 'sync' else '—'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=150_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--cluster", default="heterogeneous")
    parser.add_argument("--runtime", default="serial", choices=["serial", "processes"])
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS), choices=SCHEDULERS)
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "decentralized_runs.jsonl")
    )  # the runs the docs quote, beside this script, wherever it is run from
    parser.add_argument("--table", action="store_true", help="only print --out's table")
    args = parser.parse_args()
    out = Path(args.out)
    if not args.table:
        done = (
            {
                (*_cell_key(r), r["scheduler"], r["seed"])
                for r in (json.loads(line) for line in out.read_text().splitlines() if line.strip())
            }
            if out.exists()
            else set()
        )
        # seeds outermost: a sweep cut short still covers every scheduler and N evenly
        for seed in range(args.seeds):
            for workers in args.workers:
                for label in args.schedulers:
                    if (args.env, args.runtime, workers, label, seed) in done:
                        continue
                    row = run_one(label, workers, seed, args)
                    print(json.dumps(row), flush=True)
                    with out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    print(table(rows))


if __name__ == "__main__":
    main()
