"""Property-based: whatever is typed after `hybrid train`, no traceback escapes.

Every generated command line either parses and validates, or ends in exactly one
line on stderr naming what was wrong, with exit code 2 and nothing on disk.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
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
]

values = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
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

    def fake_train(cfg):
        from hybrid.core.loop import check_head
        from hybrid.envs import describe

        cfg.validate()
        check_head(cfg, describe(cfg.env))
        calls.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr("hybrid.core.loop.train", fake_train)
    return calls


@settings(
    max_examples=500,
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
