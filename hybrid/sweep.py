"""``hybrid sweep``: run a wandb-format sweep file offline, in parallel, resumably.

    hybrid sweep sweeps/scheduler_ablation.yaml --jobs 2 --out runs/sweep
    hybrid sweep sweeps/lr_bayes.yaml --backend ray --ray-address auto

The YAML is wandb's sweep format, so the same file runs online with ``wandb sweep`` +
``wandb agent``. This runner mirrors wandb's meaning of ``method`` (grid / random /
bayes), ``parameters`` (``value``, ``values``, ``distribution`` with ``min``/``max``/``q``/
``mu``/``sigma``...), ``run_cap``, ``metric`` and ``early_terminate`` (hyperband), and
needs no server: every run is one ``hybrid train`` process with ``WANDB_MODE=offline``
(here, or in a Ray task with ``--backend ray``), written to ``OUT/<name>`` where the name
is built from the parameter values that vary (``scheduler=async,seed=1``). bayes is
Optuna's TPE sampler and hyperband Optuna's HyperbandPruner (``Search``), fed by the runs'
eval rows; a pruned run's directory holds ``pruned.json``.

A run directory holding ``summary.json`` (or ``pruned.json``) is finished and skipped, so
rerunning the same command after a crash or Ctrl-C resumes the sweep; a directory without
one is a run that died half-way and is removed and rerun. Random search draws from a
seeded stream (``--seed``), and bayes is seeded and fed results in a fixed order, so a
rerun draws the same configs and resumes too.

Bad input (an unknown field, an empty grid, an unknown method...) ends in one line on
stderr and exit code 2 before any run starts; every expanded config is checked the way
``hybrid train`` checks it first.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import hashlib
import importlib.util
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from hybrid.config import ConfigError, TrainConfig
from hybrid.errors import TaskLost

if TYPE_CHECKING:
    from hybrid.runtimes.ray_tasks import RayBackend


class SweepError(ValueError):
    """A sweep that cannot start. The message is one line; the CLI exits with code 2."""


# The command each run executes; argv of ``hybrid train`` follows. The current interpreter,
# not ``hybrid`` from PATH, so runs use the same environment as the runner (tests swap it).
TRAIN_COMMAND: list[str] = [sys.executable, "-m", "hybrid.cli", "train"]

METHODS = ("grid", "random", "bayes")
BACKENDS = ("local", "ray")
GOALS = ("minimize", "maximize")
EARLY_TERMINATE_KEYS = ("type", "min_iter", "max_iter", "s", "eta", "strict")
SCHEDULER_ARG = "scheduler_arg."
"""A parameter named ``scheduler_arg.KEY`` sets the user scheduler's setting KEY: each run
gets ``--scheduler_arg.KEY=VALUE`` (what ``wandb agent`` passes too), which ``hybrid train``
reads as ``--scheduler-arg KEY=VALUE``."""

# Top-level keys of wandb's sweep schema (sweeps/config/schema.json). Only method,
# parameters, run_cap, command, metric and early_terminate mean something offline; the rest
# are for the server.
TOP_LEVEL_KEYS = (
    "apiVersion",
    "command",
    "controller",
    "description",
    "early_terminate",
    "entity",
    "image_uri",
    "job",
    "kind",
    "method",
    "metric",
    "metrics",
    "name",
    "parameters",
    "program",
    "project",
    "run_cap",
    "scheduler",
)

# distribution: (required keys, optional keys); "distribution" itself is always allowed.
DISTRIBUTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "constant": (("value",), ()),
    "categorical": (("values",), ()),
    "categorical_w_probabilities": (("values", "probabilities"), ()),
    "int_uniform": (("min", "max"), ()),
    "uniform": (("min", "max"), ()),
    "q_uniform": (("min", "max"), ("q",)),
    "log_uniform": (("min", "max"), ()),
    "log_uniform_values": (("min", "max"), ()),
    "q_log_uniform": (("min", "max"), ("q",)),
    "q_log_uniform_values": (("min", "max"), ("q",)),
    "inv_log_uniform": (("min", "max"), ()),
    "inv_log_uniform_values": (("min", "max"), ()),
    "normal": ((), ("mu", "sigma")),
    "q_normal": ((), ("mu", "sigma", "q")),
    "log_normal": ((), ("mu", "sigma")),
    "q_log_normal": ((), ("mu", "sigma", "q")),
    "beta": ((), ("a", "b")),
    "q_beta": ((), ("a", "b", "q")),
}
# wandb's schema defaults. q defaults to the float 1.0, so an unquantized-looking
# q_uniform yields floats (3.0) exactly as it does online; give q: 1 for integers.
DEFAULTS = {"q": 1.0, "mu": 0.0, "sigma": 1.0, "a": 1.0, "b": 1.0}
# What wandb's grid search accepts: it enumerates int_uniform and q_uniform, nothing continuous.
GRID_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "q_uniform")
# Fields the runner sets for every run itself.
RUNNER_FIELDS = ("out",)
# Fields a sweep may not set: each run of a sweep starts fresh (a rerun resumes the sweep).
REFUSED_FIELDS = {
    "resume": "a sweep's runs start fresh; to resume a sweep, rerun the same hybrid sweep "
    "command (finished runs are skipped, unfinished ones rerun)",
}
MAX_RUNS = 10_000
"""Sweeps planning more runs are refused unless --max-runs asks for that many: a typo in a
range (max: 1e11) must not take the machine's memory or a week of compute."""

MAX_NAME = 120
CONTINUOUS_DIGITS = 4

_ARG_MACROS = (
    "${args_no_hyphens}",
    "${args_no_boolean_flags}",
    "${args_no_equals}",
    "${args_json}",
    "${args_json_file}",
    "${args_append_hydra}",
    "${args_override_hydra}",
)
_ENVVAR = re.compile(r"\$\{envvar:([A-Za-z0-9_]*)\}")


# --- parameters -------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One swept TrainConfig field: its distribution and that distribution's settings."""

    name: str
    distribution: str
    spec: dict[str, Any]

    def grid_values(self) -> Sequence[Any]:
        """The values a grid search enumerates, in order, duplicates dropped (as wandb does).

        A lazy sequence for ranges: ``seed: {min: 0, max: 100000000000}`` has a length
        without holding 10^11 values.
        """
        d, s = self.distribution, self.spec
        if d == "constant":
            return [s["value"]]
        if d == "categorical":
            return _unique(s["values"])
        if d == "int_uniform":
            return range(s["min"], s["max"] + 1)
        if d == "q_uniform":
            # wandb's grid uses np.arange(min, max, q): max itself is excluded.
            return _Arange(s["min"], s["max"], s["q"])
        raise SweepError(
            f"{self.name}: a grid cannot enumerate the {d} distribution; "
            "use values, int_uniform or q_uniform, or method: random"
        )

    def fixed(self) -> bool:
        """True when every draw gives the same value (it is then left out of run names)."""
        d, s = self.distribution, self.spec
        if d == "constant":
            return True
        if d in ("categorical", "categorical_w_probabilities"):
            return len(_unique(s["values"])) == 1
        return False

    def draw(self, u: float) -> Any:
        """The value at quantile ``u`` in [0, 1): inverse-CDF sampling, as wandb's sweeps do.

        Continuous draws are rounded to 4 significant digits, so a run's directory name
        states its exact value (1e-4 vs 1.0000000000000002e-4 never matters to a search).
        """
        d, s = self.distribution, self.spec
        if d == "constant":
            return s["value"]
        if d == "categorical":
            values = s["values"]
            return values[min(int(u * len(values)), len(values) - 1)]
        if d == "categorical_w_probabilities":
            total = float(sum(s["probabilities"]))
            cumulative = itertools.accumulate(p / total for p in s["probabilities"])
            index = next((i for i, c in enumerate(cumulative) if u < c), len(s["values"]) - 1)
            return s["values"][index]
        if d == "int_uniform":
            return min(s["min"] + int(u * (s["max"] - s["min"] + 1)), s["max"])
        if d in ("normal", "q_normal", "log_normal", "q_log_normal"):
            x = _normal_ppf(u, s["mu"], s["sigma"])
            x = math.exp(x) if "log" in d else x
            return _quantize(x, s["q"]) if d.startswith("q_") else _continuous(x)
        if d in ("beta", "q_beta"):
            from scipy.stats import beta

            x = float(beta.ppf(u, s["a"], s["b"]))
            return _quantize(x, s["q"]) if d == "q_beta" else _continuous(x)
        lo, hi = s["min"], s["max"]
        if d in ("uniform", "q_uniform"):
            x = lo + u * (hi - lo)
        elif d in ("log_uniform", "q_log_uniform"):
            x = math.exp(lo + u * (hi - lo))  # min and max are natural-log exponents
        elif d in ("log_uniform_values", "q_log_uniform_values"):
            x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        elif d == "inv_log_uniform":
            x = math.exp(-(lo + (1 - u) * (hi - lo)))  # min and max bound log(1/x)
        else:  # inv_log_uniform_values
            x = math.exp(-(-math.log(hi) + (1 - u) * (math.log(hi) - math.log(lo))))
        return _quantize(x, s["q"]) if d.startswith("q_") else _continuous(x)


class _Arange(Sequence[Any]):
    """``np.arange(start, stop, step).tolist()`` (cleaned of float artefacts), computed per item."""

    def __init__(self, start: int | float, stop: int | float, step: int | float) -> None:
        self.start, self.step = start, step
        self.ints = all(isinstance(v, int) for v in (start, stop, step))
        self.n = max(0, math.ceil((stop - start) / step))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        value = self.start + (i % self.n) * self.step
        return value if self.ints else _clean(float(value))


def _normal_ppf(u: float, mu: float, sigma: float) -> float:
    if sigma == 0:
        return float(mu)
    return NormalDist(mu, sigma).inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


def _continuous(x: float) -> float:
    return float(f"{x:.{CONTINUOUS_DIGITS}g}")


def _quantize(x: float, q: float) -> int | float:
    # wandb: round(x / q) * q, an integer when q is an integer.
    steps = round(x / q)
    return steps * q if isinstance(q, int) else _clean(steps * q)


def _clean(x: float) -> float:
    # 0.30000000000000004 -> 0.3: arange/quantize artefacts would make ugly, unstable names.
    return float(f"{x:.12g}")


def _unique(values: Sequence[Any]) -> list[Any]:
    # By type and repr, not ==: True == 1 and 1 == 1.0, but they are different flags.
    seen: set[tuple[str, str]] = set()
    out = []
    for v in values:
        key = (type(v).__name__, repr(v))
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


# --- the sweep file -----------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """What bayes optimizes and hyperband compares: summary.json's key, else an eval-row column."""

    name: str
    goal: str
    """minimize (wandb's default) or maximize."""

    @property
    def eval_key(self) -> str:
        """The eval-row column a running run reports (final_eval_return is the last of them)."""
        return "eval/return_mean" if self.name == "final_eval_return" else self.name


@dataclass(frozen=True)
class Hyperband:
    """wandb's ``early_terminate: {type: hyperband, ...}``; an iteration is one eval row."""

    min_iter: int
    max_iter: int | None
    eta: int


@dataclass(frozen=True)
class Sweep:
    """A parsed, checked sweep file."""

    path: Path
    method: str
    params: tuple[Param, ...]
    """Sorted by name, as wandb orders them (so grids enumerate in the same order)."""
    run_cap: int | None
    train_args: tuple[str, ...]
    """Literal ``hybrid train`` flags in ``command`` after ``train`` (next to ``${args}``)."""
    notes: tuple[str, ...]
    """Things worth telling the user that do not stop the sweep."""
    metric: Metric | None = None
    early_terminate: Hyperband | None = None

    @property
    def name(self) -> str:
        return self.path.stem


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read and check a sweep YAML; raise SweepError (one line) on anything that cannot run."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SweepError(f"{path}: no such file") from None
    except OSError as exc:
        raise SweepError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # a binary file, or another encoding: YAML is UTF-8 here
        raise SweepError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if len(text) > MAX_YAML_CHARS:
        raise SweepError(
            f"{path}: {len(text):,} characters, more than a sweep file's {MAX_YAML_CHARS:,}"
        )
    try:
        # a SafeLoader that refuses repeated keys and alias bombs
        doc = yaml.load(text, Loader=_unique_key_loader())
        _check_expanded_size(doc)
    except (_DuplicateKey, _TooLarge) as exc:
        raise SweepError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SweepError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(doc, dict) or not doc:
        raise SweepError(f"{path}: expected a mapping with method: and parameters:")

    fields = _train_fields()
    for key in doc:
        if key in TOP_LEVEL_KEYS and not (key == "scheduler" and not isinstance(doc[key], dict)):
            continue
        if key in fields:
            raise SweepError(
                f"{path}: {key!r} is at the top level; TrainConfig fields go under "
                f"parameters: (e.g. parameters: {{{key}: {{value: ...}}}})"
            )
        raise SweepError(f"{path}: unknown top-level key {key!r}{_suggest(key, TOP_LEVEL_KEYS)}")

    method = _method(path, doc.get("method"))
    params = _params(path, doc.get("parameters"), fields)
    run_cap = doc.get("run_cap")
    if run_cap is not None and (not _is_int(run_cap) or run_cap < 1):
        raise SweepError(f"{path}: run_cap must be a positive integer, got {run_cap!r}")
    train_args, notes = _command(path, doc)
    if method == "grid":
        for p in params:
            if p.distribution not in GRID_DISTRIBUTIONS:
                raise SweepError(
                    f"{path}: {p.name}: grid search cannot enumerate the continuous "
                    f"{p.distribution} distribution; give values (or int_uniform / q_uniform), "
                    "or use method: random"
                )
            if not p.grid_values():
                raise SweepError(f"{path}: {p.name}: this grid axis has no values")
    metric = _metric(path, doc.get("metric"), method, "early_terminate" in doc)
    hyperband = _early_terminate(path, doc["early_terminate"]) if "early_terminate" in doc else None
    return Sweep(path, method, params, run_cap, train_args, tuple(notes), metric, hyperband)


def _metric(path: Path, raw: Any, method: str, early_terminate: bool) -> Metric | None:
    needed = "method: bayes" if method == "bayes" else "early_terminate" if early_terminate else ""
    if raw is None:
        if needed:
            raise SweepError(
                f"{path}: {needed} needs metric: {{name: final_eval_return, goal: maximize}} "
                "(what to optimize); it runs offline here or online with `wandb sweep` + "
                "`wandb agent`"
            )
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise SweepError(f"{path}: metric: expected {{name: ..., goal: minimize|maximize}}")
    goal = raw.get("goal", "minimize")  # wandb's default
    if goal not in GOALS:
        raise SweepError(f"{path}: metric: goal must be minimize or maximize, got {goal!r}")
    return Metric(raw["name"], goal)


def _early_terminate(path: Path, raw: Any) -> Hyperband:
    where = f"{path}: early_terminate"
    if not isinstance(raw, dict) or raw.get("type") != "hyperband":
        raise SweepError(f"{where}: only type: hyperband exists (wandb's one early stopping)")
    for key in raw:
        if key not in EARLY_TERMINATE_KEYS:
            raise SweepError(
                f"{where}: unknown key {key!r}; it takes min_iter, max_iter, s, eta, strict"
            )
    for key in ("min_iter", "max_iter", "s", "eta"):
        if key in raw and (not _is_int(raw[key]) or raw[key] < (2 if key == "eta" else 1)):
            low = 2 if key == "eta" else 1
            raise SweepError(f"{where}: {key} must be an integer >= {low}, got {raw[key]!r}")
    eta = raw.get("eta", 3)
    max_iter = raw.get("max_iter")
    if "min_iter" in raw:
        min_iter = raw["min_iter"]
    elif max_iter is not None and "s" in raw:
        min_iter = max(1, _divide_repeatedly(max_iter, eta, raw["s"]))  # wandb: max_iter / eta^s
    else:
        raise SweepError(f"{where}: give min_iter, or max_iter and s (as wandb needs)")
    if max_iter is not None and max_iter < min_iter:
        raise SweepError(f"{where}: max_iter {max_iter} is below min_iter {min_iter}")
    return Hyperband(min_iter, max_iter, eta)


def _divide_repeatedly(value: int, divisor: int, times: int) -> int:
    """``value // divisor ** times`` without computing the power: ``s: 10000000000`` must
    not build a ten-billion-digit integer. With a divisor >= 2 the quotient is 0 after
    ``value.bit_length()`` divisions, so that many suffice."""
    for _ in range(min(times, value.bit_length() + 1)):
        value //= divisor
    return value


class _DuplicateKey(Exception):
    """A mapping that names a key twice: YAML keeps the last silently, hiding the first."""


class _TooLarge(Exception):
    """A YAML document that expands beyond what a sweep file holds (an alias bomb)."""


MAX_YAML_CHARS = 1_000_000
MAX_YAML_ALIASES = 1_000
MAX_YAML_ITEMS = 100_000
"""Bounds on a sweep file: its text, its aliases (``*name``) and the values it expands to.
Nested anchors (a list of nine aliases of a list of nine aliases...) expand exponentially:
the file is refused before anything walks the expansion."""


def _check_expanded_size(doc: Any) -> None:
    """Walk ``doc`` as its readers will (aliases expanded), up to ``MAX_YAML_ITEMS`` values."""
    stack, seen = [doc], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_YAML_ITEMS:
            raise _TooLarge(
                f"it expands to more than {MAX_YAML_ITEMS:,} values (nested aliases?); "
                "a sweep file lists its values"
            )
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _unique_key_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise _TooLarge(
                        f"more than {MAX_YAML_ALIASES:,} aliases (*name); a sweep file "
                        "lists its values"
                    )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges are not repeats
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise _DuplicateKey(
                        f"duplicate key {key!r} (line {line}; first on line {seen[key]}): "
                        "YAML would silently keep only the last one; remove one of them"
                    )
                if isinstance(key, (str, int, float, bool)):
                    seen[key] = line
            return super().construct_mapping(node, deep)

    return Loader


def _yaml_problem(exc: Exception) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def _method(path: Path, method: Any) -> str:
    if method in METHODS:
        return method
    if method == "custom":
        raise SweepError(
            f"{path}: method: custom needs a wandb Launch sweep scheduler; "
            "offline, use grid or random"
        )
    if method is None:
        raise SweepError(f"{path}: missing method:; use grid or random (or bayes)")
    raise SweepError(f"{path}: unknown method {method!r}; use grid or random (or bayes)")


def _params(path: Path, raw: Any, fields: set[str]) -> tuple[Param, ...]:
    if not isinstance(raw, dict) or not raw:
        raise SweepError(f"{path}: parameters: must map TrainConfig fields to value/values/...")
    params = []
    for name in sorted(raw, key=str):
        where = f"{path}: {name}"
        if isinstance(name, str) and name.startswith(SCHEDULER_ARG):
            if not name[len(SCHEDULER_ARG) :].isidentifier():
                raise SweepError(f"{where}: expected scheduler_arg.KEY, KEY a setting's name")
            params.append(_param(where, name, raw[name]))
            continue
        if name not in fields:
            raise SweepError(
                f"{where}: not a TrainConfig field{_suggest(str(name), fields)} "
                "(hybrid train --help lists them)"
            )
        if name in RUNNER_FIELDS:
            raise SweepError(f"{where}: set by hybrid sweep for each run (--out DIR/<run name>)")
        if name in REFUSED_FIELDS:
            raise SweepError(f"{where}: not a sweep parameter: {REFUSED_FIELDS[name]}")
        params.append(_param(where, name, raw[name]))
    return tuple(params)


def _param(where: str, name: str, spec: Any) -> Param:
    if not isinstance(spec, dict):
        raise SweepError(
            f"{where}: expected a mapping such as {{value: {spec!r}}} or {{values: [...]}}"
        )
    if "parameters" in spec:
        raise SweepError(f"{where}: nested parameters do not fit TrainConfig, which is flat")
    distribution = spec.get("distribution") or _infer(where, spec)
    if distribution not in DISTRIBUTIONS:
        raise SweepError(
            f"{where}: unknown distribution {distribution!r}{_suggest(distribution, DISTRIBUTIONS)}"
        )
    required, optional = DISTRIBUTIONS[distribution]
    allowed = {"distribution", *required, *optional}
    for key in spec:
        if key not in allowed:
            raise SweepError(
                f"{where}: {key!r} does not belong to a {distribution} parameter "
                f"(it takes {', '.join(sorted(allowed - {'distribution'}))})"
            )
    for key in required:
        if key not in spec:
            raise SweepError(f"{where}: a {distribution} parameter needs {key}:")
    full = {k: spec.get(k, DEFAULTS.get(k)) for k in (*required, *optional)}
    for key in ("min", "max", "q", "mu", "sigma", "a", "b"):
        if key in full:
            _number(where, key, full[key])
    if "values" in full:
        if not isinstance(full["values"], list):
            raise SweepError(f"{where}: values must be a list, got {full['values']!r}")
        if not full["values"]:
            raise SweepError(f"{where}: values: [] is empty; give at least one value")
    if distribution == "categorical_w_probabilities":
        probs = full["probabilities"]
        if not isinstance(probs, list) or len(probs) != len(full["values"]):
            raise SweepError(f"{where}: give one probability per value")
        for p in probs:
            _number(where, "probabilities", p)
        if any(p < 0 for p in probs) or sum(probs) <= 0:
            raise SweepError(f"{where}: probabilities must be >= 0 and not all 0")
    if distribution == "int_uniform" and not (_is_int(full["min"]) and _is_int(full["max"])):
        raise SweepError(f"{where}: int_uniform needs integer min and max")
    if "min" in full and full["min"] > full["max"]:
        raise SweepError(f"{where}: min {full['min']} is above max {full['max']}")
    if distribution.endswith("_values") and full["min"] <= 0:
        raise SweepError(f"{where}: {distribution} needs min > 0 (it samples log(min)..log(max))")
    if "q" in full and full["q"] <= 0:
        raise SweepError(f"{where}: q must be > 0")
    if "sigma" in full and full["sigma"] < 0:
        raise SweepError(f"{where}: sigma must be >= 0")
    param = Param(name, distribution, full)
    _check_draws(where, param)
    return param


_PROBE_QUANTILES = (0.0, 0.5, 1.0 - 1e-12)
"""Where a distribution is drawn to prove it fits a float: its extremes (as far as a draw
goes) and its middle. exp() and the quantize steps are monotone, so the extremes bound the
rest."""


def _check_draws(where: str, param: Param) -> None:
    """Refuse a distribution whose draws overflow a float (``log_uniform`` max 1000 is
    e^1000; ``log_normal`` mu 1000 likewise) or whose grid or quantization steps cannot be
    counted (``q_uniform`` q 1e-300), instead of failing in the middle of a sweep."""
    d, s = param.distribution, param.spec
    if d in ("constant", "categorical", "categorical_w_probabilities"):
        return
    if d == "q_uniform":  # a grid enumerates its steps
        steps = (float(s["max"]) - float(s["min"])) / float(s["q"])
        if not math.isfinite(steps) or steps > MAX_STEPS:
            raise SweepError(
                f"{where}: q: {s['q']!r} cuts [{s['min']}, {s['max']}] into more than "
                f"{MAX_STEPS:.0e} steps; use a larger q"
            )
    for u in _PROBE_QUANTILES:
        try:
            value = param.draw(u)
        except (OverflowError, ValueError, ZeroDivisionError) as exc:
            raise SweepError(
                f"{where}: the {d} distribution's draws overflow a float ({exc}); "
                f"{_overflow_hint(d)}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise SweepError(f"{where}: the {d} distribution draws {value}; {_overflow_hint(d)}")
        if isinstance(value, int) and abs(value) > 2**62:
            raise SweepError(
                f"{where}: the {d} distribution draws {value:.3e}, beyond what any field takes; "
                f"{_overflow_hint(d)}"
            )


MAX_STEPS = 1e15
"""The most quantization steps a ``q_`` distribution may have between min and max."""


def _overflow_hint(distribution: str) -> str:
    if distribution in ("log_uniform", "q_log_uniform", "inv_log_uniform"):
        return (
            "its min and max are natural-log exponents (max 10 is e^10 = 22026); keep them "
            "within +-700"
        )
    if "log_normal" in distribution:
        return "its mu and sigma are in log space: exp(mu + 7 sigma) must stay below 1e308"
    return "narrow min and max, or use a larger q"


def _infer(where: str, spec: dict[str, Any]) -> str:
    # wandb's rules when distribution: is left out.
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical_w_probabilities" if "probabilities" in spec else "categorical"
    if "min" in spec and "max" in spec:
        both_int = _is_int(spec["min"]) and _is_int(spec["max"])
        return "int_uniform" if both_int else "uniform"
    raise SweepError(f"{where}: give value:, values: [...], or min: and max: (or a distribution:)")


def _number(where: str, key: str, value: Any) -> None:
    if _is_int(value) or (isinstance(value, float) and math.isfinite(value)):
        return
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            raise SweepError(
                f"{where}: {key}: {value!r} is text: YAML reads 1e-4 as a string; "
                "write 1.0e-4 (wandb rejects it too)"
            )
    raise SweepError(f"{where}: {key} must be a finite number, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _command(path: Path, doc: dict[str, Any]) -> tuple[tuple[str, ...], list[str]]:
    """The literal ``hybrid train`` flags in ``command``, and notes about running online.

    Offline every run is ``python -m hybrid.cli train <flags> <parameters>`` with this
    interpreter, whatever precedes ``train`` in ``command`` (``${env} hybrid``,
    ``${interpreter} -m hybrid.cli``...); ``program`` is only read by wandb's default command.
    """
    command = doc.get("command")
    if command is None:
        program = doc.get("program", "<program>")
        note = (
            f"no command: in the file, so `wandb agent` would run `python {program} --name=value "
            '...`; add command: ["${env}", hybrid, train, "${args}"] to run it online unchanged'
        )
        return (), [note]
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise SweepError(f"{path}: command must be a list of strings")
    if "train" not in command:
        raise SweepError(
            f'{path}: command must call hybrid train, e.g. ["${{env}}", hybrid, train, "${{args}}"]'
        )
    rest = command[command.index("train") + 1 :]
    for token in rest:
        if token in _ARG_MACROS:
            raise SweepError(
                f"{path}: command: {token} is not a form hybrid train reads; "
                "use ${args} (--name=value)"
            )
    if rest.count("${args}") != 1:
        raise SweepError(f"{path}: command must pass the parameters once, as ${{args}} after train")
    extra = []
    for token in rest:
        if token == "${args}":
            continue
        if token.startswith("${") and not _ENVVAR.fullmatch(token):
            raise SweepError(f"{path}: command: {token} after train is not a hybrid train flag")
        extra.append(_ENVVAR.sub(lambda m: os.environ.get(m.group(1), m.group(1)), token))
    for token in extra:
        flag = token.split("=", 1)[0].lstrip("-").replace("-", "_")
        if token.startswith("--") and flag in REFUSED_FIELDS:
            raise SweepError(f"{path}: command: {token}: {REFUSED_FIELDS[flag]}")
    return tuple(extra), []


def _train_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(TrainConfig)}


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- expansion and run names --------------------------------------------------------------


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


# --- state on disk ------------------------------------------------------------------------


def is_complete(run_dir: Path) -> bool:
    """A run is complete when its summary.json (written atomically, last) parses."""
    try:
        json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def check_finished(run: PlannedRun, sweep: Sweep) -> None:
    """Refuse to count a finished run that was trained with other values than this sweep's.

    Only the fields the sweep sets are compared, so a changed TrainConfig default does not
    invalidate old runs; an edited YAML constant written into the same --out does.
    """
    try:
        found = json.loads((run.run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return
    expected = run.config.to_dict()
    defaults = TrainConfig().to_dict()
    from hybrid.flags import parse_train_args

    extra = parse_train_args(list(sweep.train_args)).to_dict() if sweep.train_args else {}
    keys = {k for k in run.values if not _is_scheduler_arg(k)}
    keys |= {k for k, v in extra.items() if v != defaults[k] and k != "scheduler_args"}
    for key in sorted(keys - {"out", "progress"}):
        if key in found and found[key] != expected[key]:
            raise SweepError(
                f"{run.run_dir}: finished with {key}={found[key]!r} but this sweep sets "
                f"{key}={expected[key]!r}; use another --out, or delete that run to redo it"
            )
    # Scheduler settings one by one: config.json records them typed, as run.config holds them.
    stored = found.get("scheduler_args")
    stored = stored if isinstance(stored, dict) else {}
    for key, value in expected.get("scheduler_args", {}).items():
        if stored.get(key, _MISSING) != value:
            was = repr(stored[key]) if key in stored else "unset"
            raise SweepError(
                f"{run.run_dir}: finished with {SCHEDULER_ARG}{key}={was} but this sweep sets "
                f"{SCHEDULER_ARG}{key}={value!r}; use another --out, or delete that run to redo it"
            )


_MISSING = object()


@contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One runner per --out: a second one would delete the first's runs as incomplete."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".sweep.lock", "w") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here; run one sweep per --out.
            yield
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SweepError(f"{out}: another hybrid sweep is running into it") from None
        yield


# --- running ------------------------------------------------------------------------------


@dataclass
class Outcome:
    run: PlannedRun
    status: str
    """done, skipped, failed or pruned."""
    seconds: float = 0.0
    message: str = ""


RUN_ENV = {"WANDB_MODE": "offline"}
RUN_ENV_REMOVED = ("WANDB_SWEEP_ID", "WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH")
"""A run started by this runner is never part of an online sweep."""


def _run_env() -> dict[str, str]:
    env = dict(os.environ, **RUN_ENV)
    for key in RUN_ENV_REMOVED:
        env.pop(key, None)
    return env


class LocalBackend:
    """Each run is a ``hybrid train`` process on this machine."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir

    def start(self, run: PlannedRun) -> subprocess.Popen[bytes]:
        if run.run_dir.exists() and not is_finished(run.run_dir):  # died half-way: start afresh
            shutil.rmtree(run.run_dir)
        with (
            open(self.log_dir / f"{run.name}.out", "wb") as out,
            open(self.log_dir / f"{run.name}.err", "wb") as err,
        ):
            return subprocess.Popen(
                run.argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=_run_env(),
                **_die_with_parent(),
            )

    def poll(self, handle: subprocess.Popen[bytes]) -> int | None:
        return handle.poll()

    def stop(self, handles: Sequence[subprocess.Popen[bytes]]) -> None:
        _stop(dict.fromkeys(handles))

    def close(self) -> None:
        pass


def run_on_node(argv: Sequence[str], run_dir: str, out_log: str, err_log: str) -> int:
    """The body of a ray-backend run, on whichever node Ray placed it: one ``hybrid train``.

    A run directory without summary.json is a retry after its node was lost (Ray re-runs the
    task): start afresh. ``ray.cancel`` (pruning, Ctrl-C) raises KeyboardInterrupt here, which
    stops the run's process group as the local backend does.
    """
    path = Path(run_dir)
    if path.exists() and not is_complete(path):
        shutil.rmtree(path)
    with open(out_log, "ab") as out, open(err_log, "ab") as err:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=_run_env(),
            **_die_with_parent(),
        )
    try:
        return proc.wait()
    except BaseException:
        _stop({proc: None})
        raise


def _eval_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The eval rows a run wrote so far (a half-written last line is not one yet)."""
    return _EvalTail(run_dir).read()


class _EvalTail:
    """A running run's eval rows, read on from where the last read stopped (metrics.jsonl
    grows by a train row per log interval; it is not read again from the start each poll)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.offset = 0
        self.rows: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.rows
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a half-written last line waits
        self.offset += len(complete)
        for line in complete.splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict) and row.get("kind") == "eval":
                    self.rows.append(row)
        return self.rows


def is_pruned(run_dir: Path) -> bool:
    """A run that early termination stopped: its pruned.json parses."""
    try:
        json.loads((run_dir / "pruned.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def is_finished(run_dir: Path) -> bool:
    """Complete or pruned: either way the sweep does not run it again."""
    return is_complete(run_dir) or is_pruned(run_dir)


def objective(run_dir: Path, metric: Metric) -> float | None:
    """A finished run's value of the metric: summary.json's, else its last eval row's."""
    try:
        pruned = json.loads((run_dir / "pruned.json").read_text())
        return float(pruned["value"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        return float(summary[metric.name])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    rows = [r for r in _eval_rows(run_dir) if isinstance(r.get(metric.eval_key), (int, float))]
    return float(rows[-1][metric.eval_key]) if rows else None


class Search:
    """Optuna behind ``method: bayes`` (TPE) and ``early_terminate: hyperband`` (Hyperband).

    Optuna's TPE sampler is seeded from ``--seed`` and the study has a fixed name (Hyperband
    assigns brackets from it), so the same file and seed ask the same questions and, fed the
    same results in the same order, propose the same configs and prune the same runs. Each run
    is one trial; its eval rows are the trial's intermediate values (step = how many eval rows,
    wandb's "iteration"), and its metric, when it ends, the trial's value.
    """

    def __init__(self, sweep: Sweep, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        assert sweep.metric is not None
        self.sweep, self.metric = sweep, sweep.metric
        hb = sweep.early_terminate
        pruner: optuna.pruners.BasePruner = (
            optuna.pruners.HyperbandPruner(
                min_resource=hb.min_iter,
                max_resource=hb.max_iter if hb.max_iter is not None else "auto",
                reduction_factor=hb.eta,
            )
            if hb is not None
            else optuna.pruners.NopPruner()
        )
        self.pruning = hb is not None
        self.optuna = optuna
        self.study = optuna.create_study(
            study_name=f"hybrid-sweep/{sweep.name}/{seed}",
            direction=self.metric.goal,
            sampler=optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=self.startup_trials(sweep.run_cap)
            ),
            pruner=pruner,
        )
        self.trials: dict[str, Any] = {}
        self.reported: dict[str, int] = {}
        self.tails: dict[str, _EvalTail] = {}
        self.pruned_at: dict[str, dict[str, Any]] = {}

    @staticmethod
    def startup_trials(run_cap: int | None) -> int:
        """Random draws before TPE models the results: Optuna's 10, fewer for a small run_cap
        (a third of it, at least 2) so that a 10-run search is not all random. From the file
        only: --max-runs changes how many runs, never which."""
        return 10 if run_cap is None else max(2, min(10, run_cap // 3))

    def ask(self) -> Any:
        return self.study.ask()

    def suggest(self, trial: Any) -> dict[str, Any]:
        """A config from the trial: categorical values by index, any other distribution
        through its quantile in [0, 1) (the same inverse-CDF draw as random search)."""
        values = {}
        for p in self.sweep.params:
            if p.fixed():
                values[p.name] = p.draw(0.0)
            elif p.distribution == "categorical":
                choices = _unique(p.spec["values"])
                index = trial.suggest_categorical(p.name, list(range(len(choices))))
                values[p.name] = choices[index]
            else:
                u = trial.suggest_float(p.name, 0.0, 1.0)
                values[p.name] = p.draw(min(u, 1.0 - 1e-12))
        return values

    def bind(self, run: PlannedRun, trial: Any) -> None:
        self.trials[run.name] = trial
        self.reported[run.name] = 0
        self.tails[run.name] = _EvalTail(run.run_dir)

    def watch(self, run: PlannedRun, upto: int | None = None) -> dict[str, Any] | None:
        """Report the run's new eval rows; where Hyperband prunes it, say at which row."""
        trial = self.trials[run.name]
        rows = self.tails[run.name].read()[: upto if upto is not None else None]
        for step in range(self.reported[run.name] + 1, len(rows) + 1):
            value = rows[step - 1].get(self.metric.eval_key)
            self.reported[run.name] = step
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            trial.report(float(value), step)
            if self.pruning and trial.should_prune():
                row = rows[step - 1]
                verdict = {"step": step, "env_steps": row.get("env_steps"), "value": value}
                self.pruned_at[run.name] = verdict
                return verdict
        return None

    def tell(self, run: PlannedRun, status: str) -> None:
        """End the run's trial: its value, pruned, or failed (a failure tells TPE nothing)."""
        trial = self.trials.pop(run.name, None)
        self.tails.pop(run.name, None)
        if trial is None:
            return
        state = self.optuna.trial.TrialState
        if status == "pruned":
            self.study.tell(trial, state=state.PRUNED)
            return
        value = objective(run.run_dir, self.metric) if status in ("done", "skipped") else None
        if value is None or not math.isfinite(value):
            self.study.tell(trial, state=state.FAIL)
        else:
            self.study.tell(trial, value)

    def replay(self, run: PlannedRun, trial: Any) -> str:
        """Feed a finished run (an earlier session's, or a repeated proposal's) to a trial:
        its eval rows up to where it was pruned, then its value (a failed run's: none)."""
        self.bind(run, trial)
        pruned = _read_json(run.run_dir / "pruned.json")
        upto = int(pruned["step"]) if isinstance(pruned, dict) and "step" in pruned else None
        self.watch(run, upto)
        status = "pruned" if upto is not None else "skipped"
        self.tell(run, status)
        return status


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class FixedRuns:
    """The runs of a grid or random search, planned up front, started in order."""

    def __init__(self, runs: Sequence[PlannedRun]) -> None:
        self.pending = list(runs)

    def take(self, free: int, running: int) -> list[PlannedRun]:
        taken, self.pending = self.pending[:free], self.pending[free:]
        return taken

    def finished(self, outcome: Outcome) -> None:
        pass

    @property
    def exhausted(self) -> bool:
        return not self.pending


REPEAT_LIMIT = 200
"""Proposals in a row that meet configs already run, after which a bayes search stops: its
space (a small grid of values, or continuous values rounded to a few digits) is used up."""


def search_space_size(sweep: Sweep) -> int | None:
    """How many distinct configs the parameters can make, when all are discrete (values,
    constants, int_uniform); None when any is continuous."""
    size = 1
    for p in sweep.params:
        d, s = p.distribution, p.spec
        if d == "constant":
            continue
        if d in ("categorical", "categorical_w_probabilities"):
            size *= len(_unique(s["values"]))
        elif d == "int_uniform":
            size *= s["max"] - s["min"] + 1
        else:
            return None
    return size


class BayesRuns:
    """Runs proposed by TPE in batches of ``batch``: every trial of a batch is asked before
    any is told, and told in trial order once the whole batch is over, so the proposals do
    not depend on which run finished first. A proposal already finished on disk (an earlier
    session) or met earlier is told its known result instead of running again.
    """

    def __init__(
        self, search: Search, build: RunBuilder, count: int, batch: int, done: set[str]
    ) -> None:
        self.search, self.build, self.count, self.batch = search, build, count, batch
        self.done_before = done
        self.results: dict[str, str] = {}  # run name -> status, for every distinct config
        self.asks = 0
        self.max_asks = 100 * count + 100  # a small discrete space may hold fewer configs
        self.space = search_space_size(build.sweep)
        self.repeats = 0  # proposals in a row that met a config already known
        self.stopped_because = ""
        self.open: list[tuple[Any, PlannedRun, bool]] = []  # (trial, run, runs this session)
        self.exhausted = False
        self.skipped: list[PlannedRun] = []

    def take(self, free: int, running: int) -> list[PlannedRun]:
        if running or self.open or self.exhausted:
            return []
        while not self.exhausted:
            new = self._next_batch()
            if new:
                return new
        return []

    def _next_batch(self) -> list[PlannedRun]:
        size = min(self.batch, self.count - len(self.results))
        if self.space is not None and len(self.results) >= self.space:
            self.stopped_because = (
                f"the search space holds {self.space} distinct configs and all of them ran"
            )
        elif self.repeats >= REPEAT_LIMIT:
            self.stopped_because = (
                f"Optuna proposed {self.repeats} configs in a row that had already run; "
                "the search space is exhausted"
            )
        if size <= 0 or self.asks >= self.max_asks or self.stopped_because:
            self.exhausted = True
            return []
        batch_names: set[str] = set()
        to_run = []
        for _ in range(size):
            self.asks += 1
            trial = self.search.ask()
            try:
                run = self.build(self.search.suggest(trial))
            except SweepError as exc:  # a proposal that hybrid train would refuse
                self.search.study.tell(trial, state=self.search.optuna.trial.TrialState.FAIL)
                print(f"hybrid sweep: proposal refused: {exc}", file=sys.stderr)
                continue
            fresh = run.name not in self.results and run.name not in batch_names
            self.repeats = 0 if fresh else self.repeats + 1
            runs_now = fresh and run.name not in self.done_before
            if fresh and not runs_now:  # finished in an earlier session: with these values?
                check_finished(run, self.build.sweep)
            self.open.append((trial, run, runs_now))
            if runs_now:
                self.search.bind(run, trial)
                to_run.append(run)
            elif fresh:
                self.skipped.append(run)
            batch_names.add(run.name)
        if not to_run:
            self._close_batch()
        return to_run

    def finished(self, outcome: Outcome) -> None:
        self.results[outcome.run.name] = outcome.status
        if all(name in self.results for name in (r.name for _, r, now in self.open if now)):
            self._close_batch()

    def _close_batch(self) -> None:
        for trial, run, runs_now in self.open:
            if runs_now:  # bound when proposed: its rows were reported while it ran
                status = self.results[run.name]
                if status != "pruned":
                    self.search.watch(run)
                self.search.tell(run, status)
            elif run.name in self.results:  # met before: its result again (runs are seeded)
                self.search.replay(run, trial)
            else:  # finished in an earlier session
                self.results[run.name] = self.search.replay(run, trial)
        self.open = []
        if len(self.results) >= self.count:
            self.exhausted = True


def execute(
    runs: Sequence[PlannedRun] | FixedRuns | BayesRuns,
    jobs: int,
    log_dir: Path,
    on_finish: Callable[[Outcome], None] = lambda outcome: None,
    *,
    backend: LocalBackend | RayBackend | None = None,
    search: Search | None = None,
) -> list[Outcome]:
    """Run each on the backend, ``jobs`` at a time; a failure does not stop the others.

    stdout and stderr of a run go to ``log_dir/<name>.out`` / ``.err`` (its run directory
    must be empty when hybrid train starts). With a ``search``, each running run's new eval
    rows are reported as they appear, and a run that Hyperband prunes is stopped and marked
    (``pruned.json`` in its directory). Ctrl-C or SIGTERM stops the running runs; their
    directories stay incomplete and the next invocation reruns them; a runner that is
    SIGKILLed takes its running children with it (``_die_with_parent``).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    backend = backend or LocalBackend(log_dir)
    source = runs if isinstance(runs, (FixedRuns, BayesRuns)) else FixedRuns(runs)
    running: dict[Any, tuple[PlannedRun, float]] = {}
    outcomes = []

    def finish(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if search is not None and isinstance(source, FixedRuns):
            search.tell(outcome.run, outcome.status)
        source.finished(outcome)
        on_finish(outcome)

    try:
        with _sigterm_raises():
            while not source.exhausted or running:
                for run in source.take(jobs - len(running), len(running)):
                    running[backend.start(run)] = (run, time.monotonic())
                finished = []
                for handle, (run, start) in list(running.items()):
                    try:
                        code = backend.poll(handle)
                    except TaskLost as exc:
                        del running[handle]
                        finish(Outcome(run, "failed", time.monotonic() - start, str(exc)[:300]))
                        continue
                    if code is not None:
                        finished.append((handle, code))
                    elif search is not None and search.pruning:
                        verdict = search.watch(run)
                        if verdict is not None:
                            backend.stop([handle])
                            del running[handle]
                            write_json(run.run_dir / "pruned.json", verdict)
                            seconds = time.monotonic() - start
                            finish(Outcome(run, "pruned", seconds, _pruned_text(verdict)))
                if not finished:
                    time.sleep(0.05)
                for handle, code in finished:
                    run, start = running.pop(handle)
                    if search is not None:
                        search.watch(run)
                    finish(_outcome(run, code, time.monotonic() - start, log_dir))
    finally:
        if running:
            backend.stop(list(running))
    return outcomes


def write_json(path: Path, value: Any) -> None:
    """Atomically: a reader (a resumed sweep) sees all of it or nothing."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)


def _pruned_text(verdict: dict[str, Any]) -> str:
    steps = verdict.get("env_steps")
    at = f" ({int(steps):,} env steps)" if isinstance(steps, int) else ""
    return f"pruned at eval {verdict['step']}{at}, value {float(verdict['value']):.4g}"


def _die_with_parent() -> dict[str, Any]:
    """Popen arguments that tie a run to this runner, so that a SIGKILLed sweep leaves no run.

    Each run leads a process group of its own (its env workers, Ray...), which ``_stop``
    signals whole. On Linux the kernel also sends the run SIGTERM when this runner dies,
    however it dies (PR_SET_PDEATHSIG, set in the child before exec): SIGTERM rather than
    SIGKILL, so the run stops its own workers on the way out.
    """
    if os.name != "posix":
        return {}
    # A session of its own (Python 3.10 has no process_group=): its own group, no terminal.
    if not sys.platform.startswith("linux"):
        return {"start_new_session": True}
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    runner = os.getpid()

    def set_parent_death_signal() -> None:  # runs in the child, between fork and exec
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != runner:  # the runner died before prctl: nobody will signal us
            os._exit(1)

    return {"start_new_session": True, "preexec_fn": set_parent_death_signal}


def _outcome(run: PlannedRun, code: int, seconds: float, log_dir: Path) -> Outcome:
    if code == 0 and is_complete(run.run_dir):
        return Outcome(run, "done", seconds)
    lines = (log_dir / f"{run.name}.err").read_text(errors="replace").splitlines()
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if not last:
        if code < 0:
            last = f"killed by {signal.Signals(-code).name}"
        elif code == 0:
            last = "exited 0 without writing summary.json"
        else:
            last = f"exit code {code}, nothing on stderr"
    return Outcome(run, "failed", seconds, last[:300])


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM (a job scheduler, `kill`) into KeyboardInterrupt so children are stopped."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(running: dict[subprocess.Popen[bytes], Any]) -> None:
    """SIGTERM each run's process group, then SIGKILL what is left of it after 10 s."""
    for proc in running:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)  # the run leads its group (_die_with_parent)
    except (AttributeError, ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)


# --- the command --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from hybrid.flags import OneLineParser

    p = OneLineParser(
        prog="hybrid sweep",
        description="Run a wandb-format sweep file offline: grid, random or bayes search, "
        "hyperband early termination, parallel runs here or on a Ray cluster, resumable "
        "(finished runs are skipped).",
    )
    p.add_argument("sweep", help="sweep YAML in wandb's format (see sweeps/README.md)")
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        help="runs at once (default: 1 locally; with --backend ray, as many as the cluster holds)",
    )
    p.add_argument("--out", help="directory of the run directories (default runs/<yaml name>)")
    p.add_argument(
        "--max-runs", type=int, metavar="K", help="run at most K runs (overrides run_cap)"
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the random and bayes search"
    )
    p.add_argument(
        "--backend",
        default="local",
        help="local: each run a process here; ray: each run a Ray task (default local)",
    )
    p.add_argument(
        "--ray-address",
        default="",
        metavar="ADDR",
        help="with --backend ray: a running cluster (host:port or auto); default a local Ray",
    )
    p.add_argument(
        "--cpus-per-run", type=float, default=1.0, metavar="C", help="Ray resources of a run"
    )
    p.add_argument(
        "--gpus-per-run", type=float, default=0.0, metavar="G", help="Ray resources of a run"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan; run and write nothing")
    return p


def _check_args(args: argparse.Namespace) -> None:
    if args.backend not in BACKENDS:
        raise SweepError(f"--backend must be local or ray, got {args.backend!r}")
    if args.jobs is not None and args.jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {args.jobs}")
    if args.max_runs is not None and args.max_runs < 1:
        raise SweepError(f"--max-runs must be >= 1, got {args.max_runs}")
    if args.seed < 0:
        raise SweepError(f"--seed must be >= 0, got {args.seed}")
    if args.backend != "ray":
        for flag, value, default in (
            ("--ray-address", args.ray_address, ""),
            ("--cpus-per-run", args.cpus_per_run, 1.0),
            ("--gpus-per-run", args.gpus_per_run, 0.0),
        ):
            if value != default:
                raise SweepError(f"{flag} applies with --backend ray only")
    if not (math.isfinite(args.cpus_per_run) and args.cpus_per_run >= 0):
        raise SweepError(f"--cpus-per-run must be >= 0, got {args.cpus_per_run:g}")
    if not (math.isfinite(args.gpus_per_run) and args.gpus_per_run >= 0):
        raise SweepError(f"--gpus-per-run must be >= 0, got {args.gpus_per_run:g}")


def _check_bayes(sweep: Sweep, build: RunBuilder) -> None:
    """Before anything runs, every parameter's extremes (and each categorical value) must make
    a config that hybrid train accepts: the proposals come later, one batch at a time."""
    middle = {p.name: p.draw(0.5) for p in sweep.params}
    for p in sweep.params:
        if p.distribution == "categorical":
            values = _unique(p.spec["values"])
        else:
            values = [p.draw(0.0), p.draw(1.0 - 1e-12)]
        for value in values:
            build({**middle, p.name: value})


def sweep_command(argv: Sequence[str]) -> int:
    """``hybrid sweep SWEEP.yaml [--jobs N] [--out DIR] [--max-runs K] [--seed S]
    [--backend local|ray] [--ray-address ADDR] [--dry-run]``.

    Exit 0 when every run finished (or was pruned), 1 when a run failed, 2 on bad input
    (nothing started), 130 when interrupted.
    """
    from hybrid.flags import fail
    from hybrid.schedulers import defer_user_schedulers

    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # --help, or a bad flag (reported in one line)
        return int(exc.code or 0)
    try:
        _check_args(args)
        # --dry-run promises to run nothing: a scheduler named by a path is not imported
        with defer_user_schedulers() if args.dry_run else contextlib.nullcontext():
            sweep = load_sweep(args.sweep)
            out = Path(args.out) if args.out else Path("runs") / sweep.name
            if out.exists() and not out.is_dir():
                raise SweepError(f"--out {out} is a file")
            searching = sweep.method == "bayes" or sweep.early_terminate is not None
            if searching and importlib.util.find_spec("optuna") is None:
                what = "method: bayes" if sweep.method == "bayes" else "early_terminate"
                raise SweepError(
                    f"{sweep.path}: {what} needs Optuna: pip install 'hybrid-rl[sweeps]'"
                )
            if sweep.method == "bayes":
                runs: list[PlannedRun] = []
                count = planned_runs(sweep, args.max_runs)
                build = RunBuilder(sweep, out)
                _check_bayes(sweep, build)
                done = {d.name for d in out.iterdir() if is_finished(d)} if out.is_dir() else set()
                stale = set()
            else:
                runs = plan(sweep, out, args.max_runs, args.seed)
                count = len(runs)
                done = {r.name for r in runs if is_finished(r.run_dir)}
                stale = {r.name for r in runs if r.name not in done and r.run_dir.exists()}
            for run in runs:
                if run.name in done:
                    check_finished(run, sweep)
                elif run.name in stale and not run.run_dir.is_dir():
                    raise SweepError(f"{run.run_dir} is a file, not a run directory")
    except SweepError as exc:
        return fail("sweep", str(exc))

    for note in sweep.notes:
        print(f"hybrid sweep: note: {note}", file=sys.stderr)
    todo = [r for r in runs if r.name not in done]
    seeded = f", seeded by --seed {args.seed}" if sweep.method in ("random", "bayes") else ""
    where = "here" if args.backend == "local" else "on Ray"
    jobs_text = f"{args.jobs} at a time" if args.jobs else "as many at once as it holds"
    if args.backend == "local":
        jobs_text = f"{args.jobs or 1} at a time"
    if sweep.method == "bayes":
        state = f"{len(done)} finished in {out}, proposed in batches"
    else:
        state = f"{len(done)} complete, {len(todo)} to run"
    print(
        f"hybrid sweep: {sweep.path.name}: {sweep.method}, {count} runs -> {out}{seeded}: "
        f"{state}, {jobs_text} {where}"
    )
    if sweep.early_terminate is not None:
        hb = sweep.early_terminate
        print(
            f"hybrid sweep: early_terminate: Optuna's Hyperband on {sweep.metric.eval_key} "
            f"(min_iter {hb.min_iter}, max_iter {hb.max_iter or 'auto'}, eta {hb.eta})"
        )
    if args.dry_run:
        named = {r.config.scheduler for r in runs}
        for p in sweep.params:  # bayes plans no runs up front
            if p.name == "scheduler":
                named |= {str(v) for v in p.spec.get("values", [p.spec.get("value")])}
        for name in sorted(n for n in named if ":" in n):
            print(
                f"hybrid sweep: note: --dry-run imports no scheduler file: {name} and its "
                "scheduler_arg values are checked when the sweep runs",
                file=sys.stderr,
            )
        for run in runs:
            state = "complete" if run.name in done else "incomplete" if run.name in stale else "new"
            flags = " ".join(run.argv[len(TRAIN_COMMAND) :])
            print(f"  {state:<10} {run.name}: hybrid train {flags}")
        if sweep.method == "bayes":
            print("  (bayes proposes each batch from the results of the runs before it)")
        return 0

    failed: list[Outcome] = []
    outcomes: list[Outcome] = []
    finished = 0
    total = len(todo) if sweep.method != "bayes" else count

    def report(outcome: Outcome) -> None:
        nonlocal finished
        finished += 1
        outcomes.append(outcome)
        head = f"[{finished}/{total}] {outcome.run.name}"
        if outcome.status == "done":
            print(f"{head}: done in {outcome.seconds:.1f} s, {_result(outcome.run.run_dir)}")
        elif outcome.status == "pruned":
            print(f"{head}: {outcome.message} after {outcome.seconds:.1f} s")
        else:
            failed.append(outcome)
            print(f"{head}: FAILED after {outcome.seconds:.1f} s: {outcome.message}")
        sys.stdout.flush()

    backend: LocalBackend | RayBackend | None = None
    try:
        with _locked(out):
            for run in todo:  # hybrid train refuses a non-empty --out
                if run.name in stale and not is_finished(run.run_dir):
                    shutil.rmtree(run.run_dir)
            log_dir = out / ".logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            if args.backend == "ray":
                from hybrid.runtimes.ray_tasks import RayBackend  # Ray only when asked for

                try:
                    backend = RayBackend(
                        log_dir, args.ray_address, args.cpus_per_run, args.gpus_per_run, run_on_node
                    )
                except ConfigError as exc:
                    raise SweepError(str(exc).replace("ray_address", "--ray-address", 1)) from None
                jobs = args.jobs or backend.capacity
            else:
                backend = LocalBackend(log_dir)
                jobs = args.jobs or 1
            search = (
                Search(sweep, args.seed)
                if sweep.method == "bayes" or sweep.early_terminate
                else None
            )
            source: FixedRuns | BayesRuns
            if sweep.method == "bayes":
                assert search is not None
                source = BayesRuns(search, build, count, jobs, done)
            else:
                source = FixedRuns(todo)
                if search is not None:  # one trial per run, numbered in plan order
                    for run in runs:
                        trial = search.ask()
                        if run.name in done:
                            search.replay(run, trial)
                        else:
                            search.bind(run, trial)
            execute(source, jobs, log_dir, report, backend=backend, search=search)
    except SweepError as exc:
        return fail("sweep", str(exc))
    except KeyboardInterrupt:
        print(
            f"hybrid sweep: interrupted after {finished} of {total} runs; "
            "rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        if backend is not None:
            backend.close()

    pruned = sum(o.status == "pruned" for o in outcomes)
    skipped = [*(r for r in runs if r.name in done)]
    if isinstance(source, BayesRuns):
        skipped = source.skipped
        if source.stopped_because:
            print(f"hybrid sweep: bayes stopped early: {source.stopped_because}", file=sys.stderr)
    _write_summary(out, sweep, args.seed, outcomes, skipped)
    print(f"\n{'done':<8} {finished - len(failed) - pruned:>4}")
    if sweep.early_terminate is not None:
        print(f"{'pruned':<8} {pruned:>4}  (early_terminate: hyperband)")
    print(f"{'skipped':<8} {len(skipped):>4}  (already finished)")
    print(f"{'failed':<8} {len(failed):>4}")
    print(f"summary: {out / SUMMARY_FILE}")
    for outcome in failed:
        log = out / ".logs" / f"{outcome.run.name}.err"
        print(f"  {outcome.run.name}: {outcome.message}  (log: {log})", file=sys.stderr)
    return 1 if failed else 0


SUMMARY_FILE = "sweep_summary.json"


def _write_summary(
    out: Path, sweep: Sweep, seed: int, outcomes: Sequence[Outcome], skipped: Sequence[PlannedRun]
) -> None:
    """OUT/sweep_summary.json: every run of this invocation and its status (done, pruned,
    failed, skipped: finished before), its parameter values and, with a metric, its value."""
    rows = [(o.run, o.status, o.message) for o in outcomes]
    rows += [(r, "pruned" if is_pruned(r.run_dir) else "skipped", "") for r in skipped]
    entries = []
    for run, status, message in rows:
        entry: dict[str, Any] = {"name": run.name, "status": status, "values": run.values}
        if sweep.metric is not None and status != "failed":
            entry["value"] = objective(run.run_dir, sweep.metric)
        if status == "pruned":
            entry["pruned"] = _read_json(run.run_dir / "pruned.json")
        if message and status == "failed":
            entry["error"] = message
        entries.append(entry)
    summary: dict[str, Any] = {"sweep": str(sweep.path), "method": sweep.method, "seed": seed}
    if sweep.metric is not None:
        summary["metric"] = {"name": sweep.metric.name, "goal": sweep.metric.goal}
        scored = [e for e in entries if e["status"] != "pruned" and e.get("value") is not None]
        if scored:
            pick = max if sweep.metric.goal == "maximize" else min
            summary["best"] = pick(scored, key=lambda e: e["value"])["name"]
    summary["runs"] = entries
    write_json(out / SUMMARY_FILE, summary)


def _result(run_dir: Path) -> str:
    try:
        s = json.loads((run_dir / "summary.json").read_text())
        text = f"final eval return {float(s['final_eval_return']):.1f}"
        if s.get("solved"):
            text += f", solved at {int(s['env_steps_to_solve']):,} env steps"
        return text
    except (OSError, ValueError, KeyError, TypeError):
        return "summary.json written"


__all__ = [
    "Outcome",
    "Param",
    "PlannedRun",
    "Sweep",
    "SweepError",
    "execute",
    "expand",
    "is_complete",
    "load_sweep",
    "plan",
    "run_name",
    "sweep_command",
]


if __name__ == "__main__":
    sys.exit(sweep_command(sys.argv[1:]))
