"""What speed-up the calibrated virtual clock predicts: env steps per virtual second at N
workers on a profile from ``hybrid calibrate``, over one worker's.

The one predictor of wall-clock scaling: ``benchmarks/speedup.py`` prints it beside A3C's
Table 2, and ``hybrid reproduce a3c-speedup`` runs the same configuration as its clock
arms. A run is the serial runtime on the profile, with the env, algorithm and sizes the
profile was measured with, applied on arrival (``async``: Hogwild! on a processes
profile), no evaluation and no early stop, so every N runs the same env steps.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid.cluster_profile import ClusterProfile
from hybrid.config import TrainConfig

NEVER = 2**62
"""An evaluation period no run reaches: evaluations are not part of the throughput."""


def prediction_fields(
    profile: ClusterProfile,
    workers: int,
    steps: int = 20_000,
    seed: int = 0,
    scheduler: str = "async",
) -> dict[str, Any]:
    """The ``TrainConfig`` fields of one prediction run (``cluster`` aside): the profile's
    measured env, algorithm and sizes, ``workers`` workers, ``steps`` env steps."""
    measured = profile.measured_on
    return {
        "env": measured.get("env", TrainConfig.env),
        "algo": measured.get("algo", TrainConfig.algo),
        "envs_per_worker": measured.get("envs_per_worker", TrainConfig.envs_per_worker),
        "rollout_steps": measured.get("rollout_steps", TrainConfig.rollout_steps),
        "hidden": measured.get("hidden", TrainConfig.hidden),
        "optimizer": measured.get("optimizer", TrainConfig.optimizer),
        "scheduler": scheduler,
        "workers": workers,
        "seed": seed,
        "total_env_steps": steps,
        "stop_when_solved": False,
        "eval_every": NEVER,
        "eval_episodes": 1,
        "progress": False,
        "env_defaults": False,
    }


def throughput(summary: Mapping[str, Any]) -> float:
    """Env steps per second of a run's clock: virtual on a profile, else training wall time."""
    seconds = summary.get("virtual_time_s") or summary.get("train_wall_s") or 0.0
    return float(summary["env_steps"]) / seconds if seconds > 0 else float("nan")


def predicted_rate(
    profile: ClusterProfile,
    workers: int,
    steps: int = 20_000,
    seed: int = 0,
    scheduler: str = "async",
) -> float:
    """Env steps per virtual second of a run on ``profile`` with ``workers`` workers."""
    import hybrid

    cfg = TrainConfig(**prediction_fields(profile, workers, steps, seed, scheduler))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        profile.save(path)
        with warnings.catch_warnings():
            # N workers on fewer cores is what a prediction for a bigger machine asks about
            warnings.simplefilter("ignore", RuntimeWarning)
            result = hybrid.train(cfg, cluster=str(path), out=str(Path(tmp) / "run"))
    summary = result.summary
    assert summary is not None and summary["virtual_time_s"]
    return throughput(summary)


def predict_speedups(
    profile: ClusterProfile,
    workers: Sequence[int] = (1, 2, 4, 8, 16),
    cores: int = 16,
    steps: int = 20_000,
    seeds: Sequence[int] = (0,),
) -> dict[int, float]:
    """The clock's speed-up over one worker at each N of ``workers``, on ``profile`` with
    ``cores`` cores (median over ``seeds`` of the ratio to the same seed's N = 1 rate)."""
    machine = dataclasses.replace(profile, cores=cores)
    ratios: dict[int, list[float]] = {n: [] for n in workers}
    for seed in seeds:
        alone = predicted_rate(machine, 1, steps, seed)
        for n in workers:
            rate = alone if n == 1 else predicted_rate(machine, n, steps, seed)
            ratios[n].append(rate / alone)
    return {n: statistics.median(values) for n, values in ratios.items()}


__all__ = ["predict_speedups", "predicted_rate", "prediction_fields", "throughput"]
