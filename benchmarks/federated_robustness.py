"""Federated RL with hostile clients and private rounds on the serial runtime (CartPole, Acrobot).

    python benchmarks/federated_robustness.py --tables robust attacks dp fedopt \
        [--env CartPole-v1] [--attacks sign_flip scale] [--seeds 0 1] [--env-steps 15000] \
        [--out runs.jsonl]

Every run: fedavg, K = 20 edge clients, C = 0.5 (10 per round), E = 10 local A2C steps of
10 env steps each (local Adam, lr 3e-3, unless a row says otherwise), server SGD lr 1
(FedAvg), ``--env-steps`` env steps (15 rounds at the default), the final model's
deterministic return on the default env (10 episodes). Byzantine clients are a seeded,
fixed share of the 20 (``byzantine_fraction``); the attacks' strength s = 4.
``--env Acrobot-v1`` changes the client recipe, which does not learn Acrobot (``ENV_RECIPES``:
each client steps 8 envs 5 steps at a time, observations normalized, local Adam lr 1e-3).

Tables (``--tables``):

- ``robust``: aggregator (mean, coordinate-wise median, trimmed mean β = 0.3, Krum f = 3)
  × attack (sign flip −4Δ, scaled 4Δ) × {0, 10, 20, 30} % Byzantine clients;
- ``attacks``: the other attacks (Gaussian noise, random-policy agent, reward-flipping env,
  and the scaled Δ at s = 20) at 20 %, mean against median;
- ``dp``: DP-FedAvg, clip C = 1, fixed-size sampling, σ ∈ {0, 0.1, 0.3, 1}: return, ε at
  δ = 1e-5 after the run's rounds (dp-accounting's RDP accountant), the share of Δs unclipped;
- ``fedopt``: FedAdam (server lr 0.03, τ = 1e-3) with local Adam against local SGD;
- ``trace``: FedAvg and FedBuff (K = 10 buffered Δs, 10 clients training at once,
  staleness exponent 0.5), every client always online against the example diurnal trace
  (``examples/traces/diurnal_20_clients.json``: a day compressed into 0.5 virtual seconds,
  each client online 8 "hours" of it): return, server steps, Δs lost
  to clients going offline before their upload finished, virtual time.

Prints Markdown, mean ± standard deviation over seeds and every run's value; every run
(also a diverged one: return null) is appended to ``--out`` so a long measurement can be
cut and resumed. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMON: dict[str, Any] = dict(
    env="CartPole-v1",
    scheduler="fedavg",
    clients=20,
    client_fraction=0.5,
    local_steps=10,
    rollout_steps=10,
    envs_per_worker=1,
    local_optimizer="adam",
    local_lr=3e-3,
    optimizer="sgd",
    lr=1.0,
    stop_when_solved=False,
    eval_every=10**9,  # only the final evaluation
    eval_episodes=10,
    client_eval_clients=2,
    client_eval_episodes=1,
    log_every=10**9,
)
AGGREGATORS: dict[str, dict[str, Any]] = {
    "mean": dict(aggregator="mean"),
    "median": dict(aggregator="median"),
    "trimmed mean (β=0.3)": dict(aggregator="trimmed_mean", trim_beta=0.3),
    "Krum (f=3)": dict(aggregator="krum", krum_f=3),
}
ENV_RECIPES: dict[str, dict[str, Any]] = {
    "CartPole-v1": {},
    # with the CartPole recipe, seed 0 ended at -500 after 30k, 60k, 150k and 300k env steps;
    # rl-zoo's A2C shape (many envs, short rollouts, normalized observations) reached -81 at 150k
    "Acrobot-v1": dict(envs_per_worker=8, rollout_steps=5, normalize_obs=True, local_lr=1e-3),
}
FRACTIONS = (0.0, 0.1, 0.2, 0.3)
ATTACKS = ("sign_flip", "scale")
SCALE = 4.0


def table_jobs(
    table: str, attacks: tuple[str, ...] = ATTACKS
) -> list[tuple[str, str, dict[str, Any]]]:
    """(row, column, config changes) of one table (``attacks``: the robust table's)."""
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    if table == "robust":
        for attack in attacks:
            for name, rule in AGGREGATORS.items():
                for fraction in FRACTIONS:
                    hostile = (
                        dict(
                            byzantine_fraction=fraction,
                            byzantine_attack=attack,
                            byzantine_scale=SCALE,
                        )
                        if fraction
                        else {}  # the clean run, shared by both attacks
                    )
                    jobs.append((f"{attack} | {name}", f"{fraction:.0%}", rule | hostile))
    elif table == "attacks":
        for attack, scale in (
            ("gaussian", SCALE),
            ("random_policy", SCALE),
            ("reward_flip", SCALE),
            ("scale", 20.0),
        ):
            for name in ("mean", "median"):
                changes = AGGREGATORS[name] | dict(
                    byzantine_fraction=0.2, byzantine_attack=attack, byzantine_scale=scale
                )
                row = attack if scale == SCALE else f"{attack} (s={scale:g})"
                jobs.append((row, name, changes))
    elif table == "dp":
        for sigma in (0.0, 0.1, 0.3, 1.0):
            jobs.append(
                (f"σ = {sigma}", "DP-FedAvg C=1", dict(dp_clip=1.0, dp_noise_multiplier=sigma))
            )
    elif table == "fedopt":
        server = dict(optimizer="fedadam", lr=0.03, adam_eps=1e-3)
        jobs.append(("FedAdam", "local Adam lr 3e-3", server))
        for lr in (0.03, 0.3):
            jobs.append(
                ("FedAdam", f"local SGD lr {lr}", server | dict(local_optimizer="sgd", local_lr=lr))
            )
    elif table == "trace":
        trace = str(Path(__file__).resolve().parents[1] / "examples/traces/diurnal_20_clients.json")
        from hybrid import TrainConfig

        fedbuff = dict(
            scheduler=str(Path(__file__).resolve().parents[1] / "examples/schedulers/fedbuff.py")
            + ":FedBuff",
            scheduler_args=dict(buffer_size=10, concurrency=10, staleness_exponent=0.5),
            # FedBuff picks its clients itself (concurrency): fedavg's sampling share is
            # refused where it would do nothing, so it stays at the config's default
            client_fraction=TrainConfig.client_fraction,
        )
        jobs.append(("FedAvg", "always online", {}))
        jobs.append(("FedAvg", "diurnal trace", dict(client_trace=trace)))
        jobs.append(("FedBuff", "always online", fedbuff))
        traced = dict(fedbuff["scheduler_args"], client_trace=trace)
        jobs.append(
            ("FedBuff", "diurnal trace", fedbuff | dict(scheduler_args=traced, client_trace=trace))
        )
    else:
        raise SystemExit(f"--tables: unknown {table!r}; choose robust, attacks, dp, fedopt, trace")
    return jobs


def run(config: dict[str, Any]) -> dict[str, Any]:
    import hybrid
    from hybrid import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        try:
            summary = hybrid.train(TrainConfig(**config, out=f"{tmp}/run", progress=False)).summary
        except hybrid.errors.ConfigError:
            raise
        except Exception as exc:  # a diverged run is counted, not dropped
            return {"final_eval_return": None, "error": f"{type(exc).__name__}: {exc}"}
        summary["wall_s"] = time.perf_counter() - started
        return summary


def returns(records: list[dict[str, Any]]) -> list[float | None]:
    return [r["final_eval_return"] for r in records]


def solved(records: list[dict[str, Any]], threshold: float) -> str:
    """How many runs' final returns reached the threshold, as ``k/n: `` (a diverged run: no)."""
    reached = sum(
        r["final_eval_return"] is not None and r["final_eval_return"] >= threshold for r in records
    )
    return f"{reached}/{len(records)}: "


def fmt(values: list[float | None], digits: int = 0) -> str:
    ok = [v for v in values if v is not None]
    failed = len(values) - len(ok)
    if not ok:
        return f"diverged ×{failed}"
    if any(math.isinf(v) for v in ok):
        return "∞" if all(math.isinf(v) for v in ok) else "∞ in some runs"
    mean = statistics.fmean(ok)
    sd = statistics.stdev(ok) if len(ok) > 1 else 0.0
    each = ", ".join("–" if v is None else f"{v:.{digits}f}" for v in values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f} ({each})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=["robust", "attacks", "dp", "fedopt"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--env-steps", type=int, default=15_000)
    parser.add_argument("--env", default="CartPole-v1", choices=list(ENV_RECIPES))
    parser.add_argument(
        "--attacks", nargs="+", default=list(ATTACKS), choices=ATTACKS, help="the robust table's"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "federated_robustness_runs.jsonl")
    )  # the runs the docs quote, beside this script, wherever it is run from
    args = parser.parse_args()

    done: dict[str, dict[str, Any]] = {}
    out = Path(args.out)
    if out.exists():
        for line in out.read_text().splitlines():
            record = json.loads(line)
            done[record["key"]] = record
    for table in args.tables:
        rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for row, column, changes in table_jobs(table, tuple(args.attacks)):
            for seed in args.seeds:
                config = (
                    COMMON
                    | dict(env=args.env)
                    | ENV_RECIPES[args.env]
                    | changes
                    | dict(seed=seed, total_env_steps=args.env_steps)
                )
                key = json.dumps(config, sort_keys=True)
                if key not in done:
                    summary = run(config)
                    keep = {
                        k: summary.get(k)
                        for k in (
                            "final_eval_return",
                            "updates",
                            "dp_epsilon",
                            "dp_unclipped_fraction",
                            "byzantine_sampled",
                            "sampled",
                            "trace_left",
                            "virtual_time_s",
                            "wall_s",
                            "error",
                        )
                    }
                    done[key] = {"key": key, "table": table, **keep}
                    with out.open("a") as handle:
                        handle.write(json.dumps(done[key]) + "\n")
                    print(f"  {table} {row} {column} seed {seed}: {keep}", file=sys.stderr)
                rows.setdefault(row, {}).setdefault(column, []).append(done[key])
        print_table(table, rows, args.env)


def print_table(table: str, rows: dict[str, dict[str, list[dict[str, Any]]]], env: str) -> None:
    columns = list(next(iter(rows.values())))
    print(f"\n### {table} ({env})\n")
    if table == "dp":
        print("| σ | final return | ε (δ = 1e-5) | Δs unclipped |\n| --- | --- | --- | --- |")
        for row, cells in rows.items():
            records = cells[columns[0]]
            eps = [r["dp_epsilon"] for r in records]
            unclipped = [r["dp_unclipped_fraction"] for r in records]
            print(
                f"| {row} | {fmt([r['final_eval_return'] for r in records])} | "
                f"{fmt(eps, 1)} | {fmt(unclipped, 2)} |"
            )
        return
    if table == "trace":
        print("| scheduler | clients | final return | server steps | Δs lost offline | virtual s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for row, cells in rows.items():
            for column, records in cells.items():
                print(
                    f"| {row} | {column} | {fmt([r['final_eval_return'] for r in records])} | "
                    f"{fmt([r['updates'] for r in records])} | "
                    f"{fmt([r.get('trace_left') or 0 for r in records])} | "
                    f"{fmt([r['virtual_time_s'] for r in records], 2)} |"
                )
        return
    first = "attack | aggregator" if table == "robust" else ""
    print(f"| {first} | " + " | ".join(columns) + " |")
    print("| --- " * (len(columns) + 1 + bool(first)) + "|")
    import gymnasium

    threshold = gymnasium.spec(env).reward_threshold  # a final return at or above it: solved
    for row, cells in rows.items():
        values = [solved(cells[c], threshold) + fmt(returns(cells[c])) for c in columns]
        print(f"| {row} | " + " | ".join(values) + " |")


if __name__ == "__main__":
    main()
