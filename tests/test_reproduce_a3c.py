"""The A3C speedup entry: its clock is calibrated from the processes runtime, its clock arms
are the package's speed-up predictor, and its real arm is printed beside the clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hybrid import TrainConfig
from hybrid.cluster_profile import ClusterProfile
from hybrid.reproduce import get_entry
from hybrid.reproduce.entries import a3c_speedup
from hybrid.reproduce.entry import ArmStats, verdict
from hybrid.reproduce.run import Report, plan, to_markdown
from hybrid.speedup import prediction_fields


def _hand_profile(cores: int) -> ClusterProfile:
    measured_on = {
        key: a3c_speedup.A3C[key] for key in ("env", "algo", "envs_per_worker", "rollout_steps")
    }
    return ClusterProfile(
        runtime="processes",
        cores=cores,
        step_cost_s=1e-4,
        task_overhead_s=1e-3,
        jitter_sigma=0.0,
        receive_s=1e-5,
        apply_s=1e-5,
        snapshot_s=1e-5,
        dispatch_s=1e-5,
        measured_on=measured_on,
    )


def test_the_entry_calibrates_from_the_processes_runtime(tmp_path: Path) -> None:
    extras = a3c_speedup.calibrated_profiles(str(tmp_path), budget_scale=0.01)
    for cores in {a3c_speedup.PAPER_CORES, a3c_speedup.HERE}:
        profile = a3c_speedup.load_profile(str(tmp_path), cores)
        assert (profile.runtime, profile.cores) == ("processes", cores)
        # fitted on real runs of the runtime (hybrid calibrate --runtime processes), not only
        # measured in process: the fit names the runs and the distributions are the runs'
        assert profile.fit["runs"] and "sync N=1" in profile.fit["runs"][0]
        assert profile.fit["worker_task_s"] > 0 and profile.task_cost_quantiles
    assert set(extras) == {arm.label for arm, _ in a3c_speedup.CLOCK_ARMS}

    # a resumed check keeps the profile its finished runs used: no second calibration
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("calibrated again")

    import hybrid.calibrate

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hybrid.calibrate, "measure", refuse)
        assert a3c_speedup.calibrated_profiles(str(tmp_path), 0.01) == extras


def test_clock_arms_run_the_speed_up_predictor(tmp_path: Path) -> None:
    for cores in {a3c_speedup.PAPER_CORES, a3c_speedup.HERE}:
        _hand_profile(cores).save(a3c_speedup.profile_path(str(tmp_path), cores))
    entry = get_entry("a3c-speedup")
    runs = plan(entry, (3,), tmp_path, budget_scale=0.5)
    clock = {arm.label: cores for arm, cores in a3c_speedup.CLOCK_ARMS}
    for run in runs:
        ours = dataclasses.asdict(TrainConfig(**run.config).replace(out=""))
        if run.arm in clock:
            profile = ClusterProfile.load(run.config["cluster"])
            assert profile.cores == clock[run.arm]
            fields = prediction_fields(profile, ours["workers"], ours["total_env_steps"], seed=3)
            predictor = TrainConfig(**fields, cluster=run.config["cluster"])
            assert ours == dataclasses.asdict(predictor), run.arm
        else:  # the real arm: the processes runtime, at a count this machine's cores allow
            assert ours["runtime"] == "processes" and "cluster" not in run.config
            assert ours["workers"] <= a3c_speedup.HERE


def test_only_the_clocks_16_core_row_is_judged_and_every_row_is_printed() -> None:
    entry = get_entry("a3c-speedup")
    paper_row = iter([100.0, 210.0, 370.0, 690.0, 1250.0])
    # the 16-core clock on the paper's figures; every other row flat (speedup 1)
    stats = [
        ArmStats(arm.label, (next(paper_row) if arm.series == a3c_speedup.CLOCK else 1.0,), None)
        for arm in entry.arms
    ]
    judged = verdict(entry, stats, 1.0)
    assert judged == "close at 5/5 worker counts (±25%)"  # the flat rows are not judged
    md = to_markdown([Report(entry, tuple(stats), (0,), 1.0, 1.0, judged)])
    assert "clock, 16 cores speedup 1.0 / 2.1 / 3.7 / 6.9 / 12.5" in md
    assert f"real processes, {a3c_speedup.HERE} cores speedup 1.0" in md
