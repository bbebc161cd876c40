"""A3C's Table 2 (Mnih et al. 2016): speedup of training with 1, 2, 4, 8 and 16 workers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hybrid.cluster_profile import ClusterProfile, physical_cores
from hybrid.reproduce.entry import Arm, Entry, Published
from hybrid.speedup import NEVER, throughput

WORKER_COUNTS = (1, 2, 4, 8, 16)
PAPER_CORES = 16
"""The paper's machine: A3C ran on 16 CPU cores, so no worker count here shares a core."""
HERE = physical_cores()
"""This machine's physical cores: the real arm runs every worker count that fits on them."""
REAL_COUNTS = tuple(n for n in WORKER_COUNTS if n <= HERE)
MEASURE_S = 5.0
"""Seconds of in-process measuring at ``--budget-scale 1`` (``hybrid calibrate --budget-s``)."""
RUN_S = 4.0
"""Seconds of each short real run of the processes runtime at ``--budget-scale 1``
(``hybrid calibrate --run-s``); shorter at a smaller scale, never under half a second."""

# A3C as the paper ran it: one env per worker, t_max = 5 steps per update, applied on
# arrival (async); a fixed budget with no early stop and no evaluation, so every count runs
# the same steps and its throughput is training alone (hybrid.speedup's prediction runs).
A3C = {
    "env": "CartPole-v1",
    "scheduler": "async",
    "algo": "a2c",
    "envs_per_worker": 1,
    "rollout_steps": 5,
    "stop_when_solved": False,
    "eval_every": NEVER,
    "eval_episodes": 1,
}

CLOCK = f"clock, {PAPER_CORES} cores"
CLOCK_HERE = f"clock, {HERE} cores"
REAL = f"real processes, {HERE} cores"


def profile_path(out_dir: str, cores: int) -> Path:
    # named for its runtime: a folder of an earlier, in-process-only calibration is not reused
    return Path(out_dir, f"profile-processes-{cores}-cores.json")


def calibrated_profiles(out_dir: str, budget_scale: float) -> dict[str, dict[str, Any]]:
    """Calibrate this machine as ``hybrid calibrate --runtime processes`` does (in-process
    costs, then short real runs of the processes runtime fit the task cost, round trip,
    Hogwild! read delay and contention), once per output folder: a resumed check keeps the
    profile its finished runs used. The clock arms run on it with the paper's 16 cores, and
    with this machine's cores beside the real arm."""
    paths = {cores: profile_path(out_dir, cores) for cores in (PAPER_CORES, HERE)}
    if not all(path.exists() for path in paths.values()):
        from hybrid.calibrate import measure, measure_runtime, profile_for
        from hybrid.config import TrainConfig

        cfg = TrainConfig(**A3C, workers=1, progress=False, env_defaults=False)
        measured = profile_for(measure(cfg, max(0.5, MEASURE_S * budget_scale)), "processes")
        profile = measure_runtime(cfg, measured, max(0.5, RUN_S * budget_scale))
        for cores, path in paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            dataclasses.replace(profile, cores=cores).save(path)
    return {arm.label: {"cluster": str(paths[cores])} for arm, cores in CLOCK_ARMS}


CLOCK_ARMS = [
    (Arm(f"clock {n} workers", {"workers": n}, CLOCK), PAPER_CORES) for n in WORKER_COUNTS
]
CLOCK_ARMS += [
    (Arm(f"clock {n} workers, {HERE} cores", {"workers": n}, CLOCK_HERE), HERE) for n in REAL_COUNTS
]
REAL_ARMS = [
    Arm(f"real {n} workers", {"workers": n, "runtime": "processes"}, REAL) for n in REAL_COUNTS
]


def load_profile(out_dir: str, cores: int = PAPER_CORES) -> ClusterProfile:
    """The profile a check in ``out_dir`` calibrated (for reading its fit)."""
    return ClusterProfile.load(profile_path(out_dir, cores))


ENTRY = Entry(
    name="a3c-speedup",
    title="A3C: speedup at 1/2/4/8/16 workers (calibrated clock, real runs where cores allow)",
    source="Mnih et al. 2016, Asynchronous Methods for Deep RL (arXiv 1602.01783), Table 2",
    url="https://arxiv.org/abs/1602.01783",
    published=Published(
        "A3C 1.0 / 2.1 / 3.7 / 6.9 / 12.5 at 1 / 2 / 4 / 8 / 16 threads "
        "(averaged over 7 Atari games)",
        values=(1.0, 2.1, 3.7, 6.9, 12.5),
    ),
    env_id="CartPole-v1",
    source_env_id="7 Atari games",
    budget=10_000,
    parallel_envs="one env per worker (thread), 1-16 workers",
    evaluation="throughput: env steps per second of the virtual clock on this machine's "
    "costs calibrated from the processes runtime, with 16 cores modelled (judged); the "
    "processes runtime's env steps per training second at the counts this machine's cores "
    "allow, beside the clock's prediction for the same counts and cores (not judged)",
    return_convention="not a return: the figure is a speedup",
    source_seeds=None,
    config=A3C,
    arms=tuple(arm for arm, _ in CLOCK_ARMS) + tuple(REAL_ARMS),
    kind="speedup",
    metric=throughput,
    metric_name="env steps / s (clock: virtual; real: training wall)",
    prepare=calibrated_profiles,
    deviations=(
        "the paper's speedup is in time to reach a score (data efficiency included); "
        "hybrid's is throughput (env steps per second), which leaves out what staleness "
        "costs in data efficiency",
        "the judged row is a prediction for a 16-core machine from costs measured on this "
        "one; only the counts this machine's physical cores allow are run for real, and "
        "they are printed, not judged",
        "the real runs measure this machine as it is while the check runs: --jobs above 1, "
        "or other load, slows them and not the clock",
        "CartPole-v1 with a small MLP, not Atari with a CNN: a smaller task per step "
        "makes the server's share of the work larger",
    ),
    notes="close when each of the clock's predicted speedups (16 cores) is within 25% of "
    "the paper's",
)
