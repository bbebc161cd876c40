"""Schedulers that users write themselves, with the public API only.

The two published rules shipped in examples/schedulers (DC-ASGD, FedBuff) are the proof:
their maths against hand-computed references, their settings from Python and the command
line, bit-exact resume, and a run on every runtime.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import crash_copy, make_update, metric_rows

import hybrid
from hybrid import ConfigError, Scheduler, Step, TrainConfig
from hybrid.checkpoint import list_checkpoints
from hybrid.protocol import ComputeGradient
from hybrid.schedulers import (
    SCHEDULERS,
    MixingStep,
    ReplicaScheduler,
    make_settings,
    resolve_scheduler,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "schedulers"
DC_ASGD = f"{EXAMPLES / 'dc_asgd.py'}:DCASGD"
FEDBUFF = f"{EXAMPLES / 'fedbuff.py'}:FedBuff"


class FakeModel:
    """A stand-in for the global model a scheduler may read."""

    def __init__(self, params: torch.Tensor) -> None:
        self.params = params
        self.version = 0


def _bound(scheduler: Scheduler, params: torch.Tensor) -> FakeModel:
    import numpy as np

    model = FakeModel(params)
    scheduler.bind(model, np.random.default_rng(0))
    return model


# --- the public API ------------------------------------------------------------------------------


@dataclass
class EveryOtherSettings:
    keep_odd: bool = False


class EveryOther(Scheduler):
    """Applies every other update on arrival, the rest dropped: a rule of one's own."""

    Settings = EveryOtherSettings

    def __init__(self, workers: int, settings: EveryOtherSettings) -> None:
        super().__init__(workers)
        self.settings = settings
        self.seen = 0

    def ready(self, idle, version):
        return list(idle)

    def admit(self, update, staleness):
        self.seen += 1
        if self.seen % 2 == int(self.settings.keep_odd):
            return hybrid.Verdict.DROP
        return super().admit(update, staleness)

    def full(self):
        return bool(self.buffer)


def test_a_registered_scheduler_runs_with_its_own_settings(tiny_config):
    hybrid.register_scheduler("every-other", EveryOther)
    try:
        cfg = tiny_config(scheduler="every-other", scheduler_args={"keep_odd": True})
        result = hybrid.train(cfg)
        again = hybrid.train(cfg.replace(out=cfg.out + "-again"))
    finally:
        del SCHEDULERS["every-other"]
    assert result.summary["dropped"] == result.summary["tasks"] // 2
    assert result.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    stored = json.loads((result.run_dir / "config.json").read_text())
    assert stored["scheduler"] == "every-other" and stored["scheduler_args"] == {"keep_odd": True}


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("no-such-scheduler", {}, "scheduler"),
        (f"{EXAMPLES / 'nope.py'}:X", {}, "scheduler"),
        (f"{EXAMPLES / 'dc_asgd.py'}:Nope", {}, "scheduler"),
        (f"{EXAMPLES / 'dc_asgd.py'}:DCASGDSettings", {}, "scheduler"),  # not a Scheduler
        ("json:JSONDecoder", {}, "scheduler"),
        (DC_ASGD, {"lambda": 0.1}, "scheduler_args"),  # unknown setting
        (DC_ASGD, {"lam": "a lot"}, "scheduler_args"),  # wrong type
        (DC_ASGD, {"lam": True}, "scheduler_args"),  # a bool is no number
        (DC_ASGD, {"lam": -1.0}, "scheduler_args"),  # its own check
        ("sync", {"lam": 0.1}, "scheduler_args"),  # built-ins take flags
    ],
)
def test_bad_schedulers_and_settings_are_one_line_errors(name, args, field):
    with pytest.raises(ConfigError) as err:
        TrainConfig(scheduler=name, scheduler_args=args).validate()
    message = str(err.value)
    assert message.startswith(f"{field}:") and "\n" not in message


def test_settings_are_type_checked_from_command_line_strings():
    cls = resolve_scheduler(DC_ASGD).cls
    settings = make_settings(cls, {"lam": "0.5", "adaptive": "true"})
    assert settings.lam == 0.5 and settings.adaptive is True
    fedbuff = make_settings(resolve_scheduler(FEDBUFF).cls, {"buffer_size": "3"})
    assert fedbuff.buffer_size == 3
    with pytest.raises(ConfigError, match="buffer_size"):
        make_settings(resolve_scheduler(FEDBUFF).cls, {"buffer_size": "2.5"})


def test_cli_takes_repeated_scheduler_args(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "hybrid.cli", "train", "--scheduler", DC_ASGD,
        "--scheduler-arg", "lam=0.1", "--scheduler-arg=adaptive=true",
        "--total-env-steps", "300", "--eval-every", "300", "--eval-episodes", "1",
        "--workers", "2", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stored = json.loads((out / "config.json").read_text())
    assert stored["scheduler_args"] == {"lam": 0.1, "adaptive": True}
    bad = subprocess.run(
        [*command[:6], "--scheduler-arg", "lam", "--out", str(tmp_path / "bad")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "scheduler_arg" in bad.stderr
    assert not (tmp_path / "bad").exists()


# --- DC-ASGD ---------------------------------------------------------------------------------


def test_dc_asgd_compensates_with_the_theta_the_worker_read():
    cls = resolve_scheduler(DC_ASGD).cls
    scheduler = cls(2, make_settings(cls, {"lam": 0.5}))
    model = _bound(scheduler, torch.tensor([1.0, 2.0, 3.0]))
    assert scheduler.ready([0, 1], version=0) == [0, 1]  # both read θ_0
    model.params, model.version = torch.tensor([1.5, 2.0, 2.0]), 1  # someone's step landed
    g = torch.tensor([2.0, -1.0, 1.0])
    scheduler.admit(make_update(1, 0, g.tolist()), staleness=1)
    step = scheduler.combine()
    # g + λ g⊙g⊙(θ_now − θ_read) = g + 0.5 · [4, 1, 1] ⊙ [0.5, 0, −1]
    assert torch.allclose(step.direction, torch.tensor([3.0, -1.0, 0.5]))
    assert len(scheduler.read) == 1  # θ_0 is kept while worker 0's task is in flight


def test_dc_asgd_adaptive_divides_lambda_by_the_root_mean_square():
    cls = resolve_scheduler(DC_ASGD).cls
    scheduler = cls(1, make_settings(cls, {"lam": 1.0, "adaptive": True, "momentum": 0.5}))
    model = _bound(scheduler, torch.zeros(2))
    scheduler.ready([0], 0)
    model.params = torch.ones(2)
    g = torch.tensor([2.0, 4.0])
    scheduler.admit(make_update(0, 0, g.tolist()), staleness=0)
    step = scheduler.combine()
    expected = g + 1.0 / torch.sqrt(g * g + 1e-7) * g * g * 1.0  # first MeanSquare is g²
    assert torch.allclose(step.direction, expected)


def test_dc_asgd_with_zero_lambda_is_async_exactly(tiny_config):
    common = {"cluster": "heterogeneous", "stop_when_solved": False, "total_env_steps": 1_200}
    plain = hybrid.train(tiny_config(scheduler="async", **common))
    dc = hybrid.train(
        tiny_config(
            scheduler=DC_ASGD, scheduler_args={"lam": 0.0}, out=str(plain.run_dir) + "-dc", **common
        )
    )
    assert dc.summary["final_params_sha256"] == plain.summary["final_params_sha256"]
    compensated = hybrid.train(
        tiny_config(
            scheduler=DC_ASGD, scheduler_args={"lam": 1.0}, out=str(plain.run_dir) + "-l1", **common
        )
    )
    assert compensated.summary["final_params_sha256"] != plain.summary["final_params_sha256"]


# --- FedBuff ---------------------------------------------------------------------------------


def test_fedbuff_steps_on_the_staleness_weighted_mean_of_k_deltas():
    cls = resolve_scheduler(FEDBUFF).cls
    scheduler = cls(4, make_settings(cls, {"buffer_size": 3}))
    _bound(scheduler, torch.zeros(2))
    assert scheduler.ready([0, 1, 2, 3], 0) == [0, 1, 2, 3]
    arrivals = [([1.0, 0.0], 0), ([0.0, 2.0], 3), ([4.0, 4.0], 8)]
    for worker, (delta, tau) in enumerate(arrivals):
        assert not scheduler.full()
        scheduler.admit(make_update(worker, 0, delta, kind="delta"), staleness=tau)
    assert scheduler.full()
    step = scheduler.combine()
    # (1/K) Σ Δ_k / sqrt(1 + τ_k) = ([1, 0]/1 + [0, 2]/2 + [4, 4]/3) / 3
    expected = (
        torch.tensor([1.0, 0.0]) + torch.tensor([0.0, 1.0]) + torch.tensor([4.0, 4.0]) / 3
    ) / 3
    assert torch.allclose(step.direction, expected) and step.clip is False
    assert len(step.updates) == 3 and not scheduler.buffer


def test_fedbuff_keeps_at_most_concurrency_clients_training():
    cls = resolve_scheduler(FEDBUFF).cls
    scheduler = cls(10, make_settings(cls, {"buffer_size": 2, "concurrency": 3}))
    _bound(scheduler, torch.zeros(1))
    first = scheduler.ready(list(range(10)), 0)
    assert len(first) == 3 and first == sorted(first)
    idle = [w for w in range(10) if w not in first]
    assert scheduler.ready(idle, 0) == []  # three are training
    assert len(scheduler.ready([*idle, first[0]], 0)) == 1  # one came back


# --- every runtime, and resume -------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "args"),
    [(DC_ASGD, {"lam": 0.5}), (FEDBUFF, {"buffer_size": 2})],
    ids=["dc_asgd", "fedbuff"],
)
def test_user_schedulers_resume_bit_exactly(tiny_config, tmp_path, scheduler, args):
    cfg = tiny_config(
        scheduler=scheduler,
        scheduler_args=args,
        # FedBuff's clients train locally; DC-ASGD's workers compute gradients (no local steps)
        **({"local_steps": 2} if scheduler == FEDBUFF else {}),
        total_env_steps=2_400,
        checkpoint_every=5,
        keep_checkpoints=100,
        stop_when_solved=False,
        eval_every=700,
        cluster="heterogeneous",
    )
    full = hybrid.train(cfg)
    assert len(list_checkpoints(full.run_dir)) >= 3
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    # a scheduler file runs on resume only when named again (a run directory is data)
    resumed = hybrid.train(resume=str(crashed), scheduler=scheduler)
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)


@pytest.mark.parametrize("runtime", ["processes", "ray"])
@pytest.mark.parametrize(
    ("scheduler", "args"),
    [(DC_ASGD, {"lam": 0.5}), (FEDBUFF, {"buffer_size": 2})],
    ids=["dc_asgd", "fedbuff"],
)
def test_user_schedulers_run_on_parallel_runtimes(tiny_config, runtime, scheduler, args):
    if runtime == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")
    cfg = tiny_config(
        runtime=runtime,
        scheduler=scheduler,
        scheduler_args=args,
        workers=2,
        **({"local_steps": 2} if scheduler == FEDBUFF else {}),
        total_env_steps=1_000,
        stop_when_solved=False,
    )
    summary = hybrid.train(cfg).summary
    assert summary["env_steps"] >= 1_000 and summary["updates"] > 0
    assert summary["rejected_corrupt"] == 0 and summary["rejected_nonfinite"] == 0


# --- benchmarks/user_schedulers.py ---------------------------------------------------------------


def test_the_benchmark_settings_are_valid_configs(tmp_path, monkeypatch):
    """Every run the benchmark would start passes validation (examples found, settings
    typed), so a renamed setting fails here rather than an hour into the benchmark."""
    import argparse
    import importlib.util

    path = EXAMPLES.parent.parent / "benchmarks" / "user_schedulers.py"
    spec = importlib.util.spec_from_file_location("bench_user_schedulers", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    args = argparse.Namespace(
        seeds=[0, 1], steps=1_000, out=str(tmp_path), workers=8, cluster="heterogeneous",
        eval_every=500,
    )  # fmt: skip
    jobs = bench.jobs(args)
    assert len(jobs) == 2 * len(bench.SETTINGS)
    labels = [job["exp_name"] for job in jobs]
    assert len(set(labels)) == len(bench.SETTINGS)  # one group per table row
    for job in jobs:
        TrainConfig(**job).validate()
    assert len({job["out"] for job in jobs}) == len(jobs)  # no two runs share a directory


# --- settings a run cannot compute with ----------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["nan", "inf", "-inf", "1e300", float("nan"), float("inf"), 1e300]
)
@pytest.mark.parametrize(
    ("scheduler", "key"), [(DC_ASGD, "lam"), (FEDBUFF, "staleness_exponent")], ids=["dc", "fedbuff"]
)
def test_non_finite_and_huge_scheduler_args_are_refused(scheduler, key, value):
    # nan passed every range check (nan < 0 is False) and diverged the run on its first step
    with pytest.raises(ConfigError) as err:
        TrainConfig(scheduler=scheduler, scheduler_args={key: value}).validate()
    message = str(err.value)
    assert message.startswith(f"scheduler_args: {key}=") and "\n" not in message


def test_a_non_finite_scheduler_arg_on_the_command_line_exits_2(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--scheduler", DC_ASGD,
         "--scheduler-arg", "lam=nan", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "lam=nan is not a finite number" in done.stderr
    assert not out.exists()


# --- a scheduler of yours that misbehaves --------------------------------------------------------


@dataclass
class FaultySettings:
    fault: str = ""
    """Which misbehaviour (see Faulty); empty: none."""
    after: int = 0
    """Calls of the faulty method that behave before it misbehaves."""


class Faulty(Scheduler):
    """async's rule, with one method that raises or returns garbage on request."""

    Settings = FaultySettings

    def __init__(self, workers: int, settings: FaultySettings) -> None:
        if settings.fault == "init_raises":
            raise RuntimeError("cannot start")
        super().__init__(workers)
        self.settings = settings
        self.calls: dict[str, int] = {}

    def misbehaves(self, method: str) -> bool:
        self.calls[method] = self.calls.get(method, 0) + 1
        return self.settings.fault.startswith(method) and self.calls[method] > self.settings.after

    def ready(self, idle, version):
        if self.misbehaves("ready_raises"):
            raise ValueError("no idea")
        if self.misbehaves("ready_busy"):
            return [*idle, 99]
        return list(idle)

    def admit(self, update, staleness):
        if self.misbehaves("admit_garbage"):
            return "yes"
        return super().admit(update, staleness)

    def full(self):
        if self.misbehaves("full_raises"):
            raise KeyError("buffer")
        return bool(self.buffer)

    def combine(self):
        if self.misbehaves("combine_garbage"):
            self.buffer.clear()
            return 42
        step = super().combine()
        if self.misbehaves("combine_shape"):
            step.direction = step.direction[:3]
        return step

    def metrics(self):
        if self.misbehaves("metrics_not_json"):
            return {"sched/seen": object()}
        return {"sched/seen": float(self.calls.get("metrics_not_json", 0))}

    def state_dict(self):
        if self.misbehaves("state_dict_unpicklable"):
            return {"calls": dict(self.calls), "rule": lambda x: x}
        return {"calls": dict(self.calls)}

    def load_state_dict(self, state):
        self.calls = dict(state["calls"])


@pytest.fixture
def faulty():
    hybrid.register_scheduler("faulty", Faulty)
    yield "faulty"
    SCHEDULERS.pop("faulty", None)


@pytest.mark.parametrize(
    ("fault", "after", "says"),
    [
        ("ready_raises", 20, "ready() raised ValueError: no idea"),
        ("ready_busy", 20, ", 99]: worker 99 is not idle (the idle workers were ["),
        ("admit_garbage", 20, "admit() returned 'yes'; expected Verdict.BUFFER or DROP"),
        ("full_raises", 20, "full() raised KeyError: 'buffer'"),
        ("combine_garbage", 20, "combine() returned 42; expected a Step or None"),
        ("combine_shape", 20, "combine() returned a Step whose direction has shape (3,)"),
        ("metrics_not_json", 1, "metrics() returned {'sched/seen': <object object at"),
        ("state_dict_unpicklable", 1, "state_dict() returned state_dict()['rule'] = <function"),
    ],
)
def test_a_faulty_scheduler_stops_the_run_with_one_line(faulty, tiny_config, fault, after, says):
    """Each fault names the scheduler, the method and what it did, in one line; the logs
    written so far are whole and the checkpoints written before the fault still load."""
    from hybrid.checkpoint import load
    from hybrid.errors import SchedulerFault

    cfg = tiny_config(
        scheduler=faulty,
        scheduler_args={"fault": fault, "after": after},
        checkpoint_every=3,
        log_every=20,
        stop_when_solved=False,
    )
    with pytest.raises(SchedulerFault) as err:
        hybrid.train(cfg)
    message = str(err.value)
    assert message.startswith(f"scheduler {faulty}: ") and says in message, message
    assert "\n" not in message
    run_dir = Path(cfg.out)
    checkpoints = list_checkpoints(run_dir)
    assert checkpoints, "the fault came before any checkpoint: move it later"
    assert all(load(path)["format"] == 1 for path in checkpoints)
    assert not list((run_dir / "checkpoints").glob("*.tmp"))
    rows = metric_rows(run_dir)  # every line a whole JSON object
    assert rows and not (run_dir / "summary.json").exists()


def test_a_scheduler_that_raises_in_init_is_a_config_error(faulty, tiny_config):
    cfg = tiny_config(scheduler=faulty, scheduler_args={"fault": "init_raises"})
    with pytest.raises(ConfigError) as err:
        hybrid.train(cfg)
    assert str(err.value) == ("scheduler faulty: Faulty.__init__ raised RuntimeError: cannot start")
    assert not Path(cfg.out).exists()  # a start that failed leaves nothing behind


FAULTY_FILE = """
from dataclasses import dataclass
from hybrid import Scheduler

@dataclass
class Settings:
    broken_init: bool = False

class Rule(Scheduler):
    Settings = Settings

    def __init__(self, workers, settings):
        if settings.broken_init:
            raise ValueError("no workers for me")
        super().__init__(workers)

    def ready(self, idle, version):
        return list(idle)

    def full(self):
        return bool(self.buffer)

    def combine(self):
        step = super().combine()
        if self.model.version >= 4:
            step.direction = step.direction.reshape(1, -1)  # a wrong-shape step
        return step
"""


def test_the_cli_exits_2_for_a_bad_definition_and_1_for_a_run_time_fault(tmp_path):
    rule = tmp_path / "rule.py"
    rule.write_text(FAULTY_FILE)
    command = [
        sys.executable, "-m", "hybrid.cli", "train", "--scheduler", f"{rule}:Rule",
        "--total-env-steps", "400", "--eval-every", "400", "--eval-episodes", "1",
        "--workers", "2", "--checkpoint-every", "2", "--log-every", "20", "--no-progress",
    ]  # fmt: skip
    at_start = subprocess.run(
        [*command, "--scheduler-arg", "broken_init=true", "--out", str(tmp_path / "a")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert at_start.returncode == 2, at_start.stderr
    assert at_start.stderr.count("\n") == 1
    assert "Rule.__init__ raised ValueError: no workers for me" in at_start.stderr
    at_run = subprocess.run(
        [*command, "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=300
    )
    assert at_run.returncode == 1, at_run.stderr
    assert at_run.stderr.count("\n") == 1 and "Traceback" not in at_run.stderr
    assert "combine() returned a Step whose direction has shape (1, " in at_run.stderr
    assert list_checkpoints(tmp_path / "b")  # versions 2 and 4 were written before the fault
    assert metric_rows(tmp_path / "b")


class Scripted(Scheduler):
    """Returns whatever the test puts in ``answers``: the guard's unit under test."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.answers: dict[str, object] = {}

    def ready(self, idle, version):
        return self.answers.get("ready", list(idle))

    def full(self):
        return self.answers.get("full", bool(self.buffer))

    def combine(self):
        return self.answers["combine"] if "combine" in self.answers else super().combine()

    def metrics(self):
        return self.answers.get("metrics", {})

    def state_dict(self):
        return self.answers.get("state_dict", {})


@pytest.fixture
def guarded():
    from hybrid.schedulers.guard import Guarded

    inner = Scripted(3)
    scheduler = Guarded(inner, "scripted.py:Scripted")
    _bound(scheduler, torch.zeros(4))
    return scheduler, inner.answers


@pytest.mark.parametrize(
    ("method", "answer", "says"),
    [
        ("ready", [0, 0], "worker 0 is listed twice"),
        ("ready", [True], "True is no id"),
        ("ready", "0", "expected a list of idle worker ids"),
        ("full", None, "full() returned None; expected True or False"),
        ("full", torch.ones(2), "which is not True or False"),
        ("combine", Step(torch.zeros(4), lr_scale=float("nan")), "lr_scale nan"),
        ("combine", Step(torch.zeros(4), updates=[1]), "updates are [1]"),
        ("combine", Step(torch.zeros(4, dtype=torch.int64)), "expected a float tensor"),
        ("metrics", {1: 2.0}, "expected names (str)"),
        ("metrics", [1.0], "expected a dict of numbers"),
        ("state_dict", {"deep": [{"x": {1, 2}}]}, "state_dict()['deep'][0]['x'] = {1, 2}"),
        ("state_dict", {(1, 2): 3}, "a key (1, 2) in state_dict()"),
    ],
)
def test_the_guard_names_what_a_method_returned(guarded, method, answer, says):
    from hybrid.errors import SchedulerFault

    scheduler, answers = guarded
    answers[method] = answer
    with pytest.raises(SchedulerFault) as err:
        {
            "ready": lambda: scheduler.ready([0, 1, 2], 0),
            "full": scheduler.full,
            "combine": scheduler.combine,
            "metrics": scheduler.metrics,
            "state_dict": scheduler.state_dict,
        }[method]()
    message = str(err.value)
    assert message.startswith(f"scheduler scripted.py:Scripted: {method}() ") and says in message
    assert "\n" not in message


def test_the_guard_passes_good_answers_through_unchanged(guarded):
    import numpy as np

    scheduler, answers = guarded
    assert scheduler.ready([2, 0], 0) == [2, 0]
    answers["ready"] = np.array([2])
    assert scheduler.ready([0, 2], 0) == [2]  # numpy ids become ints
    answers["metrics"] = {"sched/x": np.float32(0.5), "sched/y": torch.tensor(3), "sched/z": None}
    assert scheduler.metrics() == {"sched/x": 0.5, "sched/y": 3, "sched/z": None}
    state = {"counts": np.arange(3), "rng": np.random.default_rng(0), "t": torch.ones(2)}
    answers["state_dict"] = state
    assert scheduler.state_dict() is state
    scheduler.admit(make_update(1, 0, [1.0, 2.0, 3.0, 4.0]), 0)
    assert scheduler.full() and len(scheduler.buffer) == 1
    step = scheduler.combine()
    assert torch.equal(step.direction, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert scheduler.task_kind is Scripted.task_kind and scheduler.answers is answers


class ScriptedMixer(ReplicaScheduler):
    """A decentralized scheduler of one's own whose combine() returns what a test says."""

    Settings = None
    task_kind = ComputeGradient
    staleness_unit = "rounds"
    pair_lock = False

    def __init__(self, workers: int, settings: object = None) -> None:
        super().__init__(workers)
        self.spectral_gap = 0.25
        self.answer: object = None

    def ready(self, idle, version):
        return list(idle)

    def full(self):
        return bool(self.buffer)

    def combine(self):
        return self.answer


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (Step(torch.zeros(4)), "a decentralized scheduler returns a MixingStep or None"),
        (MixingStep(None, mixing=np.eye(2)), "expected None or a finite 3×3 numpy array"),
        (MixingStep(None, mixing=np.full((3, 3), np.nan)), "finite 3×3"),
        (MixingStep(None, mixing=np.eye(3), delay=-1), "delay -1; expected >= 0"),
    ],
)
def test_a_decentralized_scheduler_of_ones_own_is_guarded_as_one(answer, says):
    """The registry guards a user's ReplicaScheduler as a ReplicaScheduler: the loop sees its
    replica settings, and its steps are checked as mixes of the replicas."""
    from hybrid.errors import SchedulerFault
    from hybrid.schedulers.guard import GuardedReplicas, construct

    scheduler = construct("mixer.py:ScriptedMixer", ScriptedMixer, 3, None)
    assert isinstance(scheduler, GuardedReplicas) and isinstance(scheduler, ReplicaScheduler)
    assert scheduler.pair_lock is False and scheduler.push_sum is False  # inner's, not defaults
    assert scheduler.spectral_gap == 0.25 and scheduler.describe().endswith("gap 0.2500")
    scheduler.inner.answer = MixingStep(None, mixing=np.full((3, 3), 1 / 3))
    assert scheduler.combine() is scheduler.inner.answer  # a good mix passes unchanged
    scheduler.inner.answer = answer
    with pytest.raises(SchedulerFault) as err:
        scheduler.combine()
    message = str(err.value)
    assert message.startswith("scheduler mixer.py:ScriptedMixer: combine() ") and says in message
