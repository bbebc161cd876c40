"""Property-based: whatever is typed after `hybrid train`, no traceback escapes.

Every generated command line either parses and validates, or ends in exactly one
line on stderr naming what was wrong, with exit code 2 and nothing on disk. The same
holds for run directories that cannot be written and for resumes of a run whose
config.json was edited or that is given flags: 1,050 examples in all, and
validation only: no example trains (a stub stops each run where its runtime would start).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hybrid.cli import main
from hybrid.config import TrainConfig

FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
CHOICES = {
    "scheduler": ["sync", "async", "bounded", "hybrid", "fedavg", "lockstep", ""],
    "runtime": ["serial", "processes", "ray", "gpu", "SERIAL"],
    "algo": ["a2c", "nstep_q", "mappo", "ippo", "dqn"],
    "env": [
        "CartPole-v1",
        "Pendulum-v1",
        "Acrobot-v1",
        "Nope-v0",
        "mpe2/simple_spread_v3",
        "not_a_package/xyz",
        "CartPole",
    ],
    "head": ["auto", "categorical", "gaussian", "beta"],
    "optimizer": ["adam", "rmsprop", "sgd", "fedadam", "fedyogi", "fedadagrad", "lion"],
    "ppo_advantage_norm": ["auto", "minibatch", "batch", "none", "episode"],
    "codec": ["none", "fp16", "bf16", "int8", "topk", "zip"],
    "cluster": ["homogeneous", "heterogeneous", "stragglers", "cloud"],
}
WEIRD = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e309",
    "abc",
    "",
    "0x10",
    "3.5",
    "True",
    "[]",
    "--",
    "-",
    "1_000",
    "９",
    # numeric extremes: beyond float32, int64, memory, the virtual clock
    "1e39",
    "-1e39",
    "3.4028235e38",
    "1e308",
    "1e-300",
    "5e-324",
    "-0.0",
    "100000000000000000000",
    str(2**62 + 1),
    str(2**63),
    "1e12",
]

values = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.sampled_from([10**k for k in range(3, 22, 3)] + [2**31, 2**62]).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(WEIRD),
    st.text(max_size=8),
)


@st.composite
def command_lines(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        name = draw(st.sampled_from([*FIELDS, "no_such_field", "workers"]))
        if name in ("out", "resume", "progress", "track"):
            continue  # the test owns where runs go, and never tracks
        flag = "--" + name.replace("_", "-")
        if FIELDS.get(name) is not None and FIELDS[name].type in ("bool", bool):
            argv.append(draw(st.sampled_from([flag, "--no-" + flag[2:], f"{flag}=false"])))
            continue
        if name in CHOICES and draw(st.booleans()):
            value = draw(st.sampled_from(CHOICES[name]))
        else:
            value = draw(values)
        argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        argv.append(draw(st.sampled_from(["--bogus", "extra", "-x", "--no-track"])))
    return argv


@pytest.fixture
def validate_only(monkeypatch):
    """Everything `train` checks before it builds a run, and nothing after."""
    calls = []

    def fake_train(cfg, **overrides):  # the CLI passes the flags it was given as keywords
        from hybrid.trainer import check_config

        cfg = cfg.replace(**overrides)
        check_config(cfg)  # validate, env, head, memory: all train checks before writing
        calls.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr("hybrid.trainer.train", fake_train)
    return calls


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines())
def test_no_traceback_escapes_hybrid_train(argv, validate_only, tmp_path, capsys):
    out = tmp_path / "never"
    try:
        code = main(["train", *argv, "--out", str(out), "--progress=False"])
    except SystemExit as exc:  # the stub's way of saying "valid"
        code = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if code == 0:
        return
    assert code == 2, (argv, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, (argv, captured.err)
    assert lines[0].startswith("hybrid train: error: ")
    assert not out.exists()


def test_the_fuzz_reaches_both_outcomes(validate_only, tmp_path, capsys):
    """Guards the generator: valid command lines exist among those it can make."""
    with pytest.raises(SystemExit):
        main(["train", "--workers=3", "--lr", "0.01", "--out", str(tmp_path / "a")])
    assert validate_only and validate_only[0].workers == 3
    assert main(["train", "--workers=0", "--out", str(tmp_path / "b")]) == 2


# --- run directories that cannot be used ----------------------------------------


class _Started(BaseException):
    """Raised where a run would start its runtime: everything before it was checked."""


@pytest.fixture
def stop_at_runtime(monkeypatch):
    def no_runtime(*args, **kwargs):
        raise _Started

    monkeypatch.setattr("hybrid.trainer.make_runtime", no_runtime)


# mostly runs that validate, so that the run directory is what decides
EXTRA_FLAGS = [
    [],
    [],
    [],
    ["--workers", "3"],
    ["--scheduler", "sync"],
    ["--env", "Pendulum-v1"],
    ["--lr", "1e39"],
    ["--hidden", "1000000000"],
]
OUT_KINDS = [
    "fresh",
    "nested",
    "empty",
    "not_empty",
    "a_file",
    "under_a_file",
    "proc",
    "sys",
    "dev_null",
    "long_name",
    "newline",
]


def _make_out(root: Path, kind: str) -> Path:
    (root / "a_file").write_text("x")
    (root / "full").mkdir()
    (root / "full" / "kept").write_text("y")
    (root / "empty").mkdir()
    return {
        "fresh": root / "run",
        "nested": root / "a" / "b" / "c",
        "empty": root / "empty",
        "not_empty": root / "full",
        "a_file": root / "a_file",
        "under_a_file": root / "a_file" / "sub" / "run",
        "proc": Path("/proc/hybrid-fuzz-run"),
        "sys": Path("/sys/hybrid-fuzz-run"),
        "dev_null": Path("/dev/null/run"),
        "long_name": root / ("x" * 300),
        "newline": root / "run\nname",
    }[kind]


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "/"
        for p in sorted(root.rglob("*"))
    }


def _assert_one_line_error(code, err: str, argv) -> None:
    assert "Traceback" not in err
    assert code == 2, (argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("hybrid train: error: ")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(OUT_KINDS),
    argv=st.one_of(st.sampled_from(EXTRA_FLAGS), command_lines()),
)
def test_run_directory_problems_are_one_line_and_leave_nothing(kind, argv, stop_at_runtime, capsys):
    root = Path(tempfile.mkdtemp(prefix="hybrid-fuzz-"))
    try:
        out = _make_out(root, kind)
        before = _tree(root)
        try:
            code = main(["train", *argv, "--out", str(out), "--progress=False"])
        except _Started:
            code = 0
        captured = capsys.readouterr()
        event("started" if code == 0 else captured.err.split(":")[2].strip())
        if code != 0:
            _assert_one_line_error(code, captured.err, argv)
        # refused, or stopped where workers would start: the folder is as it was
        assert _tree(root) == before
        assert not Path("/proc/hybrid-fuzz-run").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- resumes of an edited run directory, with flags ------------------------------


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """One real, small run with checkpoints and no summary.json (trained once)."""
    import hybrid

    out = tmp_path_factory.mktemp("fuzz-resume") / "run"
    hybrid.train(
        TrainConfig(
            workers=2,
            total_env_steps=300,
            eval_every=300,
            eval_episodes=1,
            log_every=100,
            checkpoint_every=10,
            stop_when_solved=False,
            progress=False,
            out=str(out),
        )
    )
    (out / "summary.json").unlink()
    return out


json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e39, 1e308, 5e-324, -1.0, 0, 10**20, 2**62 + 1]),
    st.text(max_size=6),
    st.sampled_from(["", "CartPole-v0", "os:system", "builtins.str; os.system", [], {}]),
)
RESUME_FLAGS = [  # resumable ones (they apply), others (refused unless as stored), extremes
    ["--total-env-steps", "900"],
    ["--total-env-steps", "100000000000000000000"],
    ["--log-every", "50"],
    ["--eval-every", "0"],
    ["--checkpoint-every", "0"],
    ["--keep-checkpoints", "5"],
    ["--track"],
    ["--no-progress"],
    ["--lr", "0.1"],
    ["--lr", "1e39"],
    ["--workers", "2"],
    ["--workers", "3"],
    ["--env", "CartPole-v0"],
    ["--scheduler", "bounded"],
    ["--staleness-bound", "2"],
    ["--out", "/tmp/hybrid-fuzz-elsewhere"],
]


@st.composite
def resume_edits(draw) -> tuple[object, list[str]]:
    kind = draw(st.integers(min_value=0, max_value=9))
    if kind == 0:  # config.json that is not a config
        return draw(st.sampled_from(["{", "", "[]", "null", "7", '{"env": "x"'])), []
    edits = {}
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from([*FIELDS, "no_such_field"]))
        if name in CHOICES and draw(st.booleans()):
            edits[name] = draw(st.sampled_from(CHOICES[name]))
        else:
            edits[name] = draw(json_values)
    flags: list[str] = []
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        flags += draw(st.sampled_from(RESUME_FLAGS))
    return edits, flags


def _files(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=resume_edits())
def test_resume_of_an_edited_run_is_checked_like_the_command_line(
    case, stopped_run, stop_at_runtime, capsys
):
    edits, flags = case
    root = Path(tempfile.mkdtemp(prefix="hybrid-fuzz-"))
    try:
        run_dir = Path(shutil.copytree(stopped_run, root / "run"))
        config = run_dir / "config.json"
        if isinstance(edits, str):
            config.write_text(edits)
        elif edits:
            config.write_text(json.dumps(json.loads(config.read_text()) | edits))
        before = _files(run_dir)
        try:
            code = main(["train", "--resume", str(run_dir), *flags])
        except _Started:
            code = 0
        captured = capsys.readouterr()
        event("resumed" if code == 0 else captured.err.split(":")[2].strip())
        if code != 0:
            _assert_one_line_error(code, captured.err, (edits, flags))
        # refused, or stopped before training: nothing in the run directory is lost
        after = _files(run_dir)
        after.pop("run.lock", None)
        before.pop("run.lock", None)
        assert after == before
    finally:
        shutil.rmtree(root, ignore_errors=True)
