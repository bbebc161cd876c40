"""From a checked sweep to its runs: grid and random expansion, run names, and
``RunBuilder``, which turns parameter values into a ``PlannedRun`` checked the way
``hybrid train`` checks its flags."""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.config import ConfigError, TrainConfig
from hybrid.sweep.params import SweepError
from hybrid.sweep.spec import SCHEDULER_ARG, Sweep

# The command each run executes; argv of ``hybrid train`` follows. The current interpreter,
# not ``hybrid`` from PATH, so runs use the same environment as the runner (tests swap it).
TRAIN_COMMAND: list[str] = [sys.executable, "-m", "hybrid.cli", "train"]


MAX_RUNS = 10_000
"""Sweeps planning more runs are refused unless --max-runs asks for that many: a typo in a
range (max: 1e11) must not take the machine's memory or a week of compute."""


MAX_NAME = 120


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its parameter values, directory and command line."""

    name: str
    values: dict[str, Any]
    run_dir: Path
    argv: tuple[str, ...]
    config: TrainConfig


def grid_size(sweep: Sweep) -> int:
    """How many runs the full grid holds, computed from the axes' lengths (nothing expanded)."""
    return math.prod(len(p.grid_values()) for p in sweep.params)


def planned_runs(sweep: Sweep, max_runs: int | None = None) -> int:
    """How many runs :func:`expand` will give (random search: at most this many)."""
    limit = max_runs if max_runs is not None else sweep.run_cap
    if sweep.method == "grid":
        size = grid_size(sweep)
        return size if limit is None else min(size, limit)
    if limit is None:
        raise SweepError(
            f"{sweep.path}: {sweep.method} search needs a number of runs: --max-runs K or "
            "run_cap: K"
        )
    return limit


def iter_configs(sweep: Sweep, max_runs: int | None = None, seed: int = 0) -> Iterator[dict]:
    """The parameter values of each run, in the order they run, one at a time.

    grid: every combination, the last parameter (by name) varying fastest, as wandb's grid;
    the i-th combination is computed from i (mixed radix), so a huge grid costs nothing
    until its runs are taken. random: ``max_runs`` (else ``run_cap``) distinct draws; draw
    i of parameter p comes from its own stream seeded by (seed, i, p), so adding a
    parameter or raising max_runs keeps the earlier draws and a rerun finds its runs.
    """
    count = planned_runs(sweep, max_runs)
    names = [p.name for p in sweep.params]
    if sweep.method == "grid":
        axes = [p.grid_values() for p in sweep.params]
        for index in range(count):
            values = []
            for axis in reversed(axes):
                index, digit = divmod(index, len(axis))
                values.append(axis[digit])
            yield dict(zip(names, reversed(values), strict=True))
        return
    keys = _varying(sweep)
    seen: set[str] = set()
    found = 0
    # A finite space (all categorical) may hold fewer than `count` configs: stop looking.
    for index in range(100 * count + 100):
        values = {p.name: p.draw(_quantile(seed, index, p.name)) for p in sweep.params}
        key = run_name(values, keys)
        if key not in seen:
            seen.add(key)
            yield values
            found += 1
            if found == count:
                return


def expand(sweep: Sweep, max_runs: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Every run's parameter values, as a list (see :func:`iter_configs`)."""
    return list(iter_configs(sweep, max_runs, seed))


def _quantile(seed: int, index: int, name: str) -> float:
    # random.Random's string seeding and random() are stable across Python versions.
    return random.Random(f"hybrid-sweep/{seed}/{index}/{name}").random()


def _varying(sweep: Sweep) -> list[str]:
    if sweep.method == "grid":
        return [p.name for p in sweep.params if len(p.grid_values()) > 1]
    return [p.name for p in sweep.params if not p.fixed()]


def run_name(values: dict[str, Any], keys: Sequence[str]) -> str:
    """``scheduler=async,seed=1``: the varying values, sanitized; a hash keeps it unique.

    Characters outside [A-Za-z0-9._=,+-] become _, and a name that had such characters
    or runs past 120 characters gets an 8-hex-digit hash of the exact values, so two
    configs never share a directory.
    """
    raw = ",".join(f"{k}={_text(values[k])}" for k in sorted(keys)) or "run"
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", raw)
    if safe == raw and len(safe) <= MAX_NAME:
        return safe
    digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
    return f"{safe[: MAX_NAME - 9]}-{digest}"


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def plan(
    sweep: Sweep, out: str | os.PathLike[str], max_runs: int | None = None, seed: int = 0
) -> list[PlannedRun]:
    """Expand the sweep and check every run the way ``hybrid train`` checks it before it writes.

    Refused when it would plan more than ``MAX_RUNS`` runs and ``max_runs`` does not ask for
    them (the count comes from the axes' lengths: nothing is expanded to refuse). Each
    distinct value of a parameter goes once through the parser the child uses (so a value
    is read the same way); each run's config is then the sweep's base config with its typed
    values, checked by TrainConfig.validate() and the env and head checks. Parsing every run
    would cost ~40 ms each: 7 minutes for a 10,000-run grid.
    """
    count = planned_runs(sweep, max_runs)
    if count > MAX_RUNS and max_runs is None:
        what = "run_cap" if sweep.run_cap is not None and sweep.method == "random" else "grid"
        if what == "grid":
            sizes = " x ".join(f"{p.name}: {len(p.grid_values()):,}" for p in sweep.params)
            what = f"the grid has {count:,} runs ({sizes})"
        else:
            what = f"run_cap asks for {count:,} runs"
        raise SweepError(
            f"{sweep.path}: {what}, above the {MAX_RUNS:,} a sweep plans by default; "
            "narrow it, or pass --max-runs K to plan the first K runs (K may exceed "
            f"{MAX_RUNS:,})"
        )
    build = RunBuilder(sweep, out)
    runs, names = [], set()
    for values in iter_configs(sweep, max_runs, seed):
        run = build(values)
        if run.name in names:
            raise SweepError(f"{sweep.path}: two runs would share the directory {run.name}")
        names.add(run.name)
        runs.append(run)
    return runs


class RunBuilder:
    """Parameter values -> a checked PlannedRun: its name, directory, argv and config."""

    def __init__(self, sweep: Sweep, out: str | os.PathLike[str]) -> None:
        self.sweep, self.out = sweep, Path(out)
        self.keys = _varying(sweep)
        self.typed = _TypedValues(sweep.train_args)
        self.envs: dict[str, Any] = {}

    def __call__(self, values: dict[str, Any]) -> PlannedRun:
        from hybrid.envs import describe
        from hybrid.schedulers import typed_scheduler_args
        from hybrid.trainer import check_head

        name = run_name(values, self.keys)
        run_dir = self.out / name
        # wandb's ${args} is --name=str(value): the same strings online and offline.
        flags = [f"--{k}={_text(v)}" for k, v in values.items()]
        train_argv = [*self.sweep.train_args, *flags, f"--out={run_dir}", "--progress=False"]
        base = self.typed.base
        try:
            changes = {
                k: self.typed.value(k, v) for k, v in values.items() if not _is_scheduler_arg(k)
            }
            settings = {
                k[len(SCHEDULER_ARG) :]: _text(v) for k, v in values.items() if _is_scheduler_arg(k)
            }
            if settings:  # as strings, as the command line hands them over
                changes["scheduler_args"] = {**base.scheduler_args, **settings}
            cfg = base.replace(**changes, out=str(run_dir))
            cfg.validate()
            if cfg.scheduler_args:  # as config.json records them: typed ("4" and 4 alike)
                typed = typed_scheduler_args(cfg.scheduler, cfg.scheduler_args)
                cfg = cfg.replace(scheduler_args=typed)
            if cfg.env not in self.envs:
                self.envs[cfg.env] = describe(cfg.env)
            check_head(cfg, self.envs[cfg.env])
            _check_flags_take_effect(cfg)
        except ConfigError as exc:
            where = f"run {name}: " if self.keys else ""
            raise SweepError(f"{self.sweep.path}: {where}{exc}") from None
        return PlannedRun(name, values, run_dir, (*TRAIN_COMMAND, *train_argv), cfg)


def _check_flags_take_effect(cfg: TrainConfig) -> None:
    """A run whose flags include one that does nothing there is refused when planned, as
    ``hybrid train`` would refuse it. The env's defaults (hybrid/defaults.py: an algo, an
    optimizer) may make a flag take effect: they are looked up only for a config the plain
    check refuses, so that a large plan probes no env."""
    from hybrid.config import check_flags_take_effect, given_fields
    from hybrid.defaults import apply_env_defaults

    given = given_fields(cfg)
    try:
        check_flags_take_effect(cfg, given)
    except ConfigError:
        check_flags_take_effect(apply_env_defaults(cfg, keep=given), given)


def _is_scheduler_arg(name: str) -> bool:
    return name.startswith(SCHEDULER_ARG)


class _TypedValues:
    """Sweep values as the ``hybrid train`` parser types them, parsed once per distinct value.

    A number whose first value of its Python type round-trips through the parser (``seed``
    5 -> 5, ``lr`` 1 -> 1.0) converts the rest of that type the same way without parsing:
    a 10^4-value seed range is one parse. Ranges and bounds are TrainConfig.validate()'s
    job, which every run still gets.
    """

    def __init__(self, train_args: Sequence[str]) -> None:
        from hybrid.flags import parse_train_args

        self._parse = parse_train_args
        self._args = list(train_args)
        self.base = parse_train_args([*self._args, "--progress=False"])
        self._parsed: dict[tuple[str, str, str], Any] = {}
        self._numeric: dict[tuple[str, type], type] = {}

    def value(self, name: str, value: Any) -> Any:
        kind = type(value)
        convert = self._numeric.get((name, kind))
        if convert is not None:
            return convert(value)
        key = (name, kind.__name__, repr(value))
        if key not in self._parsed:
            cfg = self._parse([*self._args, f"--{name}={_text(value)}", "--progress=False"])
            parsed = getattr(cfg, name)
            self._parsed[key] = parsed
            numeric = kind in (int, float) and type(parsed) in (int, float)
            if numeric and parsed == value:
                self._numeric[(name, kind)] = type(parsed)
        return self._parsed[key]
