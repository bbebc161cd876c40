"""Scheduler comparison on CartPole-v1, serial runtime: steps to solve and throughput,
each next to its performance target.

    python benchmarks/cartpole.py [--seeds 0 1 ... 9] [--schedulers sync async bounded]
                                  [--throughput-steps 50000] [--throughput-repeats 3]
                                  [--peers .venv-peers/bin/python | --no-peers]

Table 1 (sample efficiency): with the defaults, env steps and training wall seconds to
solve (mean of 10 deterministic evaluation episodes >= 475, evaluation every 2,500 env
steps, evaluation time excluded), median over seeds. The reference is Stable-Baselines3
A2C with rl-zoo's settings as measured on this machine when the targets were set (5 seeds, median
12,480 env steps, 0.81 s).

With ``--peers`` (the interpreter of ``make peers``'s venv; used by default when it exists),
SB3 A2C is measured again in the same run by benchmarks/peers/measure.py, in a subprocess:
one seed after hybrid's runs of that seed, one throughput repeat after hybrid's, the order
alternating, so that load from other jobs skews both alike. Each hybrid figure is then shown
beside SB3's today, their ratio, and the target as a ratio to SB3 (the absolute
targets were measured on a faster day). Without peers, the quoted SB3 figures.

Table 2 (throughput): env steps per second of training at a fixed budget (no evaluation
until the end, no early stop), median over ``--throughput-repeats`` runs, the schedulers
alternating so that load from other jobs skews them alike.

Prints Markdown. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hybrid
from benchmarks.peers import side_by_side as peers
from hybrid import TrainConfig

SB3_STEPS, SB3_WALL_S = 12_480, 0.81
"""SB3 A2C (rl-zoo settings) on CartPole-v1, median of 5 seeds, measured with the targets."""
STEPS_TARGET = {"sync": SB3_STEPS, "async": 1.5 * SB3_STEPS}
WALL_TARGET = {"sync": 0.5 * SB3_WALL_S}
RATE_TARGET = {"sync": 30_000, "async": 20_000}


def target(table: dict[str, float], scheduler: str, fmt: str) -> str:
    return f"<= {table[scheduler]:{fmt}}" if scheduler in table else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--schedulers", nargs="+", default=["sync", "async", "bounded"])
    parser.add_argument("--throughput-steps", type=int, default=50_000)
    parser.add_argument("--throughput-repeats", type=int, default=3)
    parser.add_argument("--peers", metavar="PYTHON", help="the peers' venv's python")
    parser.add_argument("--no-peers", action="store_true", help="quote the targets' figures")
    args = parser.parse_args()
    peer_python = peers.peers_python(args.peers, args.no_peers)

    solve: dict[str, list[float]] = {s: [] for s in args.schedulers}
    wall: dict[str, list[float]] = {s: [] for s in args.schedulers}
    rate: dict[str, list[float]] = {s: [] for s in args.schedulers}
    peer: dict[str, list[float]] = {}

    def measure_peer(only: str, *peer_args: str) -> None:
        if peer_python is not None:
            peers.merge(peer, peers.measure(peer_python, only, *peer_args))

    with tempfile.TemporaryDirectory() as tmp:
        for index, seed in enumerate(args.seeds):
            if index % 2:  # the peer first every other seed: neither side always runs later
                measure_peer("sb3-solve", "--seeds", str(seed))
            for scheduler in args.schedulers:
                cfg = TrainConfig(scheduler=scheduler, seed=seed, progress=False)
                summary = hybrid.train(
                    cfg.replace(out=str(Path(tmp, f"{scheduler}-{seed}")))
                ).summary
                steps = summary["env_steps_to_solve"]
                solve[scheduler].append(steps if steps is not None else float("inf"))
                wall[scheduler].append(
                    summary["train_wall_s"] if steps is not None else float("inf")
                )
            if not index % 2:
                measure_peer("sb3-solve", "--seeds", str(seed))
        for repeat in range(args.throughput_repeats):
            rate_args = ("--repeats", "1", "--rate-steps", str(args.throughput_steps))
            if repeat % 2:
                measure_peer("sb3-rate", *rate_args)
            for scheduler in args.schedulers:
                fixed = TrainConfig(
                    scheduler=scheduler,
                    seed=repeat,
                    progress=False,
                    total_env_steps=args.throughput_steps,
                    stop_when_solved=False,
                    eval_every=10**9,
                    out=str(Path(tmp, f"{scheduler}-fixed-{repeat}")),
                )
                rate[scheduler].append(hybrid.train(fixed).summary["env_steps_per_s"])
            if not repeat % 2:
                measure_peer("sb3-rate", *rate_args)

    side = peer_python is not None
    steps_peer = peer.get("sb3_a2c_env_steps_to_solve", []) if side else None
    wall_peer = peer.get("sb3_a2c_train_wall_s_to_solve", []) if side else None
    rate_peer = peer.get("sb3_a2c_env_steps_per_s", []) if side else None
    print(f"CartPole-v1, serial runtime, defaults, seeds {args.seeds}; medians over seeds")
    if side:
        print(
            f"SB3 A2C measured in this run by {peer_python} (torch threads 1, as hybrid's "
            "default); hybrid / SB3 to solve: ratio of medians (seeds are not paired across "
            "libraries)"
        )
    columns = ["scheduler", "env steps to solve", "target", "solved", "train wall s to solve"]
    columns += ["target", "per seed"]
    columns += peers.peer_columns(side, "steps: ") + peers.peer_columns(side, "wall: ")
    print("\n" + peers.markdown_header(columns))
    blank = [""] * (len(columns) - 7)
    quoted = ["SB3 A2C (rl-zoo; 5 seeds)", f"{SB3_STEPS:,}", "", "", f"{SB3_WALL_S}"]
    print(peers.markdown_row([*quoted, "", "", *blank]))
    if steps_peer and wall_peer:
        solved = sum(x != float("inf") for x in steps_peer)
        today = [
            "SB3 A2C today (this run)",
            peers.number(statistics.median(steps_peer)),
            "",
            f"{solved}/{len(steps_peer)}",
            peers.number(statistics.median(wall_peer)),
            "",
            ", ".join(peers.number(x) for x in steps_peer),
        ]
        print(peers.markdown_row([*today, *blank]))
    for s in args.schedulers:
        solved = sum(x != float("inf") for x in solve[s])
        steps_figure = peers.STEPS_TO_SOLVE.get(s, peers.STEPS_TO_SOLVE_NO_TARGET)
        wall_figure = peers.WALL_TO_SOLVE.get(s, peers.WALL_TO_SOLVE_NO_TARGET)
        own = [
            s,
            f"{statistics.median(solve[s]):,.0f}",
            target(STEPS_TARGET, s, ",.0f"),
            f"{solved}/{len(args.seeds)}",
            f"{statistics.median(wall[s]):.2f}",
            target(WALL_TARGET, s, ".2f"),
            ", ".join(f"{x:,.0f}" for x in solve[s]),
        ]
        steps_cells = peers.peer_cells(steps_figure, solve[s], steps_peer, paired=False)
        wall_cells = peers.peer_cells(wall_figure, wall[s], wall_peer, paired=False)
        print(peers.markdown_row([*own, *steps_cells, *wall_cells]))

    print(
        f"\nThroughput at a fixed {args.throughput_steps:,}-step budget, "
        f"median of {args.throughput_repeats} runs"
        + ("; hybrid / SB3: the median of per-repeat ratios" if side else "")
        + "\n"
    )
    columns = ["scheduler", "env steps/s", "target", "runs", *peers.peer_columns(side)]
    print(peers.markdown_header(columns))
    if rate_peer:
        runs = ", ".join(f"{x:,.0f}" for x in rate_peer)
        today = ["SB3 A2C today (this run)", f"{statistics.median(rate_peer):,.0f}", "", runs]
        print(peers.markdown_row([*today, *[""] * (len(columns) - 4)]))
    for s in args.schedulers:
        goal = f">= {RATE_TARGET[s]:,}" if s in RATE_TARGET else "-"
        runs = ", ".join(f"{x:,.0f}" for x in rate[s])
        cells = peers.peer_cells(peers.RATE.get(s), rate[s], rate_peer, paired=True)
        print(peers.markdown_row([s, f"{statistics.median(rate[s]):,.0f}", goal, runs, *cells]))


if __name__ == "__main__":
    main()
