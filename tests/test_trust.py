"""What a resume, a sweep and a scheduler file may be trusted with: hostile checkpoint
contents are refused in one line, scheduler files run only when the user names them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import crash_copy

import hybrid
from hybrid import ConfigError
from hybrid.checkpoint import BIT_GENERATORS, CheckpointError, from_plain, to_plain
from hybrid.schedulers import SCHEDULERS, _user_entry


@pytest.mark.parametrize("name", sorted(BIT_GENERATORS))
def test_numpys_own_bit_generators_round_trip(name):
    generator = np.random.Generator(BIT_GENERATORS[name](7))
    generator.random(3)
    restored = from_plain(to_plain(generator))
    assert restored.random(4).tolist() == generator.random(4).tolist()


@pytest.mark.parametrize(
    "name",
    ["seterr", "get_state", "default_rng", "NoSuchGenerator", 5, None, "BitGenerator"],
)
def test_a_generator_state_naming_anything_else_is_refused_without_calling_it(name, monkeypatch):
    called = []
    monkeypatch.setattr(np.random, "seterr", lambda: called.append(1), raising=False)
    state = to_plain(np.random.default_rng(0))
    state["__generator__"]["bit_generator"] = name
    with pytest.raises(CheckpointError, match="bit generator") as caught:
        from_plain(state)
    assert "\n" not in str(caught.value)
    assert not called


def test_a_malformed_generator_state_is_one_line():
    state = to_plain(np.random.default_rng(0))
    state["__generator__"]["state"] = "garbage"
    with pytest.raises(CheckpointError, match="malformed"):
        from_plain(state)


@pytest.mark.parametrize("dtype", ["no-such-dtype", "|O", 17, "<U3"])
def test_an_array_with_a_bad_dtype_is_one_line(dtype):
    with pytest.raises(CheckpointError, match="dtype"):
        from_plain({"__ndarray__": torch.zeros(3), "dtype": dtype})


# --- scheduler files: loaded by path and content, run only when named ---------------------

RULE = """\
from hybrid import Scheduler

MARKER = {marker!r}
if MARKER:
    open(MARKER, "a").write("ran\\n")


class Rule(Scheduler):
    VERSION = {version}

    def ready(self, idle, version):
        return list(idle)

    def full(self):
        return bool(self.buffer)
"""


def _rule(folder, version: int, marker: str = ""):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rule.py"
    path.write_text(RULE.format(version=version, marker=marker))
    return path


def test_two_scheduler_files_of_one_name_load_their_own_classes(tmp_path):
    from hybrid.schedulers import resolve_scheduler, scheduler_source

    v1, v2 = _rule(tmp_path / "v1", 1), _rule(tmp_path / "v2", 2)
    assert resolve_scheduler(f"{v1}:Rule").cls.VERSION == 1
    assert resolve_scheduler(f"{v2}:Rule").cls.VERSION == 2
    assert resolve_scheduler(f"{v1}:Rule").cls.VERSION == 1
    # an edited file (a notebook's next cell) is read again
    _rule(tmp_path / "v1", 3)
    assert resolve_scheduler(f"{v1}:Rule").cls.VERSION == 3
    source = scheduler_source(f"{v1}:Rule")
    assert source.path == str(v1.resolve())
    assert source.sha256 == hashlib.sha256(v1.read_bytes()).hexdigest()


def test_a_run_records_the_scheduler_file_that_ran_and_a_resume_refuses_an_edited_one(
    tiny_config, tmp_path
):
    rule = _rule(tmp_path / "v1", 1)
    cfg = tiny_config(
        scheduler=f"{rule}:Rule",
        total_env_steps=1_200,
        checkpoint_every=5,
        keep_checkpoints=100,
        stop_when_solved=False,
    )
    full = hybrid.train(cfg)
    recorded = json.loads((full.run_dir / "scheduler_source.json").read_text())
    assert recorded == {
        "path": str(rule.resolve()),
        "sha256": hashlib.sha256(rule.read_bytes()).hexdigest(),
    }
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    _rule(tmp_path / "v1", 2)  # edited between the crash and the resume
    with pytest.raises(ConfigError, match=r"^scheduler: .*rule\.py changed since this run"):
        hybrid.train(resume=str(crashed), scheduler=cfg.scheduler)


def test_a_resume_runs_no_scheduler_file_the_user_did_not_name(tiny_config, tmp_path):
    """A run directory is data: one from elsewhere whose config.json names a file (with
    top-level code) runs nothing on --resume unless the user names that file again."""
    full = hybrid.train(tiny_config(total_env_steps=900, checkpoint_every=5, keep_checkpoints=100))
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    marker = tmp_path / "ran"
    evil = _rule(crashed, 1, marker=str(marker))
    config = json.loads((crashed / "config.json").read_text())
    config["scheduler"] = f"{evil}:Rule"
    (crashed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"^scheduler: this run's config.json names") as caught:
        hybrid.train(resume=str(crashed))
    assert "--scheduler" in str(caught.value) and "\n" not in str(caught.value)
    assert not marker.exists()
    # named again, the resume goes on to its other checks: here the checkpoint, written
    # under async, does not match the edited config.json
    with pytest.raises(ConfigError, match="the checkpoint was written with 'async'"):
        hybrid.train(resume=str(crashed), scheduler=f"{evil}:Rule")


def test_the_cli_resume_does_not_import_a_scheduler_file_from_the_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    marker = tmp_path / "ran"
    evil = _rule(run_dir, 1, marker=str(marker))
    (run_dir / "config.json").write_text(
        json.dumps({"scheduler": f"{evil}:Rule", "out": str(run_dir)})
    )
    done = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--resume", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "names the scheduler" in done.stderr
    assert not marker.exists()


# --- what a scheduler hands the loop -------------------------------------------------------


class _Returns(hybrid.Scheduler):
    """A scheduler whose ready() or admit() returns what the test says."""

    ready_returns: object = None
    admit_returns: object = None

    def ready(self, idle, version):
        out = type(self).ready_returns
        return out(list(idle)) if callable(out) else list(idle)

    def admit(self, update, staleness):
        verdict = super().admit(update, staleness)
        out = type(self).admit_returns
        return verdict if out is None else out

    def full(self):
        return bool(self.buffer)


@pytest.mark.parametrize(
    ("ready", "admit", "match"),
    [
        (lambda idle: [0, 0], None, r"ready\(\) returned \[0, 0\]: it names a worker twice"),
        (lambda idle: [-1], None, r"ready\(\) returned \[-1\]: -1 is not an idle worker"),
        (lambda idle: [*idle, 8], None, r"ready\(\) returned \[0, 1, 8\]: 8 is not an idle"),
        (lambda idle: [0, 1], None, r"ready\(\) returned \[0, 1\]: [01] is not an idle worker"),
        (lambda idle: ["0"], None, r"ready\(\) returned \['0'\]: '0' is not an idle worker"),
        (lambda idle: {0}, None, r"ready\(\) returned \{0\}; it must return a list"),
        (None, "buffer", r"admit\(\) returned 'buffer'; it must return Verdict"),
        (None, 1, r"admit\(\) returned 1; it must return Verdict"),
    ],
    ids=["duplicate", "negative", "unknown", "busy", "text", "set", "verdict-text", "int"],
)
@pytest.mark.parametrize("runtime", ["serial", "processes"])
def test_a_scheduler_returning_what_the_loop_cannot_use_is_one_line(
    tiny_config, monkeypatch, runtime, ready, admit, match, request
):
    if runtime == "processes" and request.node.callspec.id.split("-")[-1] not in ("busy", "int"):
        pytest.skip("the check is the loop's, one for every runtime: two cases show it there")
    monkeypatch.setattr(_Returns, "ready_returns", ready)
    monkeypatch.setattr(_Returns, "admit_returns", admit)
    # unguarded: the loop's own check, which every scheduler passes through (a user's
    # scheduler is also guarded, and the guard says the same earlier: test_user_schedulers)
    monkeypatch.setitem(SCHEDULERS, "returns", _user_entry(_Returns, guarded=False))
    cfg = tiny_config(scheduler="returns", runtime=runtime, workers=2, total_env_steps=300)
    with pytest.raises(ConfigError, match=rf"^scheduler: _Returns\.{match}") as caught:
        hybrid.train(cfg)
    assert "\n" not in str(caught.value)
