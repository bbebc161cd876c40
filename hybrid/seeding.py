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
    """A 63-bit integer seed for APIs that take one (torch, Gymnasium)."""
    return int(seq.generate_state(2, dtype=np.uint32).astype(np.uint64) @ [1, 2**32]) >> 1


def worker_seeds(base_seed: int, worker_id: int, incarnation: int = 0) -> tuple[int, int]:
    """(env seed, torch sampling seed) of one worker; a restart is a new incarnation."""
    env_seq, torch_seq = stream(base_seed, WORKER, worker_id, incarnation).spawn(2)
    return int_seed(env_seq), int_seed(torch_seq)
