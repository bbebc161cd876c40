"""The calibrated clock's parts against cases whose answer is known in closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_calibrate import _runtime, hand_profile, write_profile

import hybrid
from hybrid import calibrate
from hybrid.cli import main as cli_main
from hybrid.cluster_profile import ClusterProfile
from hybrid.runtimes.virtual_cluster import SharedCores, _inverse_cdf

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
    code = cli_main(
        ["calibrate", "--cores", "1", "--run-s", "0.3", "--budget-s", "0.3", "--out", str(path)]
    )
    assert code == 0, capsys.readouterr().err
    profile = ClusterProfile.load(path)
    assert profile.cores == 1
    assert len(profile.task_cost_quantiles) == calibrate.QUANTILES
    assert list(profile.task_cost_quantiles) == sorted(profile.task_cost_quantiles)
    assert profile.read_delay_s >= 0 and profile.contention == 0.0  # one core: not measurable
    cells = {(r["scheduler"], r["workers"]) for r in profile.fit["residuals"]}
    assert cells == {("sync", 1), ("async", 1)}
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
