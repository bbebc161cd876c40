"""Memory and speed of the replay buffers at 1M CartPole transitions.

Prints a Markdown table: bytes held by the storage arrays, resident-set growth after every page
has been written, and median microseconds of ``sample(256)`` / ``update_priorities(256)``.

    .venv/bin/python benchmarks/replay_memory.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from hybrid.replay import PrioritizedReplay, UniformReplay

CAPACITY = 1_000_000
OBS_SHAPE = (4,)  # CartPole
BATCH = 256
CHUNK = 50_000
REPEATS = 200


def rss_bytes() -> int:
    """Resident set size from /proc (Linux), so no psutil dependency."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError("no VmRSS in /proc/self/status")


def fill(buf: PrioritizedReplay | UniformReplay, rng: np.random.Generator) -> None:
    """Write every slot (np.zeros pages are not resident until written)."""
    for start in range(0, CAPACITY, CHUNK):
        n = min(CHUNK, CAPACITY - start)
        buf.add(
            obs=rng.standard_normal((n, *OBS_SHAPE), dtype=np.float32),
            action=rng.integers(0, 2, size=n),
            reward=rng.standard_normal(n, dtype=np.float32),
            next_obs=rng.standard_normal((n, *OBS_SHAPE), dtype=np.float32),
            discount=np.full(n, 0.99**3, dtype=np.float32),
            priority=rng.exponential(size=n),
        )


def median_us(fn: Callable[[], object]) -> float:
    for _ in range(10):  # warm-up
        fn()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return float(np.median(times)) / 1e3


def measure(cls: type[PrioritizedReplay] | type[UniformReplay]) -> dict[str, float]:
    rng = np.random.default_rng(0)
    before = rss_bytes()
    buf = cls(CAPACITY, OBS_SHAPE)
    fill(buf, rng)
    grown = rss_bytes() - before

    _, indices, _ = buf.sample(BATCH, beta=0.4, rng=rng)
    td_errors = rng.standard_normal(BATCH)
    return {
        "nbytes": buf.nbytes,
        "rss": grown,
        "sample_us": median_us(lambda: buf.sample(BATCH, beta=0.4, rng=rng)),
        "update_us": median_us(lambda: buf.update_priorities(indices, td_errors)),
    }


def main() -> None:
    rows = {cls.__name__: measure(cls) for cls in (PrioritizedReplay, UniformReplay)}
    print(f"1M CartPole transitions (obs {OBS_SHAPE} float32), batch {BATCH}, MB = 10^6 bytes\n")
    print(
        "| buffer | storage (sum of nbytes) | RSS growth | sample(256) median | "
        "update_priorities(256) median |"
    )
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['nbytes'] / 1e6:.1f} MB | {r['rss'] / 1e6:.1f} MB | "
            f"{r['sample_us']:.1f} µs | {r['update_us']:.1f} µs |"
        )


if __name__ == "__main__":
    main()
