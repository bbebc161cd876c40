"""The calibrated virtual clock: profiles, processor sharing, the server queue, calibrate."""

from __future__ import annotations

import json

import pytest
from conftest import crash_copy, metric_rows

import hybrid
from hybrid import ConfigError
from hybrid.assembly import env_settings, runtime_settings, scheduler_settings, worker_pool
from hybrid.cli import main as cli_main
from hybrid.cluster_profile import ClusterProfile
from hybrid.config import TrainConfig
from hybrid.core.global_model import GlobalModel
from hybrid.envs import describe
from hybrid.runtimes.virtual_cluster import ProfiledSerialRuntime, SharedCores
from hybrid.trainer import initial_params


def hand_profile(**changes) -> ClusterProfile:
    """Round numbers, no jitter: every duration below is known exactly."""
    values = dict(
        runtime="processes",
        cores=8,
        step_cost_s=1e-4,
        task_overhead_s=0.0,
        jitter_sigma=0.0,
        receive_s=0.0,
        apply_s=0.0,
        snapshot_s=0.0,
        dispatch_s=0.0,
    )
    return ClusterProfile(**(values | changes))


def write_profile(path, **changes) -> str:
    hand_profile(**changes).save(path)
    return str(path)


# --- processor sharing ---------------------------------------------------------------------


def test_four_equal_tasks_on_two_cores_take_twice_as_long():
    cores = SharedCores(2)
    for job in range(4):
        cores.start(job, 1.0)
    ends = []
    while (upcoming := cores.next_finish()) is not None:
        cores.advance(upcoming[0])
        cores.finish(upcoming[1])
        ends.append(upcoming)
    assert ends == [(2.0, 0), (2.0, 1), (2.0, 2), (2.0, 3)]


def test_a_task_that_starts_later_slows_the_one_running():
    cores = SharedCores(1)
    cores.start(0, 1.0)
    cores.advance(0.5)  # alone: half done
    cores.start(1, 1.0)  # from now each runs at half speed
    assert cores.next_finish() == (1.5, 0)
    cores.advance(1.5)
    cores.finish(0)
    assert cores.next_finish() == (2.0, 1)  # 0.5 done while sharing, the rest alone


def test_fewer_tasks_than_cores_run_at_full_speed():
    cores = SharedCores(4)
    cores.start(0, 3.0)
    cores.start(1, 1.0)
    assert cores.next_finish() == (1.0, 1)


def test_a_task_of_unknown_work_runs_but_cannot_end_until_its_work_is_set():
    cores = SharedCores(1)
    cores.start(0)  # started ahead: nobody knows yet what it is
    cores.start(1, 1.0)
    assert cores.next_finish() == (2.0, 1)
    cores.advance(2.0)
    cores.finish(1)
    assert cores.next_finish() is None
    cores.set_work(0, 0.5)  # it did 1.0 of work already: it ends at once
    assert cores.next_finish() == (2.0, 0)


def test_the_main_process_preempts_and_the_workers_share_the_cores_left():
    cores = SharedCores(2, favored=-1)
    for worker in range(3):
        cores.start(worker, 1.0)
    cores.start(-1, 0.3)  # the main process wakes with 0.3 s of work
    assert cores.next_finish() == (pytest.approx(0.3), -1)  # at full speed
    cores.advance(0.3)
    cores.finish(-1)
    # meanwhile each worker did 0.3 / 3; then the three share both cores
    assert cores.done[0] == pytest.approx(0.1)
    assert cores.next_finish() == (pytest.approx(0.3 + 0.9 * 3 / 2), 0)


def test_on_one_core_the_workers_stop_while_the_main_process_runs():
    cores = SharedCores(1, favored=-1)
    cores.start(0, 1.0)
    cores.start(-1, 0.5)
    assert cores.next_finish() == (0.5, -1)
    cores.advance(0.5)
    cores.finish(-1)
    assert cores.next_finish() == (1.5, 0)


# --- the server queue and run-ahead ---------------------------------------------------------


def _runtime(tiny_config, profile, workers_apply=False, **changes):
    cfg = tiny_config(**({"workers": 2} | changes))
    info = describe(cfg.env, env_settings(cfg))
    model = GlobalModel(initial_params(cfg, info))
    settings, pool = runtime_settings(cfg), worker_pool(cfg, info)
    return ProfiledSerialRuntime(
        settings, info, pool, profile, lambda: model.version, workers_apply
    ), model


def test_an_update_arriving_while_the_server_is_busy_waits(tiny_config):
    runtime, model = _runtime(tiny_config, hand_profile(receive_s=0.003, apply_s=0.002))
    try:
        snapshot = model.snapshot()
        runtime.dispatch(0, snapshot)
        runtime.dispatch(1, snapshot)
        task_s = 10 * 1e-4  # 2 envs x 5 steps
        first = runtime.next_update()
        assert first.worker_id == 0 and first.finished_s == pytest.approx(task_s)
        assert runtime.virtual_time() == pytest.approx(task_s + 0.003)
        model.version += 1  # the loop applied it: the server's next 2 ms
        second = runtime.next_update()
        # it arrived with the first, and waited for the first's receive and apply
        assert second.worker_id == 1 and second.finished_s == pytest.approx(task_s)
        assert runtime.virtual_time() == pytest.approx(task_s + 0.003 + 0.002 + 0.003)
    finally:
        runtime.close()


def test_a_locked_worker_starts_when_its_dispatch_is_sent(tiny_config):
    profile = hand_profile(receive_s=0.001, snapshot_s=0.0005, dispatch_s=0.0002)
    runtime, model = _runtime(tiny_config, profile, lock_free=False)
    try:
        runtime.dispatch(0, model.snapshot())
        update = runtime.next_update()
        model.version += 1
        runtime.dispatch(0, model.snapshot())
        runtime.next_update()
        # first task: snapshot + dispatch before it starts; the second waited for the
        # receive, the snapshot of the new version and its dispatch
        task_s = 10 * 1e-4
        assert update.started_s == pytest.approx(0.0007)
        finished = 0.0007 + task_s
        assert runtime.virtual_time() == pytest.approx(finished + 0.0017 + task_s + 0.001)
    finally:
        runtime.close()


def test_hogwild_workers_run_ahead_of_the_server(tiny_config):
    profile = hand_profile(receive_s=0.0002, apply_s=0.0005, dispatch_s=0.0001)
    runtime, model = _runtime(tiny_config, profile, workers_apply=True)
    try:
        assert runtime.hogwild
        runtime.dispatch(0, model.snapshot())
        first = runtime.next_update()
        model.version += 1
        runtime.dispatch(0, model.snapshot())  # the claim, sent while the task runs
        second = runtime.next_update()
        task_s = 10 * 1e-4 + 0.0005  # the worker applies its own update
        # the second task started when the first ended, before the loop dispatched it
        assert second.started_s == pytest.approx(first.finished_s)
        assert second.finished_s == pytest.approx(0.0001 + 2 * task_s)
    finally:
        runtime.close()


def test_a_started_ahead_task_cannot_be_applied_before_its_claim(tiny_config):
    # the server needs 5 ms per update, a task 1.5 ms: the worker waits for its claim
    profile = hand_profile(receive_s=0.005, apply_s=0.0005)
    runtime, model = _runtime(tiny_config, profile, workers_apply=True)
    try:
        runtime.dispatch(0, model.snapshot())
        runtime.next_update()
        claim_at = runtime.virtual_time()
        runtime.dispatch(0, model.snapshot())
        second = runtime.next_update()
        assert second.finished_s == pytest.approx(claim_at)
    finally:
        runtime.close()


# --- profiles in training runs ---------------------------------------------------------------


def test_a_profiled_run_is_reproducible_and_keeps_its_profile(tiny_config, tmp_path):
    path = write_profile(tmp_path / "machine.json", cores=2, receive_s=1e-4, apply_s=2e-4)
    runs = [
        hybrid.train(tiny_config(out=str(tmp_path / f"r{i}"), scheduler="async", cluster=path))
        for i in range(2)
    ]
    assert runs[0].summary["final_params_sha256"] == runs[1].summary["final_params_sha256"]
    assert runs[0].summary["staleness_histogram"] == runs[1].summary["staleness_histogram"]
    run_dir = runs[0].run_dir
    assert json.loads((run_dir / "config.json").read_text())["cluster"] == path
    assert ClusterProfile.load(run_dir / "cluster_profile.json") == ClusterProfile.load(path)


@pytest.mark.parametrize("scheduler", ["async", "sync", "bounded"])
def test_sharing_fewer_cores_slows_the_virtual_clock(tiny_config, tmp_path, scheduler):
    times = []
    for cores in (4, 1):
        path = write_profile(tmp_path / f"c{cores}.json", cores=cores, receive_s=1e-4)
        cfg = tiny_config(
            out=str(tmp_path / f"{scheduler}{cores}"),
            scheduler=scheduler,
            cluster=path,
            stop_when_solved=False,
            **({"staleness_bound": 1} if scheduler == "bounded" else {}),
        )
        times.append(hybrid.train(cfg).summary["virtual_time_s"])
    # 3 workers and the server on one core: about 3x the time of 4 cores
    assert times[1] > 2.5 * times[0]


# time slices shorter than a task (10 steps at 1e-4 s) and more workers than cores: every
# part of the sliced cores' state (queue, slices left, first runs) is in the checkpoints
SLICED = {"quantum_s": 4e-4, "growth_past_cores": ((2.0, 1.2),), "jitter_sigma": 0.3}
# a learner's work on the main process: what it has not trained on yet is in the checkpoints
LEARNING = {"learn_s": 3e-5, "collect_overhead_s": 2e-4, "jitter_sigma": 0.3}


@pytest.mark.parametrize(
    "machine, workers, scheduler", [({}, 3, "async"), (SLICED, 4, "async"), (LEARNING, 3, "hybrid")]
)
def test_a_profiled_run_resumes_bit_exact(tiny_config, tmp_path, machine, workers, scheduler):
    path = write_profile(
        tmp_path / "machine.json", cores=2, receive_s=1e-4, apply_s=2e-4, **machine
    )
    cfg = tiny_config(
        scheduler=scheduler,
        workers=workers,
        total_env_steps=1_500,
        checkpoint_every=15,
        keep_checkpoints=100,
        stop_when_solved=False,
        cluster=path,
    )
    full = hybrid.train(cfg)
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert resumed.summary["virtual_time_s"] == full.summary["virtual_time_s"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read profile"),
        ("{not json", "not valid JSON"),
        ('{"format": 1}', "missing field"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_bad_profile_is_one_config_error(tmp_path, content, message):
    path = tmp_path / "machine.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"^cluster: .*{message}"):
        TrainConfig(cluster=str(path)).validate()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"cores": 0}, r"cores must be an integer in \[1, "),
        ({"apply_s": -1.0}, r"apply_s must be in \[0, "),
        ({"step_cost_s": 0.0}, "step_cost_s must be > 0"),
        ({"runtime": "mpi"}, "runtime 'mpi'"),
        ({"receive_s": "fast"}, "receive_s must be a number"),
        ({"speed": 1.0}, "unknown field 'speed'"),
        ({"main_preempts": "yes"}, "main_preempts must be true or false"),
    ],
)
def test_a_profile_with_a_bad_value_is_refused(tmp_path, changes, message):
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(hand_profile().to_dict() | changes))
    with pytest.raises(ConfigError, match=message):
        TrainConfig(cluster=str(path)).validate()


def test_cli_refuses_a_missing_profile_in_one_line(tmp_path, capsys):
    code = cli_main(["train", "--cluster", str(tmp_path / "nowhere.json"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "cluster: cannot read profile" in err


# --- calibrate ------------------------------------------------------------------------------


def test_calibrate_writes_a_profile_that_train_runs_on(tiny_config, tmp_path, capsys):
    path = tmp_path / "machine.json"
    code = cli_main(["calibrate", "--out", str(path), "--budget-s", "0.3", "--run-s", "0.5"])
    assert code == 0
    assert "server apply" in capsys.readouterr().out
    profile = ClusterProfile.load(path)
    assert profile.runtime == "processes" and profile.cores >= 1
    assert profile.step_cost_s > 0 and profile.apply_s > 0 and profile.receive_s > 0
    assert profile.measured_on["env"] == "CartPole-v1"
    run = hybrid.train(tiny_config(cluster=str(path), stop_when_solved=False))
    assert (run.run_dir / "cluster_profile.json").read_text() == path.read_text()
    assert run.summary["virtual_time_s"] > 0


def test_calibrate_for_ray_and_its_errors(tmp_path, capsys):
    path = tmp_path / "ray.json"
    argv = ["--runtime", "ray", "--budget-s", "0.2", "--run-s", "1", "--repeats", "1"]
    assert cli_main(["calibrate", *argv, "--out", str(path)]) == 0
    profile = ClusterProfile.load(path)
    assert profile.runtime == "ray"
    # ray's actors are processes on the kernel's time slices too, measured past the cores
    assert profile.quantum_s > 0 and [load for load, _ in profile.growth_past_cores] == [2.0]
    capsys.readouterr()
    assert cli_main(["calibrate", "--out", str(tmp_path / "machine.txt")]) == 2
    assert cli_main(["calibrate", "--out", str(path), "--env", "NoSuchEnv-v0"]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_without_a_profile_the_serial_runtime_is_the_plain_one(tiny_config, tmp_path):
    from hybrid.runtimes import make_runtime
    from hybrid.runtimes.serial import SerialRuntime
    from hybrid.schedulers import make_scheduler

    for cluster, kind in (
        ("heterogeneous", SerialRuntime),
        ("machine.json", ProfiledSerialRuntime),
    ):
        path = write_profile(tmp_path / cluster) if cluster.endswith(".json") else cluster
        cfg = tiny_config(cluster=path)
        info = describe(cfg.env, env_settings(cfg))
        runtime = make_runtime(
            runtime_settings(cfg),
            info,
            GlobalModel(initial_params(cfg, info)),
            make_scheduler(scheduler_settings(cfg)).applies_alone,
            worker_pool(cfg, info),
        )
        try:
            assert type(runtime) is kind
        finally:
            runtime.close()


# --- hostile or changed profiles ------------------------------------------------------------


def test_a_resume_runs_on_the_run_directorys_copy_of_the_profile(tiny_config, tmp_path):
    profile = tmp_path / "machine.json"
    write_profile(profile, cores=2, receive_s=1e-4, apply_s=2e-4)
    cfg = tiny_config(
        total_env_steps=1_500,
        checkpoint_every=15,
        keep_checkpoints=100,
        stop_when_solved=False,
        cluster=str(profile),
    )
    full = hybrid.train(cfg)
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    # the user's file changes after the run started: the resumed run keeps its machine
    write_profile(profile, cores=1, step_cost_s=1e-2, receive_s=1e-4, apply_s=2e-4)
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert resumed.summary["virtual_time_s"] == full.summary["virtual_time_s"]
    # nor does it need the user's file at all
    crashed_again = crash_copy(full.run_dir, tmp_path / "crashed-again")
    profile.unlink()
    again = hybrid.train(resume=str(crashed_again))
    assert again.summary["virtual_time_s"] == full.summary["virtual_time_s"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("step_cost_s", 1.7e308),
        ("apply_s", 3_600.5),
        ("receive_s", 10**400),
        ("cores", 10**400),
        ("read_delay_s", -1.0),
        ("wake_s_quantiles", [0.0, 1e300]),
        ("task_cost_quantiles", [2.0, 1.0]),
    ],
)
def test_profile_values_are_bounded_like_the_flags(tmp_path, capsys, field, value):
    values = hand_profile().to_dict() | {field: value}
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(values))
    code = cli_main(["train", "--cluster", str(path), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and field in err and len(err) < 300
    assert not (tmp_path / "run").exists()


def test_a_non_utf8_profile_is_one_line(tmp_path, capsys):
    path = tmp_path / "machine.json"
    path.write_bytes(b'{"format": 2, "runtime": "\xff\xfe"}')
    code = cli_main(["train", "--cluster", str(path), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not UTF-8" in err


def test_a_format_1_profile_still_runs_as_before(tiny_config, tmp_path):
    values = hand_profile(cores=2).to_dict()
    for name in ("task_cost_quantiles", "wake_s_quantiles", "read_delay_s", "contention", "fit"):
        del values[name]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(values | {"format": 1}))
    hand_profile(cores=2).save(new)
    runs = [
        hybrid.train(tiny_config(cluster=str(p), out=str(tmp_path / p.stem))) for p in (old, new)
    ]
    assert runs[0].summary["final_params_sha256"] == runs[1].summary["final_params_sha256"]
