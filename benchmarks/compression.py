"""Update compression end to end: bytes per update, codec cost, and what it does to learning.

    python benchmarks/compression.py [--seeds 0 1 2]

For each codec: the compression ratio measured from the encoded payloads of a
real run, encode+decode microseconds per update for the CartPole MLP and for a
1M-parameter vector (from codec_micro.py), env steps to solve CartPole-v1 under
``async`` (median over seeds), and virtual time to solve with every worker on
a 1 Mbit/s uplink. Prints a Markdown table; nothing asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import hybrid
from hybrid import TrainConfig
from hybrid.codecs import CODEC_NAMES

sys.path.insert(0, str(Path(__file__).parent))
from codec_micro import time_round_trip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--scheduler", default="async")
    parser.add_argument("--bandwidth-mbps", type=float, default=1.0)
    parser.add_argument("--budget", type=int, default=200_000)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = []
    baseline_steps = None
    with tempfile.TemporaryDirectory() as tmp:
        for codec in CODEC_NAMES:
            steps, vtimes, ratios = [], [], []
            for seed in args.seeds:
                cfg = TrainConfig(
                    scheduler=args.scheduler,
                    codec=codec,
                    seed=seed,
                    bandwidth_mbps=args.bandwidth_mbps,
                    total_env_steps=args.budget,
                    progress=False,
                    out=str(Path(tmp, f"{codec}-{seed}")),
                )
                s = hybrid.train(cfg).summary
                steps.append(s["env_steps_to_solve"] or float("inf"))
                vtimes.append(s["virtual_time_s"] if s["solved"] else float("inf"))
                ratios.append(s["compression_ratio"])
            _, micros_small = time_round_trip(codec, 4_802, repeats=5, target_s=0.03)
            _, micros_large = time_round_trip(codec, 1_000_000, repeats=5, target_s=0.03)
            median_steps = statistics.median(steps)
            if codec == "none":
                baseline_steps = median_steps
            rows.append(
                (
                    codec,
                    statistics.median(ratios),
                    micros_small,
                    micros_large,
                    median_steps,
                    steps,
                    statistics.median(vtimes),
                )
            )

    print(
        f"CartPole-v1, {args.scheduler}, serial runtime, {args.bandwidth_mbps:g} Mbit/s uplink, "
        f"seeds {args.seeds}; medians over seeds\n"
    )
    print(
        "| codec | bytes ratio | enc+dec µs (4.8k) | enc+dec µs (1M) | env steps to solve | "
        "× none | virtual s to solve | steps per seed |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|---|")
    for codec, ratio, small, large, steps, per_seed, vtime in rows:
        rel = steps / baseline_steps if baseline_steps else float("nan")
        label = "topk 1% + EF" if codec == "topk" else codec
        print(
            f"| {label} | {ratio:.1f}× | {small:,.0f} | {large:,.0f} | {steps:,.0f} | "
            f"{rel:.2f} | {vtime:.1f} | {', '.join(f'{s:,.0f}' for s in per_seed)} |"
        )


if __name__ == "__main__":
    main()
