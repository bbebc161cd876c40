"""The real runtimes (processes, ray): every scheduler runs, faults are survived, nothing leaks.

"Nothing leaks" is checked on the process tree (/proc: no descendant of the test
process or of a training subprocess survives) and in /dev/shm. The one process that
may outlive a run is multiprocessing's resource tracker: one per interpreter, shared
by every run, it ends with the interpreter.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

import hybrid
from hybrid.assembly import env_settings, runtime_settings, worker_pool
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.global_model import GlobalModel, Step, params_sha256
from hybrid.envs import describe, register_env
from hybrid.runtimes import _parallel
from hybrid.runtimes.processes import ProcessRuntime
from hybrid.trainer import initial_params

SUMMARY_KEYS = {
    "solved",
    "env_steps_to_solve",
    "train_wall_s",
    "env_steps",
    "updates",
    "tasks",
    "dropped",
    "env_steps_per_s",
    "staleness_mean",
    "staleness_max",
    "staleness_histogram",
    "final_eval_return",
    "virtual_time_s",
    "final_params_sha256",
}
SHM_PREFIXES = ("torch_", "psm_", "sem.", "plasma", "ray")


# --- process-tree and shared-memory inspection ------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, command line) of every live, non-zombie process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]), cmd)
    return table


def _descendants(root: int | None = None) -> dict[int, str]:
    """Every live descendant of ``root`` (default: this process) but the resource tracker."""
    table = _proc_table()
    found: dict[int, str] = {}
    stack = [os.getpid() if root is None else root]
    while stack:
        parent = stack.pop()
        for pid, (ppid, _, cmd) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = cmd
                stack.append(pid)
    return {pid: cmd for pid, cmd in found.items() if "resource_tracker" not in cmd}


def _in_session(sid: int) -> dict[int, str]:
    return {pid: cmd for pid, (_, s, cmd) in _proc_table().items() if s == sid}


def _eventually_empty(probe, timeout_s: float = 15.0) -> dict[int, str]:
    """Processes take a moment to exit after being told to; give them that moment."""
    deadline = time.monotonic() + timeout_s
    left = probe()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = probe()
    return left


def _shm() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIXES)}
    except FileNotFoundError:
        return set()


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a process or a shared-memory segment behind."""
    before_procs, before_shm = set(_descendants()), _shm()
    yield
    left = _eventually_empty(
        lambda: {p: c for p, c in _descendants().items() if p not in before_procs}
    )
    assert not left, f"processes left behind: {left}"
    leaked = _shm() - before_shm
    assert not leaked, f"shared-memory segments left in /dev/shm: {sorted(leaked)}"


@pytest.fixture
def fixed_budget(tiny_config):
    """tiny_config that spends its whole budget (CartPole can be solved within a few hundred
    steps by luck, and a fault test needs the run to last)."""

    def make(**changes) -> TrainConfig:
        return tiny_config(stop_when_solved=False, **changes)

    return make


def _bound(scheduler: str, bound: int) -> dict:
    """staleness_bound where it applies (validate refuses it under other schedulers)."""
    return {"staleness_bound": bound} if scheduler == "bounded" else {}


def _check_summary(result, runtime: str) -> dict:
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert not SUMMARY_KEYS - set(summary), "summary.json lacks keys"
    assert summary["virtual_time_s"] is None
    assert summary["env_steps"] >= result.config.total_env_steps
    assert summary["updates"] > 0 and summary["train_wall_s"] > 0
    assert torch.isfinite(result.params).all()
    rows = result.metrics("train")
    assert rows and all(r["virtual_s"] is None for r in rows)
    assert "sched/worker_restarts" in rows[-1]
    assert json.loads((result.run_dir / "config.json").read_text())["runtime"] == runtime
    return summary


# --- a worker that raises: an env that fails inside worker processes only ---------------------

CRASH_ENV = "HybridCrashyCartPole-v0"


class CrashyCartPole(CartPoleEnv):
    """CartPole that raises in a worker process: once (claiming a marker file) or always."""

    steps = 0

    def step(self, action):
        if os.getpid() != int(os.environ.get("HYBRID_TEST_MAIN_PID", os.getpid())):
            CrashyCartPole.steps += 1
            mode, marker = os.environ.get("HYBRID_TEST_CRASH", ":").split(":", 1)
            if mode == "always" or (mode == "once" and CrashyCartPole.steps > 100):
                try:
                    os.remove(marker)  # only one process wins the claim, once
                except FileNotFoundError:
                    if mode == "once":
                        return super().step(action)
                raise RuntimeError("injected env failure")
        return super().step(action)


def make_crashy() -> gym.Env:
    """The crashy env. Registered with hybrid.envs.register_env, it travels to a worker
    process pickled by reference: unpickling it there imports this module (workers receive
    their settings, not the config, so the env must come with the env description)."""
    return gym.wrappers.TimeLimit(CrashyCartPole(), max_episode_steps=500)


register_env(CRASH_ENV, make_crashy)


# --- processes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheduler,lock_free",
    [("sync", True), ("async", True), ("async", False), ("bounded", True), ("hybrid", True)],
)
def test_processes_every_scheduler_writes_a_complete_summary(
    fixed_budget, scheduler, lock_free, no_leaks
):
    cfg = fixed_budget(
        runtime="processes", scheduler=scheduler, workers=2, lock_free=lock_free,
        total_env_steps=1_500, **_bound(scheduler, 1),
    )  # fmt: skip
    result = hybrid.train(cfg)
    summary = _check_summary(result, "processes")
    rows = result.metrics("train")
    assert rows[-1]["sched/worker_restarts"] == 0
    if scheduler == "sync":
        assert summary["staleness_max"] == 0
    if not lock_free:
        assert rows[-1]["sched/torn_reads"] == 0


@pytest.mark.parametrize("optimizer,momentum", [("adam", 0.0), ("rmsprop", 0.0), ("sgd", 0.9)])
def test_shared_optimizer_statistics_step_like_the_main_process(optimizer, momentum):
    """Hogwild!'s building block: two models stepping one shared θ and one set of optimizer
    statistics, in turn, take exactly the steps one unshared model takes."""
    theta = torch.randn(50, generator=torch.Generator().manual_seed(0))
    alone = GlobalModel(theta, optimizer=optimizer, lr=0.01, momentum=momentum)
    owner = GlobalModel(theta, optimizer=optimizer, lr=0.01, momentum=momentum)
    shared = owner.share_memory()
    other = GlobalModel(torch.zeros(50), optimizer=optimizer, lr=0.01, momentum=momentum)
    other.attach_shared(shared)
    assert owner.params.is_shared() and all(t.is_shared() for t in shared.values())
    for i in range(6):
        gradient = torch.randn(50, generator=torch.Generator().manual_seed(i + 1))
        alone.apply(Step(gradient))
        (other if i % 2 else owner).apply(Step(gradient))
    assert torch.equal(owner.params, alone.params) and torch.equal(other.params, alone.params)
    # A checkpoint loaded into the owner lands in the shared tensors the workers hold.
    owner.load_state_dict(GlobalModel(torch.ones(50), optimizer=optimizer).state_dict())
    assert torch.equal(other.params, torch.ones(50))
    statistics = owner.optimizer.state[owner.param]
    assert statistics and all(tensor is shared[name] for name, tensor in statistics.items())


def test_appliers_server_steps_workers_only_count():
    """Who writes θ is the runtime's applier, not a mode of the global model: the server's
    applier steps θ from a copied snapshot; Hogwild!'s counts a step the workers took and
    hands out the live θ (workers read the shared θ themselves)."""
    from hybrid.core.appliers import ServerApplies, WorkersApply
    from hybrid.protocol import ComputeGradient

    model = GlobalModel(torch.ones(4), optimizer="sgd", lr=0.5, target_every=2)
    server, workers = ServerApplies(), WorkersApply()
    copied = server.snapshot(model, ComputeGradient(), 0.0)
    assert copied.params.data_ptr() != model.params.data_ptr()
    assert torch.equal(copied.params, model.params)
    assert server.apply(model, Step(torch.full((4,), 2.0)), 0.0) == pytest.approx(4.0)
    assert torch.equal(model.params, torch.zeros(4)) and model.version == 1
    live = workers.snapshot(model, ComputeGradient(), 0.0).params
    assert live.data_ptr() == model.params.data_ptr()
    model.params.fill_(7.0)  # what a worker wrote to the shared θ
    assert workers.apply(model, Step(torch.full((4,), 3.0)), 0.0) == pytest.approx(6.0)
    assert torch.equal(model.params, torch.full((4,), 7.0)) and model.version == 2
    assert torch.equal(model.target, model.params)  # the target network still refreshes
    with pytest.raises(ValueError, match="learner"):
        workers.apply(model, Step(None), 0.0)


def test_hogwild_workers_take_the_steps_the_main_process_would(fixed_budget, tmp_path, no_leaks):
    """With one worker nothing races, so Hogwild! (the worker steps the shared θ itself) and
    the locked mode (the main process steps it) must end on the very same parameters; had
    both applied an update, or either skipped one, they would not."""
    hashes = {}
    for lock_free in (True, False):
        cfg = fixed_budget(
            runtime="processes", scheduler="async", workers=1, lock_free=lock_free,
            total_env_steps=600, max_grad_norm=0.5, out=str(tmp_path / f"lock_free={lock_free}"),
        )  # fmt: skip
        result = hybrid.train(cfg)
        summary = _check_summary(result, "processes")
        hashes[lock_free] = summary["final_params_sha256"]
        # Torn reads are counted where one writer makes them detectable, not under Hogwild!
        assert ("sched/torn_reads" in result.metrics("train")[-1]) is not lock_free
    assert hashes[True] == hashes[False]
    assert hashes[True] != params_sha256(initial_params(cfg, describe(cfg.env, env_settings(cfg))))


def test_hogwild_workers_stop_writing_when_the_loop_ends(fixed_budget, no_leaks):
    """Long tasks: when the loop ends, the other worker is still computing. Unless it is
    told to stop writing and waited for, its update would land in θ after the summary's
    hash (and the final evaluation) were taken, so Result.params would differ from it."""
    cfg = fixed_budget(
        runtime="processes", scheduler="async", workers=2, envs_per_worker=8, rollout_steps=100,
        total_env_steps=3_200, eval_episodes=1, eval_every=10**9,
    )  # fmt: skip
    result = hybrid.train(cfg)
    assert result.summary["final_params_sha256"] == params_sha256(result.params)


@pytest.mark.slow
def test_sync_on_processes_solves_cartpole(tmp_path, no_leaks):
    result = hybrid.train(
        TrainConfig(
            runtime="processes",
            scheduler="sync",
            workers=2,
            total_env_steps=200_000,
            eval_every=2_500,
            progress=False,
            out=str(tmp_path / "run"),
        )
    )
    assert result.summary["solved"], result.summary
    assert result.summary["virtual_time_s"] is None


def _kill_on_dispatch(monkeypatch, runtime_cls, kill, worker: int, at: tuple[int, ...]) -> None:
    """Make ``runtime_cls.dispatch`` call ``kill(runtime)`` around the at-th dispatch to worker."""
    original = runtime_cls.dispatch
    count = {"n": 0}

    def dispatch(self, worker_id, snapshot):
        if worker_id == worker:
            count["n"] += 1
        if count["n"] in at and worker_id == worker:
            kill(self, lambda: original(self, worker_id, snapshot))
        else:
            original(self, worker_id, snapshot)

    monkeypatch.setattr(runtime_cls, "dispatch", dispatch)


@pytest.mark.parametrize("scheduler", ["sync", "bounded"])
def test_processes_worker_killed_twice_run_completes(
    fixed_budget, monkeypatch, scheduler, no_leaks, caplog
):
    # SIGKILL from outside, as the OOM killer would, while the task is in flight.
    def sigkill_in_flight(runtime, dispatch):
        dispatch()
        os.kill(runtime.worker_pids()[0], signal.SIGKILL)

    _kill_on_dispatch(monkeypatch, ProcessRuntime, sigkill_in_flight, worker=0, at=(3, 12))
    cfg = fixed_budget(
        runtime="processes", scheduler=scheduler, workers=2, **_bound(scheduler, 0),
        total_env_steps=2_000, log_every=50,
    )  # fmt: skip
    result = hybrid.train(cfg)
    _check_summary(result, "processes")
    last = result.metrics("train")[-1]
    assert last["sched/worker_restarts"] == 2
    assert last["sched/lost_updates"] <= 2  # 2 unless a result was already in the pipe
    assert torch.isfinite(result.params).all()
    assert "restarted as incarnation" in caplog.text


def test_processes_worker_that_raises_is_restarted(fixed_budget, tmp_path, monkeypatch, no_leaks):
    marker = tmp_path / "crash-once"
    marker.touch()
    monkeypatch.setenv("HYBRID_TEST_MAIN_PID", str(os.getpid()))
    monkeypatch.setenv("HYBRID_TEST_CRASH", f"once:{marker}")
    cfg = fixed_budget(runtime="processes", scheduler="sync", workers=2, env=CRASH_ENV)
    result = hybrid.train(cfg)
    assert not marker.exists()  # the failure did happen
    assert result.metrics("train")[-1]["sched/worker_restarts"] == 1
    assert torch.isfinite(result.params).all()


def test_processes_worker_that_always_raises_stops_the_run(
    fixed_budget, tmp_path, monkeypatch, no_leaks
):
    monkeypatch.setenv("HYBRID_TEST_MAIN_PID", str(os.getpid()))
    monkeypatch.setenv("HYBRID_TEST_CRASH", "always:")
    cfg = fixed_budget(runtime="processes", workers=2, env=CRASH_ENV)
    with pytest.raises(RuntimeError, match="injected env failure"):
        hybrid.train(cfg)


def test_processes_keyboard_interrupt_ends_every_worker(fixed_budget, monkeypatch, no_leaks):
    original = ProcessRuntime.next_update
    calls = {"n": 0}

    def next_update(self):
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(ProcessRuntime, "next_update", next_update)
    with pytest.raises(KeyboardInterrupt):
        hybrid.train(fixed_budget(runtime="processes", workers=2, total_env_steps=100_000))


def test_processes_injected_faults_are_seeded_and_survived(fixed_budget, no_leaks):
    # The kills are drawn per dispatched task from the run's seed: at this rate, seed 5
    # strikes the 6th task and no other of the first 60 (the run dispatches 50 to 60).
    injector = _parallel.FaultInjector(0.02, 5)
    assert [i for i in range(60) if injector.strike()] == [5]
    cfg = fixed_budget(
        runtime="processes", scheduler="async", workers=2, seed=5,
        inject_worker_faults=0.02, total_env_steps=500, log_every=50,
    )  # fmt: skip
    result = hybrid.train(cfg)
    assert result.metrics("train")[-1]["sched/worker_restarts"] == 1
    assert torch.isfinite(result.params).all()


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["processes", "ray"])
def test_ctrl_c_leaves_no_process(tmp_path, runtime):
    if runtime == "ray":
        pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")
    out = tmp_path / "run"
    script = textwrap.dedent(
        f"""
        import hybrid
        hybrid.train(runtime={runtime!r}, workers=2, total_env_steps=10**8, log_every=200,
                     progress=False, out={str(out)!r})
        """
    )
    # A session of its own, like a terminal: Ctrl-C reaches the whole process group.
    child = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert child.poll() is None, "training ended before it could be interrupted"
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        os.killpg(child.pid, signal.SIGINT)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    left = _eventually_empty(lambda: _in_session(child.pid))
    assert not left, f"processes left behind after Ctrl-C: {left}"


def test_more_workers_than_cores_warns(monkeypatch):
    monkeypatch.setattr(_parallel, "physical_cores", lambda: 2)
    with pytest.warns(RuntimeWarning, match="context switch"):
        _parallel.warn_if_oversubscribed(3, "processes")


def test_inject_worker_faults_is_validated():
    for bad in (-0.1, 1.0, math.nan):
        with pytest.raises(ConfigError, match="inject_worker_faults"):
            TrainConfig(inject_worker_faults=bad).validate()


# --- ray -----------------------------------------------------------------------------------------


def _ray():
    return pytest.importorskip(
        "ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]"
    )


def test_ray_sync_starts_and_stops_its_own_local_ray(fixed_budget, no_leaks, monkeypatch):
    ray = _ray()
    if ray.is_initialized():
        pytest.skip("a Ray instance from elsewhere is running in this process")
    token = Path.home() / ".ray" / "auth_token"
    had_token = token.exists()
    # The private token folders this run makes (other runs on the machine make theirs).
    private_dirs: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        path = mkdtemp(*args, **kwargs)
        if str(kwargs.get("prefix", "")).startswith("hybrid-ray-"):
            private_dirs.append(path)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    environ = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
    result = hybrid.train(fixed_budget(runtime="ray", scheduler="sync", workers=2))
    _check_summary(result, "ray")
    assert result.summary["staleness_max"] == 0
    assert not ray.is_initialized()
    assert token.exists() == had_token, "Ray wrote an auth token into the home directory"
    assert private_dirs, "the run made no private folder for Ray's token"
    assert not [d for d in private_dirs if os.path.exists(d)], "token left"
    assert {k: v for k, v in os.environ.items() if k.startswith("RAY_")} == environ


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the tests below (started as the runtime would start it)."""
    ray = _ray()
    from hybrid.runtimes.ray import connect

    owned = connect("", workers=2)
    yield ray
    if owned:
        owned.close()


def test_ray_local_instance_is_loopback_only(ray_session):
    assert ray_session.util.get_node_ip_address() == "127.0.0.1"


def test_ray_local_instance_refuses_a_client_without_its_token(ray_session, tmp_path):
    """Another local user (no token, a home of its own) must not reach the run's Ray."""
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
    assert token_path and oct(os.stat(token_path).st_mode & 0o777) == "0o600"
    assert not token_path.startswith(str(Path.home()))
    gcs = ray_session.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # else its Ray dials the routable address
    intruder = (
        "import os, ray\n"
        f"ray.init(address={gcs!r}, log_to_driver=False)\n"
        "print('CONNECTED', flush=True)\n"
        "print(ray.get(ray.remote(lambda: os.system('true')).remote()), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", intruder],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    verdict = "exited"
    watchdog = threading.Timer(90, proc.kill)  # a hang fails the test instead of stalling it
    watchdog.start()
    try:
        for line in proc.stdout:  # Ray retries a refused client for ~20 s: stop at the first
            if "CONNECTED" in line or "Unauthenticated" in line or "InvalidAuthToken" in line:
                verdict = line.strip()
                break
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    assert "CONNECTED" not in verdict and verdict != "exited", verdict


@pytest.mark.parametrize("scheduler", ["async", "bounded", "hybrid", "fedavg"])
def test_ray_schedulers_write_a_complete_summary(fixed_budget, ray_session, scheduler):
    result = hybrid.train(
        fixed_budget(
            runtime="ray", scheduler=scheduler, workers=2, **_bound(scheduler, 1),
            total_env_steps=1_500,
        )
    )  # fmt: skip
    _check_summary(result, "ray")
    assert ray_session.is_initialized()  # not ours to stop


def _serve_in_background(actor):
    """Run ``actor.serve()`` in a thread; returns the thread and the list its exception lands in."""
    raised: list[BaseException] = []

    def serve():
        try:
            actor.serve()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, raised


def test_ray_task_connection_runs_tasks_and_reports_a_raising_task(ray_session):
    from hybrid.runtimes.ray import ActorWorker

    cfg = TrainConfig(env="CartPole-v1", workers=1)
    info = describe(cfg.env)
    actor = ActorWorker(
        0, 0, runtime_settings(cfg), info, worker_pool(cfg, info)
    )  # in this process: the actor's side of the protocol
    key = os.urandom(32)
    address, pid = actor.listen(key)
    assert address[0] == "127.0.0.1" and pid == os.getpid()  # Ray is local: loopback only
    thread, raised = _serve_in_background(actor)
    params = initial_params(cfg, info).numpy()
    with Client(address, authkey=key) as conn:
        conn.send((params, 7, "gradient", None))
        kind, record = conn.recv()
        assert kind == "result" and record["base_version"] == 7 and record["env_steps"] > 0
        assert record["wire"].array.shape == params.shape

        def boom(*args):
            raise RuntimeError("boom")

        actor.run = boom
        conn.send((params, 8, "gradient", None))
        kind, text = conn.recv()
        assert kind == "error" and "RuntimeError: boom" in text
    thread.join(10)
    assert not thread.is_alive() and not raised  # it stopped serving, quietly


def test_ray_actor_outlasts_a_wrong_key_and_a_silent_peer(monkeypatch):
    """A local process that knocks on an actor's port must neither stop it nor hold it."""
    import socket

    import ray

    from hybrid.runtimes import ray as ray_runtime

    monkeypatch.setattr(ray_runtime, "HANDSHAKE_TIMEOUT_S", 1.0, raising=False)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")  # no Ray needed
    cfg = TrainConfig(env="CartPole-v1", workers=1)
    info = describe(cfg.env)
    actor = ray_runtime.ActorWorker(0, 0, runtime_settings(cfg), info, worker_pool(cfg, info))
    key = os.urandom(32)
    address, _ = actor.listen(key)
    thread, raised = _serve_in_background(actor)
    with pytest.raises(AuthenticationError):
        Client(address, authkey=os.urandom(32))  # refused: it read nothing
    silent = socket.create_connection(address)  # connects and never answers the challenge
    answers = []

    def driver():
        with Client(address, authkey=key) as conn:
            conn.send((initial_params(cfg, info).numpy(), 7, "gradient", None))
            answers.append(conn.recv())

    talk = threading.Thread(target=driver, daemon=True)  # a hang fails the test, not CI
    talk.start()
    talk.join(60)
    silent.close()
    assert answers and answers[0][0] == "result" and answers[0][1]["base_version"] == 7
    thread.join(10)
    assert not thread.is_alive() and not raised


def test_ray_driver_connect_has_a_deadline():
    """An actor's port held by something that never answers: the driver gives up, it does
    not block in Client() forever."""
    import socket

    from hybrid.runtimes import ray as ray_runtime

    with socket.create_server(("127.0.0.1", 0)) as server:
        outcome = []

        def connect():
            try:
                ray_runtime.open_connection(server.getsockname(), os.urandom(32), timeout=0.5)
            except ray_runtime.HANDSHAKE_ERRORS as exc:
                outcome.append(exc)

        attempt = threading.Thread(target=connect, daemon=True)
        attempt.start()
        attempt.join(60)
        assert outcome and isinstance(outcome[0], OSError)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def test_ray_unreachable_address_is_one_line_exit_2(tmp_path):
    _ray()
    argv = ["--runtime", "ray", "--ray-address", f"127.0.0.1:{_free_port()}", "--workers", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", *argv, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=100,  # ray.init alone would retry for minutes
        env=dict(os.environ, WANDB_MODE="offline"),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert "ray_address" in proc.stderr and "Traceback" not in proc.stderr


def test_ray_sigterm_during_startup_exits_143_and_ends_every_ray_process(tmp_path):
    _ray()
    argv = ["--runtime", "ray", "--workers", "1", "--total-env-steps", "100000"]
    child = subprocess.Popen(
        [sys.executable, "-m", "hybrid.cli", "train", *argv, "--out", str(tmp_path / "run")],
        env=dict(os.environ, WANDB_MODE="offline"),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while not any("agent" in cmd.lower() for cmd in seen.values()):  # Ray is starting
            assert child.poll() is None and time.monotonic() < deadline, "Ray did not start"
            time.sleep(0.05)
            seen = _descendants(child.pid)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 143, err[-2000:]
    assert "SIGTERM" in err and "Traceback" not in err, err[-2000:]
    # The raylet's agents used to outlive it by a minute.
    left = _eventually_empty(lambda: {p: c for p, c in _proc_table().items() if p in seen})
    assert not left, f"Ray processes left after SIGTERM at start-up: {left}"


def test_ray_actor_the_driver_cannot_reach_in_time_is_replaced(
    fixed_budget, ray_session, monkeypatch
):
    """A connect that misses its deadline (an intruder held the actor) counts as a failure:
    the actor is replaced and the run goes on, at start-up as later."""
    from hybrid.runtimes import ray as ray_runtime

    real, calls = ray_runtime.open_connection, []

    def first_one_times_out(address, authkey, timeout=ray_runtime.CONNECT_TIMEOUT_S):
        calls.append(address)
        if len(calls) == 1:
            raise TimeoutError("timed out")
        return real(address, authkey, timeout)

    monkeypatch.setattr(ray_runtime, "open_connection", first_one_times_out)
    cfg = fixed_budget(runtime="ray", scheduler="async", workers=2, total_env_steps=300)
    result = hybrid.train(cfg)
    assert result.metrics("train")[-1]["sched/worker_restarts"] == 1
    assert len(calls) == 3  # two actors, one of them twice


@pytest.mark.slow
def test_ray_actor_killed_twice_run_completes(fixed_budget, ray_session, monkeypatch):
    from hybrid.runtimes.ray import RayRuntime

    def sigkill_actor(runtime, dispatch):
        dispatch()
        os.kill(runtime.worker_pids()[0], signal.SIGKILL)  # the task is in flight

    _kill_on_dispatch(monkeypatch, RayRuntime, sigkill_actor, worker=0, at=(3, 12))
    cfg = fixed_budget(
        runtime="ray", scheduler="sync", workers=2, total_env_steps=2_000, log_every=50
    )
    result = hybrid.train(cfg)
    _check_summary(result, "ray")
    last = result.metrics("train")[-1]
    assert last["sched/worker_restarts"] == 2
    assert torch.isfinite(result.params).all()


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["processes", "ray"])
def test_resume_continues_counters_with_fresh_workers(fixed_budget, monkeypatch, request, runtime):
    if runtime == "ray":
        request.getfixturevalue("ray_session")  # the local Ray of the tests above
        from hybrid.runtimes.ray import RayRuntime as runtime_cls
    else:
        request.getfixturevalue("no_leaks")
        runtime_cls = ProcessRuntime

    def sigkill_in_flight(runtime, dispatch):
        dispatch()
        os.kill(runtime.worker_pids()[0], signal.SIGKILL)

    _kill_on_dispatch(monkeypatch, runtime_cls, sigkill_in_flight, worker=0, at=(3,))
    original_next = runtime_cls.next_update
    calls = {"n": 0}

    def next_update(self):
        calls["n"] += 1
        if calls["n"] == 60:
            raise KeyboardInterrupt  # after the checkpoints of versions 10 and 20
        return original_next(self)

    monkeypatch.setattr(runtime_cls, "next_update", next_update)
    original_load = runtime_cls.load_state_dict
    incarnations: list[int] = []

    def load_state_dict(self, state):
        original_load(self, state)
        incarnations.extend(self.state_dict()["incarnations"])

    monkeypatch.setattr(runtime_cls, "load_state_dict", load_state_dict)
    cfg = fixed_budget(
        runtime=runtime, scheduler="sync", workers=2, total_env_steps=1_000,
        checkpoint_every=10, log_every=50,
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        hybrid.train(cfg)
    result = hybrid.train(TrainConfig(resume=cfg.out, progress=False))
    _check_summary(result, runtime)
    assert incarnations == [2, 1]  # worker 0 had been restarted once: both draw fresh seeds
    assert result.metrics("train")[-1]["sched/worker_restarts"] == 1


def test_parallel_runtimes_default_to_one_worker_per_physical_core():
    from hybrid.defaults import apply_runtime_defaults

    cores = _parallel.physical_cores()
    assert apply_runtime_defaults(TrainConfig(runtime="processes")).workers == cores
    assert apply_runtime_defaults(TrainConfig(runtime="ray")).workers == cores
    assert apply_runtime_defaults(TrainConfig(runtime="processes", workers=3)).workers == 3
    assert apply_runtime_defaults(TrainConfig(runtime="processes"), keep={"workers"}).workers == 8
    assert apply_runtime_defaults(TrainConfig()).workers == 8  # serial simulates any number
    cluster = TrainConfig(runtime="ray", ray_address="10.0.0.1:6379")
    assert apply_runtime_defaults(cluster).workers == 8
