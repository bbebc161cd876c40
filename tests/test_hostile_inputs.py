"""Hostile inputs, shared machines and careless hands.

Every refusal is one line naming the field, exit code 2 on the command line, and
leaves nothing behind (or loses nothing on resume).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import hybrid
from hybrid import envs
from hybrid.assembly import env_settings, tracking_settings
from hybrid.config import ConfigError, TrainConfig
from hybrid.envs import parse_wrappers


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run with checkpoints and no summary.json, as a crash leaves it (made once)."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    cfg = TrainConfig(
        workers=3,
        envs_per_worker=2,
        total_env_steps=600,
        eval_every=300,
        eval_episodes=2,
        log_every=100,
        checkpoint_every=10,
        stop_when_solved=False,
        progress=False,
        out=str(out),
    )
    hybrid.train(cfg)
    (out / "summary.json").unlink()
    return out


@pytest.fixture
def stopped(stopped_run, tmp_path):
    """A fresh copy of ``stopped_run`` for one test to edit."""
    return shutil.copytree(stopped_run, tmp_path / "stopped")


def _edit_config(run_dir, **changes) -> None:
    path = run_dir / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


# --- item 2: wrappers (and env ids) never chain arbitrary callables -------------------------


def _shell_chain(marker) -> str:
    # Each step is a callable applied to the previous result: str(env) -> '' -> 'touch ...'
    return f"builtins.str; operator.mul(0); operator.add('touch {marker}'); os.system"


def test_wrappers_refuse_callables_that_do_not_wrap_an_env(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match=r"^wrappers: 'builtins\.str' is not"):
        TrainConfig(wrappers=_shell_chain(marker)).validate()
    for text in ("os.system", "operator.add(1)", "gymnasium.make", "gymnasium.Env"):
        with pytest.raises(ConfigError, match=r"^wrappers: "):
            parse_wrappers(text)
    assert not marker.exists()


def test_resume_checks_stored_wrappers_like_the_command_line(stopped, tmp_path):
    marker = tmp_path / "pwned"
    _edit_config(stopped, wrappers=_shell_chain(marker))
    with pytest.raises(ConfigError, match=r"^wrappers: "):
        hybrid.train(resume=str(stopped))
    assert not marker.exists()


def test_resume_checks_a_stored_module_colon_env_id(stopped, tmp_path):
    _edit_config(stopped, env="os:system")
    with pytest.raises(ConfigError, match=r"^env: "):
        hybrid.train(resume=str(stopped))


def test_legitimate_wrappers_still_resolve():
    (clip, _, _), (limit, _, _) = parse_wrappers(
        "ClipReward(-1, 1); gymnasium.wrappers.TimeLimit(10)"
    )
    assert clip is gym.wrappers.ClipReward and limit is gym.wrappers.TimeLimit


def _halve_rewards(env: gym.Env, scale: float = 0.5) -> gym.Env:
    return gym.wrappers.TransformReward(env, lambda r: r * scale)


def test_a_registered_wrapper_callable_is_accepted():
    envs.register_wrapper("halve_rewards", _halve_rewards)
    ((fn, args, _),) = parse_wrappers("halve_rewards(0.25)")
    assert fn is _halve_rewards and args == (0.25,)
    with pytest.raises(ConfigError, match=r"^wrappers: "):
        envs.register_wrapper("bad name!", _halve_rewards)
    with pytest.raises(ConfigError, match=r"^wrappers: "):
        envs.register_wrapper("not_callable", 3)  # type: ignore[arg-type]


# --- item 4: one run at a time in a run directory -------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.run(
        [sys.executable, "-m", "hybrid.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _one_line_error(proc: subprocess.CompletedProcess, field: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hybrid train: error: {field}: "), lines[0]
    return lines[0]


def test_a_second_resume_of_a_running_directory_is_refused(stopped, monkeypatch):
    """The second resume starts while the first is in its loop: it must not run too."""
    from hybrid.core.loop import Training

    original = Training.run
    refused: list[str] = []

    def run_with_an_intruder(self):
        if not refused:
            refused.append("pending")
            with pytest.raises(ConfigError, match=r"^resume: .*in use by another") as exc:
                hybrid.train(resume=str(stopped))
            refused[0] = str(exc.value)
        return original(self)

    monkeypatch.setattr(Training, "run", run_with_an_intruder)
    rows_before = (stopped / "metrics.jsonl").read_text().count("\n")
    result = hybrid.train(resume=str(stopped))
    assert refused and "in use" in refused[0]
    rows = (stopped / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == len({r for r in rows}) and len(rows) >= rows_before
    assert result.summary["env_steps"] >= 600


def test_a_locked_run_directory_is_one_line_exit_2(stopped):
    from hybrid.trainer import LOCK_NAME

    with open(stopped / LOCK_NAME, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running hybrid holds it
        proc = _cli("train", "--resume", str(stopped))
    _one_line_error(proc, "resume")
    assert not (stopped / "summary.json").exists()


# --- item 7: an --out that cannot be written is refused before anything starts ---------------


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_an_unwritable_out_is_refused_before_workers_start(where, tmp_path, monkeypatch):
    import hybrid.trainer as loop

    (tmp_path / "a_file").write_text("x")
    out = {
        "under_a_file": tmp_path / "a_file" / "sub" / "run",
        "proc": Path("/proc/hybrid-run-that-cannot-exist"),
    }[where]

    def no_runtime(*args, **kwargs):
        raise AssertionError("a runtime started before the run directory was checked")

    monkeypatch.setattr(loop, "make_runtime", no_runtime)
    with pytest.raises(ConfigError, match=r"^out: "):
        hybrid.train(TrainConfig(out=str(out), progress=False, total_env_steps=100))
    assert (tmp_path / "a_file").read_text() == "x"
    assert not out.exists()


def test_an_unwritable_out_on_the_command_line_is_one_line_exit_2(tmp_path):
    (tmp_path / "a_file").write_text("x")
    proc = _cli("train", "--out", str(tmp_path / "a_file" / "run"), "--total-env-steps", "100")
    _one_line_error(proc, "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_failed_start_leaves_no_directory_behind(tmp_path, monkeypatch):
    import hybrid.trainer as loop

    def failing_runtime(*args, **kwargs):
        raise ConfigError("runtime: cannot start (a test)")

    monkeypatch.setattr(loop, "make_runtime", failing_runtime)
    out = tmp_path / "new" / "run"
    with pytest.raises(ConfigError, match="cannot start"):
        hybrid.train(TrainConfig(out=str(out), progress=False, total_env_steps=100))
    assert not (tmp_path / "new").exists()


# --- item 5: resume checks the checkpoint against the config, and flags against both --------


def test_a_flag_that_cannot_change_on_resume_is_refused(stopped):
    config_before = (stopped / "config.json").read_text()
    line = _one_line_error(_cli("train", "--resume", str(stopped), "--lr", "0.1"), "lr")
    assert "total_env_steps" in line  # says which flags may change
    assert (stopped / "config.json").read_text() == config_before
    assert not (stopped / "summary.json").exists()


def test_resumable_flags_apply_and_are_recorded(stopped):
    result = hybrid.train(resume=str(stopped), total_env_steps=900, log_every=50)
    assert result.summary["env_steps"] >= 900
    stored = json.loads((stopped / "config.json").read_text())
    assert stored["total_env_steps"] == 900 and stored["log_every"] == 50
    steps = [r["env_steps"] for r in result.metrics("train")]
    assert steps == sorted(steps) and len(steps) == len(set(steps))


@pytest.mark.parametrize(
    ("field", "value"),
    [("workers", 5), ("hidden", 32), ("env", "CartPole-v0"), ("scheduler", "sync")],
)
def test_a_config_json_edited_after_the_checkpoint_is_refused(stopped, field, value):
    _edit_config(stopped, **{field: value})
    with pytest.raises(ConfigError, match=rf"^{field}: .*checkpoint"):
        hybrid.train(resume=str(stopped))


def test_a_checkpoint_without_its_config_is_checked_by_shape(stopped):
    import torch

    from hybrid.checkpoint import list_checkpoints

    for path in list_checkpoints(stopped):  # as written before checkpoints held their config
        state = torch.load(path, weights_only=True)
        state.pop("config", None)
        torch.save(state, path)
    _edit_config(stopped, hidden=32)
    with pytest.raises(ConfigError, match=r"^resume: .*parameters"):
        hybrid.train(resume=str(stopped))
    _edit_config(stopped, hidden=64, workers=4)
    with pytest.raises(ConfigError, match=r"^resume: .*workers"):
        hybrid.train(resume=str(stopped))


@pytest.mark.parametrize(("field", "value"), [("env", 5), ("workers", "3"), ("wrappers", None)])
def test_config_json_values_of_the_wrong_type_are_refused(stopped, field, value):
    _edit_config(stopped, **{field: value})
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        hybrid.train(resume=str(stopped))


# --- item 6: signals wait for a checkpoint write; no *.tmp is left behind ----------------------


def test_a_second_sigterm_during_a_checkpoint_write_waits_for_it(tmp_path, monkeypatch):
    import torch

    import hybrid.checkpoint as ckpt
    from hybrid.checkpoint import list_checkpoints, load
    from hybrid.core.loop import Interrupted

    real_save, calls = torch.save, []

    def signalled_save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # mid-run: the stop request and a second, impatient one
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", signalled_save)
    cfg = TrainConfig(
        workers=3,
        total_env_steps=2_000,
        checkpoint_every=5,
        stop_when_solved=False,
        progress=False,
        out=str(tmp_path / "run"),
    )
    with pytest.raises(Interrupted) as stopped:
        hybrid.train(cfg)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    newest = list_checkpoints(tmp_path / "run")[-1]
    assert stopped.value.checkpoint == newest and len(calls) == 3
    load(newest)  # whole
    assert not list((tmp_path / "run").rglob("*.tmp"))


def test_a_failed_checkpoint_write_removes_its_temporary_file(tmp_path, monkeypatch):
    import hybrid.checkpoint as ckpt

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        ckpt.save(tmp_path, 7, {"format": 1})
    assert not list(tmp_path.rglob("*.tmp"))


def test_stale_temporary_files_are_removed_when_a_resume_starts(stopped):
    (stopped / "checkpoints" / "ckpt-000000999.pt.tmp").write_bytes(b"cut short")
    (stopped / "config.json.tmp").write_text("{")
    hybrid.train(resume=str(stopped))
    assert not list(stopped.rglob("*.tmp"))


# --- item 8: every numeric field is bounded by what can run; JSON is always valid -------------


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"lr": 1e39}, "lr", "float32"),
        ({"ppo_lr": 1e39}, "ppo_lr", "float32"),
        ({"rollout_steps": 10**12}, "rollout_steps", ""),
        ({"hidden": 10**9}, "hidden", ""),
        ({"workers": 10**20}, "workers", "serial"),
        ({"workers": 10**5, "runtime": "processes"}, "workers", "process"),
        ({"envs_per_worker": 10**20}, "envs_per_worker", ""),
        ({"eval_episodes": 10**20}, "eval_episodes", ""),
        ({"clients": 10**20, "scheduler": "fedavg"}, "clients", ""),
        ({"learner_batch": 10**20, "scheduler": "hybrid"}, "learner_batch", ""),
        ({"torch_threads": 10**20}, "torch_threads", ""),
        ({"total_env_steps": 10**30}, "total_env_steps", ""),
        ({"step_cost_s": 1e308}, "step_cost_s", ""),
        ({"task_overhead_s": 1e308}, "task_overhead_s", ""),
        ({"bandwidth_mbps": 1e-300}, "bandwidth_mbps", ""),
        ({"straggler_slowdown": 1e308, "cluster": "stragglers"}, "straggler_slowdown", ""),
        ({"jitter_sigma": 1e3}, "jitter_sigma", ""),
        ({"ppo_epochs": 10**12, "algo": "ppo"}, "ppo_epochs", ""),
        (
            {"algo": "ppo", "ppo_minibatches": 20, "rollout_steps": 5, "envs_per_worker": 2},
            "ppo_minibatches",
            "10 samples",
        ),
    ],
)
def test_numbers_beyond_what_can_run_are_refused(changes, field, reason):
    with pytest.raises(ConfigError, match=rf"^{field}: .*{reason}") as exc:
        TrainConfig(**changes).validate()
    assert "\n" not in str(exc.value)


def test_ppo_minibatches_up_to_the_samples_per_task_are_fine():
    TrainConfig(algo="ppo", ppo_minibatches=10, rollout_steps=5, envs_per_worker=2).validate()
    # under hybrid the learner's batch holds learner_batch trajectories
    TrainConfig(
        algo="ppo", scheduler="hybrid", learner_batch=4, ppo_minibatches=40, rollout_steps=5
    ).validate()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"rollout_steps": 10**6, "workers": 4096, "envs_per_worker": 1024}, "rollout_steps"),
        ({"hidden": 60_000, "layers": 60}, "hidden"),
        (
            {"scheduler": "hybrid", "algo": "nstep_q", "replay_capacity": 10**12, "hidden": 8},
            "replay_capacity",
        ),
    ],
)
def test_runs_that_cannot_fit_in_memory_are_refused_before_anything_is_written(
    changes, field, tmp_path
):
    from hybrid.trainer import check_config

    cfg = TrainConfig(out=str(tmp_path / "run"), progress=False, **changes)
    with pytest.raises(ConfigError, match=rf"^{field}: .*GiB"):
        check_config(cfg)
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        hybrid.train(cfg)
    assert not (tmp_path / "run").exists()


def test_lr_beyond_float32_on_the_command_line_is_one_line_exit_2(tmp_path):
    proc = _cli("train", "--lr", "1e39", "--out", str(tmp_path / "run"))
    assert "float32" in _one_line_error(proc, "lr")
    assert not (tmp_path / "run").exists()


def _strict(text: str) -> object:
    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_files_never_hold_nan_or_infinity(tmp_path):
    from hybrid.tracking import Tracker, write_json_atomic

    write_json_atomic(tmp_path / "summary.json", {"a": float("inf"), "b": [1.0, float("nan")]})
    assert _strict((tmp_path / "summary.json").read_text()) == {"a": None, "b": [1.0, None]}
    tracker = Tracker(tracking_settings(TrainConfig(progress=False)), tmp_path)
    tracker.log({"kind": "train", "x": float("-inf"), "hist": [float("nan"), 2.0]})
    tracker.close()
    (row,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert _strict(row) == {"kind": "train", "x": None, "hist": [None, 2.0]}


# --- item 10: a flag that does nothing under the chosen scheduler/runtime/env is refused ------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"scheduler": "sync", "staleness_bound": 2}, "staleness_bound"),
        ({"scheduler": "async", "staleness_aware_lr": True}, "staleness_aware_lr"),
        ({"param_sharing": "none"}, "param_sharing"),
        ({"agent_id": False}, "agent_id"),
        ({"critic": "central"}, "critic"),
        ({"wandb_checkpoint": True, "checkpoint_every": 10}, "wandb_checkpoint"),
        ({"wandb_checkpoint": True, "track": True}, "wandb_checkpoint"),
        ({"ray_address": "10.0.0.1:6379"}, "ray_address"),
        # the modelled machine only sets durations on the virtual clock
        ({"runtime": "processes", "cluster": "stragglers"}, "cluster"),
        ({"runtime": "ray", "step_cost_s": 0.01}, "step_cost_s"),
        ({"runtime": "processes", "bandwidth_mbps": 5.0}, "bandwidth_mbps"),
        (
            {"runtime": "processes", "scheduler": "fedavg", "clients": 10, "client_link_sigma": 1},
            "client_link_sigma",
        ),
    ],
)
def test_a_flag_that_does_nothing_here_is_refused(changes, field):
    with pytest.raises(ConfigError, match=rf"^{field}: ") as exc:
        TrainConfig(**changes).validate()
    assert "\n" not in str(exc.value)


def test_the_same_flags_where_they_apply_are_fine():
    TrainConfig(scheduler="bounded", staleness_bound=2, staleness_aware_lr=True).validate()
    TrainConfig(env="mpe2/simple_spread_v3", algo="mappo", param_sharing="none").validate()
    TrainConfig(track=True, wandb_checkpoint=True, checkpoint_every=10).validate()
    TrainConfig(runtime="ray", ray_address="10.0.0.1:6379").validate()
    TrainConfig(cluster="stragglers", step_cost_s=0.01, bandwidth_mbps=5.0).validate()
    TrainConfig(scheduler="fedavg", clients=10, round_deadline_s=1.0).validate()
    # a round deadline is wall time on a real runtime
    for runtime in ("processes", "ray"):
        cfg = TrainConfig(scheduler="fedavg", clients=10, round_deadline_s=1.0, runtime=runtime)
        cfg.validate()


@pytest.mark.parametrize("env", ["Pendulum-v1", "LunarLander-v3", "mpe2/simple_spread_v3"])
def test_env_defaults_never_set_a_flag_that_does_nothing(env):
    from hybrid.defaults import apply_env_defaults

    for scheduler in ("sync", "async", "bounded", "hybrid", "fedavg"):
        cfg = apply_env_defaults(TrainConfig(env=env, scheduler=scheduler))
        if cfg.algo in ("mappo", "ippo") and scheduler in ("hybrid", "fedavg"):
            continue  # refused for other reasons
        try:
            cfg.validate()
        except ConfigError as exc:
            pytest.fail(f"{env} under {scheduler}: {exc}")


def test_a_sweep_varying_a_knob_that_does_nothing_is_refused(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "method: grid\n"
        "parameters:\n"
        "  scheduler: {value: sync}\n"
        "  total_env_steps: {value: 200}\n"
        "  staleness_bound: {values: [1, 2]}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "sweep", str(sweep), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=dict(os.environ, WANDB_MODE="offline"),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "staleness_bound" in proc.stderr and "Traceback" not in proc.stderr


def test_registered_wrappers_travel_to_workers_with_the_env_info(tmp_path):
    from hybrid.envs import _WRAPPERS, describe, make_vector_env

    envs.register_wrapper("halve_rewards_for_workers", _halve_rewards)
    cfg = TrainConfig(wrappers="halve_rewards_for_workers(0.5); TimeLimit(7)")
    info = describe(cfg.env, env_settings(cfg))
    assert info.wrappers == (("halve_rewards_for_workers", _halve_rewards),)
    del _WRAPPERS["halve_rewards_for_workers"]  # as in a spawned worker process
    vector = make_vector_env(cfg.env, 1, env_settings(cfg), info)
    vector.reset(seed=0)
    _, reward, *_ = vector.step(vector.action_space.sample())
    assert float(reward[0]) == 0.5
    vector.close()
