"""A checkpoint's optimizer state is checked against the optimizer it is loaded into.

torch's ``Optimizer.load_state_dict`` takes a state with a parameter's entry or one moment
deleted (that moment restarts from zero), a moment of the wrong shape (a traceback at the
next step) or a nan one (θ poisoned), and any ``step``: each would make a resume silently
differ from the uninterrupted run. A resume refuses each in one line, exit code 2, and
leaves the run directory as it was."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import crash_copy

import hybrid
from hybrid import ConfigError
from hybrid.checkpoint import (
    CheckpointError,
    check_optimizer_state,
    from_plain,
    list_checkpoints,
)
from hybrid.config import TrainConfig
from hybrid.core.global_model import make_optimizer
from hybrid.trainer import LOCK_NAME

RUN = dict(
    env="CartPole-v1", workers=2, envs_per_worker=1, rollout_steps=5, total_env_steps=200,
    eval_every=200, eval_episodes=1, log_every=50, checkpoint_every=5, keep_checkpoints=100,
    progress=False, env_defaults=False, stop_when_solved=False,
)  # fmt: skip


def _run(folder: Path, **changes: Any) -> Path:
    return hybrid.train(TrainConfig(**RUN, out=str(folder)).replace(**changes)).run_dir


@pytest.fixture(scope="module")
def adam_run(tmp_path_factory) -> Path:
    """A finished tiny A2C run whose server optimizer is Adam (step, exp_avg, exp_avg_sq)."""
    return _run(tmp_path_factory.mktemp("adam") / "run")


def _crashed_with(run: Path, dest: Path, edit: Callable[[dict], Any]) -> Path:
    """A crash copy of ``run`` whose newest checkpoint ``edit`` changed."""
    crashed = crash_copy(run, dest)
    newest = list_checkpoints(crashed)[-1]
    state = torch.load(newest, weights_only=True)
    edit(state)
    torch.save(state, newest)
    return crashed


def _resume_refusal(run: Path, dest: Path, edit: Callable[[dict], Any]) -> str:
    """The one-line error a resume of ``run``'s crash copy, edited by ``edit``, gives."""
    crashed = _crashed_with(run, dest, edit)
    with pytest.raises(ConfigError) as refused:
        hybrid.train(resume=str(crashed))
    return str(refused.value)


def _files(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def _optimizer(state: dict) -> dict:
    return state["global_model"]["optimizer"]


def _moment(key: str, change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        moments = _optimizer(state)["state"][0]
        moments[key] = change(moments[key])

    return edit


def _with_nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[3] = float("nan")
    return t


CORRUPTIONS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a parameter's entry deleted": (
        lambda state: _optimizer(state)["state"].pop(0),
        r"global_model\.optimizer\.state\[0\]: missing \(the optimizer has taken \d+ steps\)",
    ),
    "a moment deleted": (
        lambda state: _optimizer(state)["state"][0].pop("exp_avg_sq"),
        r"global_model\.optimizer\.state\[0\]\.exp_avg_sq: missing",
    ),
    "a moment of the wrong shape": (
        _moment("exp_avg", lambda t: t[:-1].clone()),
        r"global_model\.optimizer\.state\[0\]\.exp_avg: expected a tensor of shape \(\d+,\), "
        r"found a torch\.float32 tensor of shape \(\d+,\)",
    ),
    "a moment with a nan": (
        _moment("exp_avg_sq", _with_nan),
        r"global_model\.optimizer\.state\[0\]\.exp_avg_sq: not all finite \(nan or ±inf\)",
    ),
    "the step changed": (
        _moment("step", lambda t: t - 1),
        r"global_model\.optimizer\.state\[0\]\.step: \d+, but the optimizer has taken \d+ steps",
    ),
    "a parameter group added": (
        lambda state: _optimizer(state)["param_groups"].append(
            copy.deepcopy(_optimizer(state)["param_groups"][0])
        ),
        r"global_model\.optimizer\.param_groups: 2 groups, but the optimizer has 1",
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_damaged_server_optimizer_state_is_refused_in_one_line_exit_2(
    case: str, adam_run: Path, tmp_path: Path
) -> None:
    edit, message = CORRUPTIONS[case]
    crashed = _crashed_with(adam_run, tmp_path / "crashed", edit)
    before = _files(crashed)
    done = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--resume", str(crashed)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert re.search(rf"resume: the checkpoint's {message}$", lines[0]), lines[0]
    assert _files(crashed) == before  # nothing written, nothing truncated


def _final_hash(run: Path) -> str:
    return json.loads((run / "summary.json").read_text())["final_params_sha256"]


def test_an_untouched_checkpoint_still_resumes_to_the_uninterrupted_runs_params(
    adam_run: Path, tmp_path: Path
) -> None:
    finished = hybrid.train(resume=str(crash_copy(adam_run, tmp_path / "crashed")))
    assert finished.summary["final_params_sha256"] == _final_hash(adam_run)


def test_a_damaged_local_adam_of_a_ppo_worker_is_refused_and_an_untouched_one_resumes(
    tmp_path: Path,
) -> None:
    """PPO's workers keep a local Adam across tasks (runtime.workers[i]); it is built and
    its restored state checked on the resume, not at the worker's next task."""
    run = _run(tmp_path / "ppo", algo="ppo")

    def edit(state: dict) -> None:
        local = state["runtime"]["workers"][1]["algorithm"]["local_update"]["optimizer"]
        del local["state"][0]["exp_avg"]

    assert _resume_refusal(run, tmp_path / "crashed", edit) == (
        "resume: the checkpoint's runtime.workers[1].algorithm.local_update.optimizer"
        ".state[0].exp_avg: missing"
    )
    finished = hybrid.train(resume=str(crash_copy(run, tmp_path / "untouched")))
    assert finished.summary["final_params_sha256"] == _final_hash(run)


def test_a_damaged_replicas_optimizer_state_is_refused(tmp_path: Path) -> None:
    """A decentralized run keeps one optimizer per replica (applier.optimizers[k])."""
    run = _run(tmp_path / "gossip", scheduler="gossip")

    def edit(state: dict) -> None:
        state["applier"]["optimizers"][1]["state"][0]["exp_avg"].fill_(float("inf"))

    assert _resume_refusal(run, tmp_path / "crashed", edit) == (
        "resume: the checkpoint's applier.optimizers[1].state[0].exp_avg: "
        "not all finite (nan or ±inf)"
    )


# --- the check itself, on optimizers of several parameters ----------------------------------


def _stepped(optimizer_type: type, **options: Any) -> torch.optim.Optimizer:
    params = [torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2, 2))]
    optimizer = optimizer_type(params, **options)
    for _ in range(2):
        sum((p**2).sum() for p in params).backward()
        optimizer.step()
    return optimizer


def _refusal(saved: dict, optimizer: torch.optim.Optimizer, steps: int | None = None) -> str:
    with pytest.raises(CheckpointError) as refused:
        check_optimizer_state(saved, optimizer, "opt", steps)
    assert "\n" not in str(refused.value)
    return str(refused.value)


def test_every_parameter_has_state_or_none_does_and_all_at_one_step() -> None:
    optimizer = _stepped(torch.optim.Adam, lr=1e-3)
    saved = copy.deepcopy(optimizer.state_dict())
    check_optimizer_state(saved, optimizer, "opt", steps=2)
    check_optimizer_state(saved | {"state": {}}, optimizer, "opt")  # no step yet
    one_gone = copy.deepcopy(saved)
    del one_gone["state"][1]
    assert _refusal(one_gone, optimizer) == (
        "opt.state[1]: missing (parameter 0 has state: every parameter gets its state on the "
        "same step)"
    )
    assert _refusal(saved | {"state": {}}, optimizer, steps=2) == (
        "opt.state[0]: missing (the optimizer has taken 2 steps)"
    )
    skewed = copy.deepcopy(saved)
    skewed["state"][1]["step"] = torch.tensor(7.0)
    assert _refusal(skewed, optimizer) == (
        "opt.state[1].step: 7, but state[0].step is 2: every parameter steps together"
    )
    fraction = copy.deepcopy(saved)
    fraction["state"][0]["step"] = torch.tensor(1.5)
    assert _refusal(fraction, optimizer).startswith("opt.state[0].step: expected a whole number")


def test_the_entries_expected_come_from_a_step_of_the_optimizer_not_a_list() -> None:
    """An optimizer hybrid does not use (Adagrad keeps ``sum``) is checked all the same."""
    optimizer = _stepped(torch.optim.Adagrad, lr=0.1)
    saved = copy.deepcopy(optimizer.state_dict())
    check_optimizer_state(saved, optimizer, "opt")
    del saved["state"][1]["sum"]
    assert _refusal(saved, optimizer) == "opt.state[1].sum: missing"
    extra = copy.deepcopy(optimizer.state_dict())
    extra["state"][0]["exp_avg"] = torch.zeros(3)
    assert (
        _refusal(extra, optimizer) == "opt.state[0]: holds 'exp_avg', which Adagrad does not keep"
    )


def test_an_optimizer_that_keeps_no_state_refuses_some() -> None:
    param = torch.nn.Parameter(torch.zeros(4), requires_grad=False)
    sgd = make_optimizer("sgd", [param], 0.1, 1e-5, 0.99)
    saved = sgd.state_dict()
    check_optimizer_state(saved, sgd, "opt", steps=5)
    saved["state"][0] = {"momentum_buffer": torch.zeros(4)}
    assert _refusal(saved, sgd).startswith("opt.state: holds state for parameter 0, which SGD")


def test_the_hyperparameters_are_there_and_of_their_kind() -> None:
    optimizer = _stepped(torch.optim.Adam, lr=1e-3)
    cases = {
        "lr": ("x", r"opt\.param_groups\[0\]\.lr: expected a finite number, found 'x'"),
        "betas": ((0.9,), r"opt\.param_groups\[0\]\.betas: expected a list of 2 items"),
        "amsgrad": (1, r"opt\.param_groups\[0\]\.amsgrad: expected true or false, found 1"),
        "eps": (float("nan"), r"opt\.param_groups\[0\]\.eps: expected a finite number"),
        "params": ([0, 5], r"opt\.param_groups\[0\]\.params: expected the optimizer's ids"),
    }
    for key, (value, message) in cases.items():
        saved = copy.deepcopy(optimizer.state_dict())
        saved["param_groups"][0][key] = value
        assert re.match(message, _refusal(saved, optimizer)), key
    saved = copy.deepcopy(optimizer.state_dict())
    del saved["param_groups"][0]["eps"]
    assert _refusal(saved, optimizer) == "opt.param_groups[0].eps: missing"
    # an option a newer torch added is filled in by torch's load_state_dict, as for the
    # live optimizer: a checkpoint of an older torch still loads
    saved = copy.deepcopy(optimizer.state_dict())
    del saved["param_groups"][0]["maximize"]
    check_optimizer_state(saved, optimizer, "opt")


def test_a_float32_step_stops_counting_at_2_to_the_24() -> None:
    """torch keeps Adam's step in a float32 tensor, where step += 1 stops changing it at
    2**24: a longer run's step is 2**24, not its version."""
    param = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
    adam = make_optimizer("adam", [param], 1e-3, 1e-5, 0.99)
    saved = {
        "state": {0: {"step": torch.tensor(2.0**24), "exp_avg": torch.zeros(2),
                      "exp_avg_sq": torch.zeros(2)}},
        "param_groups": adam.state_dict()["param_groups"],
    }  # fmt: skip
    check_optimizer_state(saved, adam, "opt", steps=2**24 + 1000)
    assert "but the optimizer has taken" in _refusal(saved, adam, steps=2**24 - 1)


def test_the_check_changes_nothing_it_reads(adam_run: Path) -> None:
    state = from_plain(torch.load(list_checkpoints(adam_run)[-1], weights_only=True))
    before = copy.deepcopy(_optimizer(state))
    param = torch.nn.Parameter(torch.zeros_like(state["global_model"]["params"]))
    adam = make_optimizer("adam", [param], 1e-3, 1e-5, 0.99)
    check_optimizer_state(_optimizer(state), adam, "opt", state["global_model"]["version"])
    after = _optimizer(state)
    assert after["param_groups"] == before["param_groups"]
    assert all(torch.equal(after["state"][0][k], v) for k, v in before["state"][0].items())
    assert not adam.state  # the live optimizer is not stepped either
