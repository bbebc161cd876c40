"""Micro-benchmark of the update codecs: wire bytes, compression ratio and encode+decode time.

Run: ``python benchmarks/codec_micro.py``. Prints a Markdown table; single-threaded torch.

At 1M entries glibc may hand each fresh multi-MB buffer back to the OS and page-fault it in
again on the next call, which can dominate ``none``; ``MALLOC_TRIM_THRESHOLD_=1000000000``
shows the cost without that effect.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hybrid.codecs import CODEC_NAMES, make_codec, raw_nbytes

# 4.8k ~ a CartPole actor-critic MLP; 1M ~ a small conv net.
SIZES = (4_800, 1_000_000)


def time_round_trip(name: str, numel: int, repeats: int, target_s: float) -> tuple[int, float]:
    """Payload bytes and median microseconds of one encode+decode over ``repeats`` batches."""
    codec = make_codec(name, topk_ratio=0.01)
    vector = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    payload = codec.encode(vector)
    codec.decode(payload, numel)

    start = time.perf_counter()
    codec.decode(codec.encode(vector), numel)
    once = time.perf_counter() - start
    # Enough calls per batch that timer resolution and call noise do not matter.
    calls = max(3, int(target_s / max(once, 1e-7)))

    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            codec.decode(codec.encode(vector), numel)
        per_call.append((time.perf_counter() - start) / calls)
    return len(payload), statistics.median(per_call) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--target-s", type=float, default=0.05, help="seconds per timed batch")
    args = parser.parse_args()
    torch.set_num_threads(1)

    header = ["codec"]
    for numel in SIZES:
        header += [f"bytes @ {numel:,}", "ratio", "enc+dec µs"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["--:"] * (len(header) - 1)) + "|")
    for name in CODEC_NAMES:
        label = "topk (1%, EF)" if name == "topk" else name
        row = [label]
        for numel in SIZES:
            nbytes, micros = time_round_trip(name, numel, args.repeats, args.target_s)
            row += [f"{nbytes:,}", f"{raw_nbytes(numel) / nbytes:.1f}×", f"{micros:,.0f}"]
        print("| " + " | ".join(row) + " |")
    print(f"\ntorch {torch.__version__}, 1 thread, median of {args.repeats} batches.")


if __name__ == "__main__":
    main()
