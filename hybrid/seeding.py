"""Every seed of a run derives from one base seed through numpy's SeedSequence.

Streams are addressed by a spawn key, not drawn in order, so a worker's
seeds do not depend on how many other workers exist or in which order they
were built, and a restarted worker gets a fresh, reproducible stream.
"""

from __future__ import annotations

import numpy as np

# Top-level stream names (the first element of the spawn key).
MODEL_INIT, WORKER, CLOCK, EVAL, LEARNER, SCHEDULER, FAULTS = range(7)


def stream(base_seed: int, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(base_seed, spawn_key=tuple(key))


def int_seed(seq: np.random.SeedSequence) -> int:
    """An integer seed below 2**63 for APIs that take one (torch, Gymnasium).

    numpy promotes the uint64 words and the int list to float64, so the sum keeps about 53
    significant bits (its lowest bits are rounded away). Kept as it is: every seed, and so
    every pinned hash, derives from it; 2**53 values leave collisions negligible."""
    return int(seq.generate_state(2, dtype=np.uint32).astype(np.uint64) @ [1, 2**32]) >> 1


def worker_seeds(base_seed: int, worker_id: int, incarnation: int = 0) -> tuple[int, int]:
    """(env seed, torch sampling seed) of one worker; a restart is a new incarnation."""
    env_seq, torch_seq = stream(base_seed, WORKER, worker_id, incarnation).spawn(2)
    return int_seed(env_seq), int_seed(torch_seq)
