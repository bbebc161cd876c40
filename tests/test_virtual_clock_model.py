"""The calibrated clock's parts against cases whose answer is known in closed form."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_calibrate import _runtime, hand_profile, write_profile

import hybrid
from hybrid import calibrate
from hybrid.cli import main as cli_main
from hybrid.cluster_profile import ClusterProfile
from hybrid.errors import ConfigError
from hybrid.protocol import CollectExperience, Payload
from hybrid.runtimes.virtual_cluster import SharedCores, TimeSlicedCores, _inverse_cdf

TASK_S = 10 * 1e-4  # tiny_config: 2 envs x 5 steps at hand_profile's 1e-4 s per step


def test_a_waking_job_holds_no_core_until_it_starts():
    cores = SharedCores(1)
    cores.start(0, 1.0)
    cores.start(1, 1.0, at=0.5)
    assert cores.next_finish() == (1.0, 0) and cores.next_wake() == 0.5
    cores.advance(0.5)  # job 0 alone so far: half done; from now the two share the core
    assert cores.next_wake() is None
    assert cores.next_finish() == (pytest.approx(1.5), 0)
    cores.advance(1.5)
    cores.finish(0)
    assert cores.next_finish() == (pytest.approx(2.0), 1)


def test_simultaneous_arrivals_leave_a_deterministic_server_one_service_apart(tiny_config):
    # D/D/1 with a batch of N arrivals at W: the k-th leaves the server at W + k * R
    receive_s = 0.002
    runtime, model = _runtime(tiny_config, hand_profile(receive_s=receive_s), workers=4)
    try:
        snapshot = model.snapshot()
        for worker in range(4):
            runtime.dispatch(worker, snapshot)
        for k in range(1, 5):
            update = runtime.next_update()
            assert update.finished_s == pytest.approx(TASK_S)
            assert runtime.virtual_time() == pytest.approx(TASK_S + k * receive_s)
    finally:
        runtime.close()


def test_a_lone_locked_worker_cycles_through_task_server_and_wake_up(tiny_config):
    # one worker, deterministic costs: each round trip is W + R + A + S + D + L
    costs = dict(receive_s=0.001, apply_s=0.0004, snapshot_s=0.0003, dispatch_s=0.0002)
    wake_s = 0.0015
    profile = hand_profile(**costs, wake_s_quantiles=(wake_s, wake_s))
    runtime, model = _runtime(tiny_config, profile, workers=1, lock_free=False)
    cycle = TASK_S + sum(costs.values()) + wake_s
    first_start = costs["snapshot_s"] + costs["dispatch_s"] + wake_s
    try:
        for k in range(5):
            runtime.dispatch(0, model.snapshot())
            update = runtime.next_update()
            assert update.started_s == pytest.approx(first_start + k * cycle)
            assert update.cost_s == pytest.approx(TASK_S)  # the wake-up is not compute
            model.version += 1
    finally:
        runtime.close()


@pytest.mark.parametrize("workers, cores, contention", [(4, 2, 0.0), (4, 2, 0.5), (3, 4, 0.3)])
def test_equal_tasks_under_processor_sharing_with_contention(
    tiny_config, workers, cores, contention
):
    # N tasks of work W on C cores: all end at max(1, N / C) * W * (1 + c (min(N, C) - 1) / C)
    profile = hand_profile(cores=cores, contention=contention)
    runtime, model = _runtime(tiny_config, profile, workers=workers)
    growth = 1 + contention * (min(workers, cores) - 1) / cores
    try:
        snapshot = model.snapshot()
        for worker in range(workers):
            runtime.dispatch(worker, snapshot)
        ends = [runtime.next_update().finished_s for _ in range(workers)]
        assert ends == pytest.approx([max(1, workers / cores) * TASK_S * growth] * workers)
    finally:
        runtime.close()


def test_inverse_cdf_of_evenly_spaced_quantiles():
    assert _inverse_cdf((0.0, 1.0, 3.0), 0.0) == 0.0
    assert _inverse_cdf((0.0, 1.0, 3.0), 0.75) == pytest.approx(2.0)
    assert _inverse_cdf((0.0, 1.0, 3.0), 1.0) == 3.0


def test_fitted_quantiles_keep_the_sample_mean_despite_a_long_tail():
    # 999 tasks of 1 ms and one preempted for 20 ms: the top quantile as measured (20 ms)
    # would stand for the top 5 % of draws, a mean of 1.475 ms; the fit keeps 1.019 ms
    sample = np.array([1e-3] * 999 + [20e-3])
    measured = np.quantile(sample, np.linspace(0, 1, calibrate.QUANTILES))
    assert calibrate._trapezoid_mean(measured) == pytest.approx(1.475e-3)
    fitted = calibrate._quantiles(sample)
    assert calibrate._trapezoid_mean(fitted) == pytest.approx(sample.mean())
    assert fitted[:-1] == pytest.approx(measured[:-1])  # the body as measured
    draws = [_inverse_cdf(fitted, u) for u in np.linspace(0, 1, 100_001)]
    assert np.mean(draws) == pytest.approx(sample.mean(), rel=1e-4)


def test_fitted_quantiles_of_a_sample_heavy_below_are_scaled_to_its_mean():
    sample = np.array([0.0] * 30 + [1.0] * 970)  # the top span alone cannot lower the mean
    fitted = calibrate._quantiles(sample)
    assert calibrate._trapezoid_mean(fitted) == pytest.approx(sample.mean())
    assert list(fitted) == sorted(fitted)


def test_task_costs_follow_the_measured_quantiles(tiny_config):
    # uniform on [0.5, 1.5] (two quantiles): a task costs W x U, of mean W
    profile = hand_profile(cores=64, task_cost_quantiles=(0.5, 1.5))
    runtime, model = _runtime(tiny_config, profile, workers=1)
    costs = []
    try:
        for _ in range(400):
            runtime.dispatch(0, model.snapshot())
            costs.append(runtime.next_update().cost_s / TASK_S)
    finally:
        runtime.close()
    assert min(costs) >= 0.5 and max(costs) <= 1.5
    assert np.mean(costs) == pytest.approx(1.0, abs=0.05)  # 400 draws: sd of the mean 0.015
    assert len(set(costs)) > 300  # drawn, not one value


def test_hogwild_read_delay_moves_the_next_read(tiny_config):
    profile = hand_profile(apply_s=0.0005, read_delay_s=0.002)
    runtime, model = _runtime(tiny_config, profile, workers_apply=True)
    try:
        assert runtime.hogwild
        runtime.dispatch(0, model.snapshot())
        first = runtime.next_update()
        model.version += 1
        runtime.dispatch(0, model.snapshot())
        second = runtime.next_update()
        # the span runs until the result reaches the loop, as a real Hogwild! span runs
        # to after its claim; the next read comes then
        assert first.cost_s == pytest.approx(TASK_S + 0.0005 + 0.002)
        assert second.started_s == pytest.approx(first.finished_s)
        assert second.cost_s == pytest.approx(TASK_S + 0.0005 + 0.002)
    finally:
        runtime.close()


def test_an_actor_costs_its_own_overhead_and_the_learner_what_it_trains_on(tiny_config):
    # one actor, one learner step per trajectory of n env steps: each round trip is
    # (n × step + actor overhead) + R + (A + n × learn) + S + D, the learner's n × learn
    # on the main process rather than a loss and backward pass in the actor
    costs = dict(receive_s=0.001, apply_s=0.0004, snapshot_s=0.0003, dispatch_s=0.0002)
    actor_overhead, learn_s, env_steps = 0.0007, 2e-5, 10  # 2 envs x 5 steps
    profile = hand_profile(
        **costs, task_overhead_s=0.005, collect_overhead_s=actor_overhead, learn_s=learn_s
    )
    runtime, model = _runtime(tiny_config, profile, workers=1, lock_free=False)
    actor_task = TASK_S + actor_overhead
    cycle = actor_task + sum(costs.values()) + learn_s * env_steps
    try:
        for k in range(4):
            runtime.dispatch(0, model.snapshot(CollectExperience()))
            update = runtime.next_update()
            assert update.kind is Payload.TRAJECTORY and update.env_steps == env_steps
            assert update.cost_s == pytest.approx(actor_task)
            assert update.started_s == pytest.approx(0.0005 + k * cycle)  # S + D first
            model.version += 1  # the learner's step on it
    finally:
        runtime.close()


def test_a_gradient_task_on_a_learning_profile_costs_as_before(tiny_config):
    profile = hand_profile(task_overhead_s=0.005, collect_overhead_s=0.0007, learn_s=2e-5)
    runtime, model = _runtime(tiny_config, profile, workers=1, lock_free=False)
    try:
        for _ in range(3):
            runtime.dispatch(0, model.snapshot())
            assert runtime.next_update().cost_s == pytest.approx(TASK_S + 0.005)
            model.version += 1  # a gradient: nothing for a learner to train on
        before = runtime.virtual_time()
        runtime.dispatch(0, model.snapshot())  # charges the last apply: no learning
        assert runtime.next_update().finished_s == pytest.approx(before + TASK_S + 0.005)
    finally:
        runtime.close()


def test_a_profiled_run_cites_the_profile_and_its_errors(tiny_config, tmp_path):
    residuals = [{"scheduler": "sync", "workers": 1, "steps_per_s_error": 0.05}]
    path = write_profile(tmp_path / "machine.json", cores=2, fit={"residuals": residuals})
    run = hybrid.train(tiny_config(cluster=path, stop_when_solved=False))
    assert run.summary["cluster_profile_sha256"] == ClusterProfile.load(path).digest()
    assert run.summary["cluster_profile_errors"] == residuals
    plain = hybrid.train(tiny_config(out=str(tmp_path / "plain")))
    assert "cluster_profile_sha256" not in plain.summary


# --- hybrid calibrate: what it refuses before measuring, and what it keeps ------------------


@pytest.fixture
def no_measuring(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("measured before the input was checked")

    monkeypatch.setattr(calibrate, "measure", refuse)


def test_calibrate_refuses_an_unwritable_out_before_measuring(tmp_path, capsys, no_measuring):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = cli_main(["calibrate", "--out", str(blocker / "machine.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "out: cannot write" in err


def test_calibrate_refuses_a_rollout_too_large_for_memory(tmp_path, capsys, no_measuring):
    argv = ["--rollout-steps", "1000000", "--envs-per-worker", "4096"]
    code = cli_main(["calibrate", *argv, "--out", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "GiB" in err and "rollout_steps" in err


@pytest.mark.parametrize("repeats", ["0", "21"])
def test_calibrate_refuses_repeats_out_of_range(tmp_path, capsys, no_measuring, repeats):
    code = cli_main(["calibrate", "--repeats", repeats, "--out", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "repeats" in err


def test_repeated_runs_pool_their_tasks_and_keep_the_median_pace():
    runs = [
        calibrate.SpanStats([1.0], [0.1], 100.0, 0.2, [3]),
        calibrate.SpanStats([2.0, 3.0], [0.2], 300.0, 0.4, [1, 2]),
        calibrate.SpanStats([4.0], [], 120.0, 0.3, [0, 1]),
    ]
    pooled = calibrate.pooled(runs)
    assert pooled.durations == [1.0, 2.0, 3.0, 4.0] and pooled.gaps == [0.1, 0.2]
    assert pooled.steps_per_s == 120.0 and pooled.waiting == 0.3  # medians, not means
    assert pooled.staleness_histogram == [4, 3]


def test_calibrate_keeps_flags_given_at_the_global_default(tmp_path, monkeypatch):
    seen = {}

    def record(cfg, budget_s):
        seen.update(envs=cfg.envs_per_worker, optimizer=cfg.optimizer, hidden=cfg.hidden)
        raise calibrate.ConfigError("stop: recorded")

    monkeypatch.setattr(calibrate, "measure", record)
    defaults = hybrid.TrainConfig()
    argv = ["--envs-per-worker", str(defaults.envs_per_worker), "--optimizer", defaults.optimizer]
    assert cli_main(["calibrate", *argv, "--out", str(tmp_path / "m.json")]) == 2
    # CartPole's family defaults differ from both, and would have replaced them
    assert seen["envs"] == defaults.envs_per_worker and seen["optimizer"] == defaults.optimizer


def test_calibrate_fits_the_runtime_from_its_own_runs(tmp_path, capsys):
    path = tmp_path / "machine.json"
    argv = ["--cores", "1", "--run-s", "0.3", "--budget-s", "0.3", "--repeats", "2"]
    code = cli_main(["calibrate", *argv, "--out", str(path)])
    assert code == 0, capsys.readouterr().err
    profile = ClusterProfile.load(path)
    assert profile.cores == 1 and profile.fit["repeats"] == 2
    assert len(profile.task_cost_quantiles) == calibrate.QUANTILES
    assert list(profile.task_cost_quantiles) == sorted(profile.task_cost_quantiles)
    assert profile.read_delay_s >= 0 and profile.contention == 0.0  # one core: not measurable
    cells = {(r["scheduler"], r["workers"]) for r in profile.fit["residuals"]}
    assert cells == {("sync", 1), ("async", 1), ("sync", 2), ("sync", 4)}
    # past the one core: a point at 2 and 4 workers per core, the slope through them
    assert [load for load, _ in profile.growth_past_cores] == [2.0, 4.0]
    assert profile.growth_slope == calibrate.growth_slope(profile.growth_past_cores)
    assert profile.quantum_s > 0 and "base slice" in profile.quantum_source
    # the hybrid scheduler's split: an actor's task, the learner's work per env step
    assert profile.collect_overhead_s is not None and profile.learn_s > 0
    detail = profile.measured_on["machine_detail"]
    assert detail["cores"] == 1 and detail["torch"] and detail["cpu_model"] is not None
    assert json.loads(path.read_text())["format"] == 2


# --- hybrid.speedup: the one speed-up predictor ---------------------------------------------


def test_predicted_speedups_stay_within_the_cores(tmp_path):
    import importlib.util
    from pathlib import Path

    from hybrid.speedup import predict_speedups

    # a server that costs nothing: N workers on C cores can go at most min(N, C) times faster
    profile = hand_profile(measured_on={"env": "CartPole-v1", "algo": "a2c"})
    predicted = predict_speedups(profile, workers=(1, 2, 4), cores=2, steps=600)
    assert predicted[1] == 1.0
    assert 1.5 < predicted[2] <= 2.0 + 1e-9 and 1.5 < predicted[4] <= 2.0 + 1e-9

    # the benchmark prints the package's predictor, not a copy of it
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "speedup.py"
    spec = importlib.util.spec_from_file_location("speedup_bench", script)
    assert spec is not None and spec.loader is not None
    speedup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speedup)
    assert speedup.predict_speedups is predict_speedups
    assert "12.5×" in speedup.table({16: 11.0}, 16)


# --- time slices: the kernel's round-robin instead of processor sharing ---------------------


def _run_to_empty(cores):
    """Every (end, job) until nothing is left, slices handed on as they run out."""
    ends = []
    while True:
        events = [t for t in (cores.next_finish(), cores.next_change()) if t is not None]
        if not events:
            return ends
        finish = cores.next_finish()
        change = cores.next_change()
        if finish is not None and (change is None or finish[0] <= change):
            cores.advance(finish[0])
            cores.finish(finish[1])
            ends.append((pytest.approx(finish[0]), finish[1]))
        else:
            cores.advance(change)


@pytest.mark.parametrize("jobs, cores_n", [(5, 2), (4, 2), (3, 1), (8, 4)])
def test_tasks_within_a_slice_run_whole_in_waves_of_the_core_count(jobs, cores_n):
    # N tasks of cost c <= q on C cores, first come first served: the k-th ends at
    # ceil((k + 1) / C) * c
    cost = 1.0
    cores = TimeSlicedCores(cores_n, quantum=1.5)
    for job in range(jobs):
        cores.start(job, cost)
    ends = _run_to_empty(cores)
    assert ends == [(math.ceil((k + 1) / cores_n) * cost, k) for k in range(jobs)]


def test_tasks_longer_than_a_slice_take_turns():
    # one core, q = 1: job 0 (3 q) and job 1 (3 q) alternate a slice at a time, so job 0
    # ends at 5 q and job 1 at 6 q (processor sharing would end both at 6 q)
    cores = TimeSlicedCores(1, quantum=1.0)
    cores.start(0, 3.0)
    cores.start(1, 3.0)
    assert _run_to_empty(cores) == [(5.0, 0), (6.0, 1)]
    # a short job arriving mid-slice waits for the slice to run out, then runs whole
    cores = TimeSlicedCores(1, quantum=1.0)
    cores.start(0, 3.0)
    cores.advance(0.5)
    cores.start(1, 0.25)
    assert _run_to_empty(cores) == [(1.25, 1), (3.25, 0)]


def test_a_lone_job_keeps_its_core_slice_after_slice():
    cores = TimeSlicedCores(1, quantum=1.0)
    cores.start(0, 3.5)
    assert cores.next_change() is None  # nobody waits: no turn to hand on
    assert _run_to_empty(cores) == [(3.5, 0)]


def test_the_main_process_takes_a_core_from_the_job_that_got_one_last():
    # two cores busy until 1.0; the server's 0.25 s at 0.5 pauses job 1, which resumes with
    # what was left of its slice when the server is done
    cores = TimeSlicedCores(2, quantum=2.0, favored=-1)
    cores.start(0, 1.0)
    cores.start(1, 1.0)
    cores.advance(0.5)
    cores.start(-1, 0.25)
    assert _run_to_empty(cores) == [(0.75, -1), (1.0, 0), (1.25, 1)]


def test_a_job_waiting_its_turn_is_started_when_it_first_runs():
    cores = TimeSlicedCores(1, quantum=2.0)
    cores.start(0, 1.0)
    cores.start(1, 1.0)
    assert cores.first_ran(0) == 0.0 and cores.first_ran(1) is None
    cores.advance(1.0)
    cores.finish(0)
    assert cores.first_ran(1) == 1.0


def test_a_worker_running_ahead_keeps_its_core_for_the_rest_of_its_slice():
    # one core, q = 1: job 0 (a Hogwild! worker) ends tasks of 0.4 at 0.4 and 0.8 and goes
    # straight on; job 1 waits for job 0's slice to run out at 1.0, runs 1.0-1.4, and job
    # 0's third task (0.2 done) ends at 1.6
    cores = TimeSlicedCores(1, quantum=1.0)
    cores.start(0, 0.4)
    cores.start(1, 0.4)
    ends = []
    for _ in range(2):
        end, job = cores.next_finish()
        cores.advance(end)
        cores.restart(job)
        assert cores.first_ran(job) == pytest.approx(end)  # its next task starts at once
        cores.set_work(job, 0.4)
        ends.append((pytest.approx(end), job))
    assert ends + _run_to_empty(cores) == [(0.4, 0), (0.8, 0), (1.4, 1), (1.6, 0)]


def test_time_sliced_cores_resume_from_their_state():
    cores = TimeSlicedCores(1, quantum=1.0, favored=-1)
    for job in range(3):
        cores.start(job, 2.5)
    cores.advance(1.0)
    cores.advance(1.5)  # job 1 half through its slice
    copy = TimeSlicedCores(1, quantum=1.0, favored=-1)
    copy.load_state_dict(json.loads(json.dumps(cores.state_dict())))
    assert _run_to_empty(copy) == _run_to_empty(cores)


def test_sync_workers_past_the_core_count_start_in_waves(tiny_config):
    # four equal tasks on two cores, slices longer than a task: two at a time; a waiting
    # task's span starts when it first runs, as a real worker's does
    profile = hand_profile(cores=2, quantum_s=10 * TASK_S)
    runtime, model = _runtime(tiny_config, profile, workers=4)
    try:
        snapshot = model.snapshot()
        for worker in range(4):
            runtime.dispatch(worker, snapshot)
        updates = [runtime.next_update() for _ in range(4)]
        assert [u.finished_s for u in updates] == pytest.approx([TASK_S] * 2 + [2 * TASK_S] * 2)
        assert [u.started_s for u in updates] == pytest.approx([0.0] * 2 + [TASK_S] * 2)
        assert [u.cost_s for u in updates] == pytest.approx([TASK_S] * 4)
    finally:
        runtime.close()


# --- cost growth past the core count --------------------------------------------------------


def test_cost_growth_interpolates_the_measured_points():
    profile = hand_profile(
        cores=2, contention=0.2, growth_past_cores=((2.0, 1.3), (4.0, 1.9)), growth_slope=0.25
    )
    at_cores = 1 + 0.2 * (2 - 1) / 2
    assert profile.cost_growth(1) == 1.0
    assert profile.cost_growth(2) == pytest.approx(at_cores)
    assert profile.cost_growth(3) == pytest.approx(at_cores * 1.15)  # halfway to (2, 1.3)
    assert profile.cost_growth(4) == pytest.approx(at_cores * 1.3)
    assert profile.cost_growth(6) == pytest.approx(at_cores * 1.6)
    assert profile.cost_growth(12) == pytest.approx(at_cores * (1.9 + 0.25 * 2))
    assert hand_profile(cores=2).cost_growth(8) == 1.0  # no points: as before


def test_a_task_at_twice_the_core_count_costs_the_fitted_point(tiny_config):
    profile = hand_profile(cores=2, quantum_s=10 * TASK_S, growth_past_cores=((2.0, 1.3),))
    runtime, model = _runtime(tiny_config, profile, workers=4)
    try:
        snapshot = model.snapshot()
        for worker in range(4):
            runtime.dispatch(worker, snapshot)
        updates = [runtime.next_update() for _ in range(4)]
        assert [u.cost_s for u in updates] == pytest.approx([1.3 * TASK_S] * 4)
    finally:
        runtime.close()


def test_a_profile_without_the_new_fields_keeps_its_digest(tmp_path):
    profile = hand_profile(cores=2)
    assert not set(profile.to_dict()) & {
        "quantum_s",
        "growth_past_cores",
        "growth_slope",
        "collect_overhead_s",
        "learn_s",
    }
    sliced = hand_profile(
        cores=2,
        quantum_s=0.004,
        growth_past_cores=((2.0, 1.1),),
        collect_overhead_s=1e-4,
        learn_s=1e-5,
    )
    path = tmp_path / "sliced.json"
    sliced.save(path)
    assert ClusterProfile.load(path) == sliced


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("growth_past_cores", [[0.5, 1.2]], "growth_past_cores must be"),
        ("growth_past_cores", [[2, 1.2], [2, 1.3]], "increasing"),
        ("quantum_s", -1, "quantum_s must be in"),
        ("quantum_source", 5, "quantum_source must be a string"),
        ("learn_s", -1, "learn_s must be in"),
        ("learn_s", None, "learn_s must be a number"),
        ("collect_overhead_s", "fast", "collect_overhead_s must be a number"),
    ],
)
def test_bad_time_slice_or_growth_fields_are_one_line_errors(field, value, message):
    values = hand_profile().to_dict() | {field: value}
    with pytest.raises(ConfigError, match=message) as caught:
        ClusterProfile.from_dict(values)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("power", [0.3, 1.0, 1.5])
@pytest.mark.parametrize("truth", [0.7, 2.5])
def test_a_cost_factor_is_fitted_to_the_real_pace(power, truth):
    # the clock's steps/s falls as f^-a (a < 1: the server's share of the pace): the fit
    # finds the factor at which it is the real runs' within its tolerance and its rounds
    runs = []

    def pace(factor):
        runs.append(factor)
        return 1_000.0 * (truth / factor) ** power

    fitted = calibrate._fit_cost_factor(pace, 1_000.0)
    assert pace(fitted) == pytest.approx(1_000.0, rel=calibrate.FIT_TOLERANCE)
    assert len(runs) - 1 <= calibrate.FIT_ROUNDS


def test_a_contention_factor_never_goes_below_one():
    # the clock already slower than the real runs without contention: none is fitted
    assert calibrate._fit_cost_factor(lambda f: 800.0 / f, 1_000.0, lowest=1.0) == 1.0


def test_a_pace_the_factor_cannot_move_keeps_the_best_factor_tried():
    fitted = calibrate._fit_cost_factor(lambda factor: 500.0, 1_000.0)  # server-bound
    assert fitted == 1.0


def test_the_growth_slope_is_the_least_squares_line_through_one():
    # y - 1 = s (x - 1): points (2, 1.2) and (3, 1.4) lie on s = 0.2
    assert calibrate.growth_slope([(2.0, 1.2), (3.0, 1.4)]) == pytest.approx(0.2)
    # (2, 1.1), (4, 1.9): s = (1 * 0.1 + 3 * 0.9) / (1 + 9) = 0.28
    assert calibrate.growth_slope([(2.0, 1.1), (4.0, 1.9)]) == pytest.approx(0.28)
    assert calibrate.growth_slope([(2.0, 0.9)]) == 0.0  # a faster task is noise, not growth


def test_the_kernel_quantum_is_its_base_slice_and_half_a_tick(monkeypatch, tmp_path):
    slice_file = tmp_path / "base_slice_ns"
    slice_file.write_text("3000000\n")
    monkeypatch.setattr(calibrate, "SLICE_FILES", (str(tmp_path / "missing"), str(slice_file)))
    monkeypatch.setattr(calibrate, "_kernel_hz", lambda: (250, "test"))
    quantum, source = calibrate.kernel_quantum()
    assert quantum == pytest.approx(3e-3 + 2e-3) and str(slice_file) in source
    # nothing readable: the kernel's default for this many CPUs, said so
    monkeypatch.setattr(calibrate, "SLICE_FILES", (str(tmp_path / "missing"),))
    monkeypatch.setattr(calibrate.os, "cpu_count", lambda: 2)
    quantum, source = calibrate.kernel_quantum()
    assert quantum == pytest.approx(0.75e-3 * 2 + 2e-3) and "default" in source
