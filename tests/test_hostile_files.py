"""Hostile files: what hybrid reads from disk, generated to break it (hypothesis).

Four kinds of file come from users, colleagues or downloads: run directories
(``config.json``, ``summary.json``, ``metrics.jsonl``: read by ``hybrid compare`` and
``hybrid train --resume``), sweep YAML (``hybrid sweep``), cluster profiles (``--cluster
PROFILE.json``) and checkpoints (``--resume``). Each is generated from a valid one with
hostile values put in (nan, ±inf, 1.7e308, 400-digit integers, wrong types, deep nesting),
or damaged as bytes (truncated, bytes inserted, not UTF-8, random). The property for every
file: reading it either works or ends in the project's one-line error for that reader,
within seconds. Never another exception, a traceback or a hang.

``make test`` runs a few examples of each (``HYBRID_HOSTILE_EXAMPLES``, 12 by default);
``benchmarks/hostile_files.py`` runs them at full size and counts the outcomes. The draws
are derandomized, so a run is repeatable and a failure reproduces.

Text generated here never holds ':' : a ``module:name`` env or scheduler would import a
module by name, which is a user's own decision, not a hostile file's.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import shutil
import signal
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybrid
from hybrid.analysis import AnalysisWarning, CompareError, compare, load_runs
from hybrid.checkpoint import CheckpointError, list_checkpoints
from hybrid.cluster_profile import ClusterProfile
from hybrid.config import ConfigError, TrainConfig
from hybrid.sweep import SweepError, load_sweep, plan
from hybrid.trainer import LOCK_NAME

EXAMPLES = int(os.environ.get("HYBRID_HOSTILE_EXAMPLES", "12"))
"""Files generated per test; the benchmark raises it."""
OUTCOME_LOG = os.environ.get("HYBRID_HOSTILE_LOG")
"""A JSONL file the benchmark reads: one line per generated file and its outcome."""
HANG_S = 60
"""A reader that takes longer than this on one small file is hung."""

HOSTILE_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the budget is HANG_S per file, not hypothesis's 200 ms
    derandomize=True,  # the same files on every run: a failure reproduces
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- hostile values and damage ----------------------------------------------------------------

SAFE_TEXT = st.text(
    st.characters(blacklist_characters=":", blacklist_categories=["Cs"]), max_size=12
)

NASTY = [
    float("nan"),
    float("inf"),
    -float("inf"),
    1.7e308,
    -1e308,
    5e-324,
    0,
    -1,
    10**400,
    -(10**400),
    2**63,
    2**64 + 1,
    "",
    "nan",
    "1e-4",
    "x" * 300,
    None,
    True,
    False,
    [],
    {},
    [1, [2, [3, [4]]]],
    {"a": {"b": {"c": None}}},
]

HOSTILE_VALUE = st.one_of(
    st.sampled_from(NASTY),
    st.integers(),
    st.floats(),
    SAFE_TEXT,
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
)


def mutated(base: dict[str, Any], extra_keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with some keys deleted, some values (also nested ones) made hostile and
    perhaps keys added, from ``extra_keys`` or made up."""
    keys = sorted(base)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        doc = copy.deepcopy(base)
        for key in draw(st.lists(st.sampled_from(keys), max_size=3, unique=True)):
            del doc[key]
        for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4, unique=True)):
            inner = doc.get(key)
            if isinstance(inner, dict) and inner and draw(st.booleans()):
                inner[draw(st.sampled_from(sorted(inner)))] = draw(HOSTILE_VALUE)
            else:
                doc[key] = draw(HOSTILE_VALUE)
        for key in draw(st.lists(st.sampled_from([*extra_keys, "zz_unknown"]), max_size=2)):
            doc[key] = draw(HOSTILE_VALUE)
        return doc

    return build()


def as_json(doc: Any) -> str:
    # Python's json writes NaN, Infinity and integers of any length: as a hostile file would.
    return json.dumps(doc, indent=1)


def damaged(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` whole, truncated, with bytes inserted (perhaps not UTF-8), or random bytes."""
    cut = st.integers(0, max(0, len(data) - 1))
    return st.one_of(
        st.just(data),
        cut.map(lambda i: data[:i]),
        st.tuples(cut, st.binary(min_size=1, max_size=8)).map(
            lambda ib: data[: ib[0]] + ib[1] + data[ib[0] :]
        ),
        st.binary(max_size=64),
    )


def file_bytes(docs: st.SearchStrategy[Any], dump: Callable[[Any], str]) -> st.SearchStrategy:
    """Mostly whole documents with hostile values; a third damaged as bytes."""
    whole = docs.map(lambda doc: dump(doc).encode())
    return st.one_of(whole, whole, docs.flatmap(lambda doc: damaged(dump(doc).encode())))


# --- the property -----------------------------------------------------------------------------


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail a reader that hangs (a pathological file must not pin a core)."""

    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Unusable(Exception):
    """A reader accepted a file whose values a run cannot use."""


PENDING: dict[str, tuple[tuple[type[BaseException], str, str], ...]] = {}
"""Defects found in a reader and not fixed yet: (exception, the module that raised it,
what), by kind of file. Counted as "pending", not failed; empty while every reader this
suite tries refuses bad files in one line."""
SURVEY = os.environ.get("HYBRID_HOSTILE_SURVEY") == "1"
"""The benchmark's mode: an unexpected exception is counted (by type and where it was
raised), not raised, so that one run reports every kind of defect."""


def _where(exc: BaseException) -> str:
    import traceback

    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "/hybrid/" in f.filename or f.filename.endswith("test_hostile_files.py")
    ]
    frame = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno}"


def check_outcome(kind: str, read: Callable[[], Any], allowed: tuple[type[Exception], ...]) -> str:
    """Run ``read``: it returns, or raises one of ``allowed`` with a one-line message. Any
    other exception (or a hang) fails the test. Returns the outcome, also logged for the
    benchmark."""
    try:
        with within(HANG_S), warnings.catch_warnings():
            warnings.simplefilter("ignore", AnalysisWarning)  # a warning is a fine answer
            read()
        outcome = "read"
    except allowed as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 2_000, repr(message)
        outcome = f"refused ({type(exc).__name__})"
    except Exception as exc:
        where = _where(exc)
        known = [
            why
            for cls, module, why in PENDING.get(kind.split(" ")[0], ())
            if isinstance(exc, cls) and where.startswith(f"{module}:")
        ]
        if known:
            outcome = f"pending: {known[0]}"
        elif SURVEY:
            outcome = f"DEFECT: {type(exc).__name__} at {where}: {str(exc)[:80]}"
        else:
            raise
    if OUTCOME_LOG:
        with open(OUTCOME_LOG, "a") as log:
            log.write(json.dumps({"kind": kind, "outcome": outcome}) + "\n")
    return outcome


def scratch() -> Path:
    """A fresh folder per example (hypothesis reruns a test body; tmp_path is per test)."""
    return Path(tempfile.mkdtemp(prefix="hybrid-hostile-"))


# --- cluster profiles -------------------------------------------------------------------------

PROFILE = {
    "format": 1,
    "runtime": "processes",
    "cores": 4,
    "step_cost_s": 2e-4,
    "task_overhead_s": 1e-3,
    "jitter_sigma": 0.1,
    "receive_s": 1e-4,
    "apply_s": 1e-4,
    "snapshot_s": 1e-5,
    "dispatch_s": 1e-5,
    "main_preempts": True,
    "measured_on": {"env": "CartPole-v1"},
}
PROFILE_BOUND_S = 3_600.0
"""A profile's costs are bounded like the matching flags (step_cost_s's cap, an hour)."""


def usable_profile(profile: ClusterProfile) -> None:
    """What a profile accepts, a run can use: costs within the flags' bounds."""
    costs = [profile.step_cost_s, profile.task_overhead_s, profile.receive_s, profile.apply_s]
    costs += [profile.snapshot_s, profile.dispatch_s]
    if not all(math.isfinite(c) and 0 <= c <= PROFILE_BOUND_S * 24 for c in costs):
        raise Unusable(f"accepted costs {costs}")
    if not 1 <= profile.cores <= 2**31:
        raise Unusable(f"accepted {profile.cores} cores")


@HOSTILE_SETTINGS
@given(file_bytes(mutated(PROFILE, []), as_json))
def test_a_hostile_cluster_profile_is_read_or_refused_in_one_line(data: bytes) -> None:
    folder = scratch()
    try:
        path = folder / "profile.json"
        path.write_bytes(data)
        check_outcome("profile", lambda: usable_profile(ClusterProfile.load(path)), (ConfigError,))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- sweep YAML --------------------------------------------------------------------------

SWEEP = {
    "method": "random",
    "run_cap": 3,
    "metric": {"name": "final_eval_return", "goal": "maximize"},
    "parameters": {
        "scheduler": {"values": ["sync", "async"]},
        "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
        "workers": {"min": 1, "max": 4},
        "total_env_steps": {"value": 1000},
        "seed": {"values": [0, 1]},
    },
}
SWEEP_EXTRA = ["early_terminate", "command", "program", "name", "description"]
DISTRIBUTION_SPECS = st.fixed_dictionaries(
    {
        "distribution": st.sampled_from(
            [
                "uniform",
                "log_uniform",
                "log_uniform_values",
                "q_uniform",
                "normal",
                "log_normal",
                "q_log_uniform",
                "inv_log_uniform",
                "beta",
                "int_uniform",
                "categorical",
            ]
        ),
    },
    optional={
        "min": HOSTILE_VALUE,
        "max": HOSTILE_VALUE,
        "q": HOSTILE_VALUE,
        "mu": HOSTILE_VALUE,
        "sigma": HOSTILE_VALUE,
        "a": HOSTILE_VALUE,
        "b": HOSTILE_VALUE,
        "values": st.lists(HOSTILE_VALUE, max_size=3),
    },
)
HYPERBAND = st.fixed_dictionaries(
    {"type": st.sampled_from(["hyperband", "other"])},
    optional={"min_iter": HOSTILE_VALUE, "max_iter": HOSTILE_VALUE, "eta": HOSTILE_VALUE},
)


@st.composite
def sweep_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(mutated(SWEEP, SWEEP_EXTRA))
    parameters = doc.get("parameters")
    if isinstance(parameters, dict) and draw(st.booleans()):
        field = draw(st.sampled_from(["lr", "gamma", "workers", "seed", "ent_coef"]))
        parameters[field] = draw(DISTRIBUTION_SPECS)
    if draw(st.booleans()):
        doc["early_terminate"] = draw(HYPERBAND)
    return doc


def as_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@HOSTILE_SETTINGS
@given(file_bytes(sweep_docs(), as_yaml))
def test_a_hostile_sweep_file_is_planned_or_refused_in_one_line(data: bytes) -> None:
    folder = scratch()
    try:
        path = folder / "sweep.yaml"
        path.write_bytes(data)

        def read() -> None:
            sweep = load_sweep(path)
            if sweep.method != "bayes":  # bayes proposals need results: nothing to plan
                plan(sweep, folder / "out", max_runs=3)

        check_outcome("sweep", read, (SweepError, ConfigError))
        assert not (folder / "out").exists()  # planning writes nothing
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- run directories --------------------------------------------------------------------------

CONFIG = TrainConfig(total_env_steps=600, seed=1).to_dict()
SUMMARY = {
    "solved": False,
    "env_steps_to_solve": None,
    "env_steps": 600,
    "updates": 60,
    "final_eval_return": 21.5,
    "train_wall_s": 1.2,
    "staleness_mean": 0.5,
    "virtual_time_s": 3.0,
}
ROW = {"kind": "eval", "env_steps": 300, "updates": 30, "wall_s": 0.5, "virtual_s": 1.0,
       "eval/return_mean": 20.0}  # fmt: skip


@st.composite
def run_dirs(draw: st.DrawFn) -> dict[str, bytes | None]:
    """config.json, summary.json and metrics.jsonl, each hostile, damaged or absent."""
    rows = draw(st.lists(mutated(ROW, ["kind", "losses/policy"]), max_size=3))
    metrics = "".join(json.dumps(row) + "\n" for row in [ROW, *rows])
    return {
        "config.json": draw(st.none() | file_bytes(mutated(CONFIG, ["resume"]), as_json)),
        "summary.json": draw(st.none() | file_bytes(mutated(SUMMARY, []), as_json)),
        "metrics.jsonl": draw(st.none() | damaged(metrics.encode())),
    }


@HOSTILE_SETTINGS
@given(run_dirs())
def test_a_hostile_run_directory_is_compared_resumed_or_refused_in_one_line(files) -> None:
    folder = scratch()
    try:
        run = folder / "run"
        run.mkdir()
        for name, data in files.items():
            if data is not None:
                (run / name).write_bytes(data)
        check_outcome("run dir (compare)", lambda: compare([run], reps=50), (CompareError,))
        check_outcome("run dir (load_runs)", lambda: load_runs([run], "eval"), (CompareError,))
        # it holds no checkpoint: a resume can only be refused, and must touch nothing
        before = sorted(p.name for p in run.iterdir() if p.name != LOCK_NAME)
        outcome = check_outcome(
            "run dir (resume)", lambda: hybrid.train(resume=str(run)), (ConfigError,)
        )
        assert outcome in ("refused (ConfigError)",) or outcome.startswith(("pending", "DEFECT"))
        assert sorted(p.name for p in run.iterdir() if p.name != LOCK_NAME) == before
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- checkpoints ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory) -> Path:
    """A finished tiny run with checkpoints, the base every hostile checkpoint replaces."""
    out = tmp_path_factory.mktemp("hostile") / "base"
    cfg = TrainConfig(
        env="CartPole-v1", workers=2, envs_per_worker=1, rollout_steps=5, total_env_steps=200,
        eval_every=200, eval_episodes=1, log_every=50, checkpoint_every=5, progress=False,
        out=str(out), env_defaults=False, stop_when_solved=False,
    )  # fmt: skip
    hybrid.train(cfg)
    return out


def _state_mutations(state: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A checkpoint's state with hostile values at some of its (nested) keys."""
    paths: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append((*path, key))
                if len(path) < 3:
                    walk(value, (*path, key))

    walk(state, ())
    hostile_tensor = st.sampled_from(
        [torch.tensor([float("nan")]), torch.zeros(0), torch.zeros(3, 3), torch.tensor(1.0)]
    )

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        doc = copy.deepcopy(state)
        for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)):
            node = doc
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and path[-1] in node:
                if draw(st.integers(0, 4)) == 0:
                    del node[path[-1]]
                else:
                    node[path[-1]] = draw(HOSTILE_VALUE | hostile_tensor)
        return doc

    return build()


OPTIMIZER_DAMAGE = ("entry deleted", "moment deleted", "shape", "nan", "step", "extra group")
"""What torch's load_state_dict takes from an optimizer state and resumes from silently."""


@st.composite
def _optimizer_damage(draw: st.DrawFn, state: dict[str, Any]) -> dict[str, Any]:
    """The global model's optimizer state with one of OPTIMIZER_DAMAGE done to it."""
    doc = copy.deepcopy(state)
    optimizer = doc["global_model"]["optimizer"]
    entries = optimizer["state"]
    damage = draw(st.sampled_from(OPTIMIZER_DAMAGE))
    pid = draw(st.sampled_from(sorted(entries))) if entries else None
    moments = sorted(k for k in entries.get(pid, {}) if k != "step")
    key = draw(st.sampled_from(moments)) if moments else None
    if damage == "extra group" or pid is None:
        optimizer["param_groups"].append(copy.deepcopy(optimizer["param_groups"][0]))
    elif damage == "entry deleted":
        del entries[pid]
    elif damage == "moment deleted" and key is not None:
        del entries[pid][key]
    elif damage == "shape" and key is not None:
        entries[pid][key] = draw(
            st.sampled_from([torch.zeros(3), torch.zeros(0), torch.tensor(1.0)])
        )
    elif damage == "nan" and key is not None:
        entries[pid][key] = entries[pid][key].clone()
        entries[pid][key][draw(st.integers(0, entries[pid][key].numel() - 1))] = draw(
            st.sampled_from([float("nan"), float("inf"), -float("inf")])
        )
    elif "step" in entries[pid]:
        entries[pid]["step"] = entries[pid]["step"] + draw(st.sampled_from([-1, 1, 0.5, -1e9]))
    else:
        del entries[pid]
    return doc


@st.composite
def checkpoint_files(draw: st.DrawFn, base: Path) -> tuple[str, bytes]:
    """A checkpoint damaged as bytes, with hostile values, or with its optimizer's state
    damaged (which must be refused), and which of the three."""
    newest = list_checkpoints(base)[-1]
    data = newest.read_bytes()
    how = draw(st.sampled_from(["bytes", "values", "optimizer"]))
    if how == "bytes":  # the file damaged as bytes
        return how, draw(damaged(data))
    state = torch.load(newest, weights_only=True)
    hostile = draw(_state_mutations(state) if how == "values" else _optimizer_damage(state))
    buffer = io.BytesIO()
    torch.save(hostile, buffer)
    return how, buffer.getvalue()


def test_a_hostile_checkpoint_resumes_or_is_refused_in_one_line(checkpointed_run) -> None:
    @HOSTILE_SETTINGS
    @given(checkpoint_files(checkpointed_run))
    def resume_from(file: tuple[str, bytes]) -> None:
        how, data = file
        folder = scratch()
        try:
            run = folder / "run"
            shutil.copytree(checkpointed_run, run)
            (run / "summary.json").unlink()
            for path in list_checkpoints(run)[:-1]:
                path.unlink()
            list_checkpoints(run)[-1].write_bytes(data)
            outcome = check_outcome(
                "checkpoint", lambda: hybrid.train(resume=str(run)), (ConfigError, CheckpointError)
            )
            if how == "optimizer":  # torch's load_state_dict would take it: we must not
                assert outcome == "refused (ConfigError)" or outcome.startswith("DEFECT")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    resume_from()


# --- what the suite found, pinned one by one ------------------------------------------------------


@pytest.mark.parametrize(
    "pickle",
    [
        pytest.param(b"t.", id="pops from an empty stack (IndexError inside torch.load)"),
        pytest.param(b"\x80\x02G\x00", id="a float cut short (struct.error inside torch.load)"),
    ],
)
def test_a_checkpoint_whose_pickle_is_damaged_is_corrupt_not_a_traceback(
    pickle: bytes, tmp_path
) -> None:
    import zipfile

    from hybrid.checkpoint import load

    valid = io.BytesIO()
    torch.save({"format": 1}, valid)
    source = zipfile.ZipFile(io.BytesIO(valid.getvalue()))
    path = tmp_path / "ckpt-000000001.pt"
    with zipfile.ZipFile(path, "w") as damaged_zip:
        for info in source.infolist():
            data = source.read(info.filename)
            damaged_zip.writestr(info, pickle if info.filename.endswith("data.pkl") else data)
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load(path)


def _resume_with(checkpointed_run: Path, tmp_path: Path, edit: Callable[[dict], Any]) -> None:
    """Resume a copy of ``checkpointed_run`` whose newest checkpoint ``edit`` changed."""
    run = tmp_path / "run"
    shutil.copytree(checkpointed_run, run)
    (run / "summary.json").unlink()
    newest = list_checkpoints(run)[-1]
    state = torch.load(newest, weights_only=True)
    edit(state)
    torch.save(state, newest)
    hybrid.train(resume=str(run))


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """An edit that puts ``value`` at ``path`` (keys joined by "/") of a checkpoint's state."""
    *parents, last = path.split("/")

    def edit(state: dict) -> None:
        node = state
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def _delete(path: str) -> Callable[[dict], None]:
    *parents, last = path.split("/")

    def edit(state: dict) -> None:
        node = state
        for key in parents:
            node = node[key]
        del node[last]

    return edit


HOSTILE_CHECKPOINTS = {
    # each was a traceback (or a multi-line message) once; the comment says where
    "the staleness histogram a number (AttributeError in the loop's restore)": (
        _set("loop/stats/staleness", 0.5),
        r"loop\.stats\.staleness: expected a table, found 0\.5$",
    ),
    "a staleness count None (TypeError in the summary, after the run)": (
        _set("loop/stats/staleness", {0: 4, 1: None}),
        r"loop\.stats\.staleness\.1: expected a whole number from 0 to 2\*\*62, found None$",
    ),
    "the last evaluation an empty pair (IndexError at the run's end)": (
        _set("loop/last_eval", {"__tuple__": []}),
        r"loop\.last_eval: expected a list of 2 items, found \(\)$",
    ),
    "the runtime's busy flags missing (KeyError in the serial runtime)": (
        _delete("runtime/busy"),
        r"runtime\.busy: missing$",
    ),
    "the runtime's clock not a number (a silently wrong clock)": (
        _set("runtime/clock", float("nan")),
        r"runtime\.clock: expected a finite number ≥ 0, found nan$",
    ),
    "a 400-digit random state (OverflowError setting the scheduler's generator)": (
        _set("scheduler_rng/state/state", 10**400),
        r"scheduler_rng: malformed PCG64 state \(",
    ),
    "a tensor where config.json has text (RuntimeError, or a message of many lines)": (
        _set("config/env", torch.zeros(3, 3)),
        r"config\.env: expected a setting .*, found a torch\.float32 tensor of shape \(3, 3\)",
    ),
    "a log offset missing (KeyError in the tracker's truncate)": (
        _delete("logs/metrics.jsonl"),
        r"logs\.metrics\.jsonl: missing",
    ),
    "a log offset of 400 digits (OverflowError truncating the log)": (
        _set("logs/spans.jsonl", 10**400),
        r"logs\.spans\.jsonl: expected a whole number from 0 to 2\*\*62, found an integer "
        r"of 401 digits",
    ),
    "the model's version text (a resume whose version is silently wrong or a TypeError)": (
        _set("global_model/version", "40"),
        r"global_model\.version: expected a whole number from 0 to 2\*\*62, found '40'",
    ),
    "θ of the right size but nan (a resume that diverges at once, not a refusal)": (
        lambda state: state["global_model"]["params"].fill_(float("nan")),
        r"global_model\.params: not all finite \(nan or ±inf\); the previous good",
    ),
    "a tuple marker that holds no list (TypeError in from_plain)": (
        _set("loop/last_eval", {"__tuple__": 5}),
        r"a tuple: expected a list, found 5",
    ),
    "the training seconds infinite (a silently wrong summary)": (
        _set("loop/train_s_before", float("inf")),
        r"loop\.train_s_before: expected a finite number ≥ 0, found inf$",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CHECKPOINTS))
def test_a_hostile_checkpoint_found_by_the_suite_is_a_one_line_refusal(
    case: str, checkpointed_run: Path, tmp_path: Path
) -> None:
    """The checkpoints the full-size suite ended in tracebacks on, each written out: refused
    before the run starts, in one line that names the damaged field."""
    edit, message = HOSTILE_CHECKPOINTS[case]
    with pytest.raises(ConfigError, match=r"^resume: ") as refused:
        _resume_with(checkpointed_run, tmp_path, edit)
    assert "\n" not in str(refused.value)
    assert re.search(message, str(refused.value)), str(refused.value)
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_run_whose_config_has_a_400_digit_number_is_refused_on_resume(tmp_path) -> None:
    """float() of the integer overflowed (OverflowError, found at 1,000 run directories)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(as_json(CONFIG | {"lr": 10**400}))
    with pytest.raises(ConfigError, match=r"^lr: expected a number, got 1000"):
        hybrid.train(resume=str(run))


def test_a_sweep_file_that_is_not_utf8_is_a_sweep_error(tmp_path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_bytes(b"\xffmethod: grid\n")
    with pytest.raises(SweepError, match="not UTF-8 text"):
        load_sweep(path)
