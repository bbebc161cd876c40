"""The sweep file: ``load_sweep`` reads the YAML (bounded against alias bombs and repeated
keys) and checks every top-level key, ``metric``, ``early_terminate`` and ``command``."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.config import TrainConfig
from hybrid.sweep.params import Param, SweepError, _is_int, _param, _suggest

METHODS = ("grid", "random", "bayes")


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


# What wandb's grid search accepts: it enumerates int_uniform and q_uniform, nothing continuous.
GRID_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "q_uniform")


# Fields the runner sets for every run itself.
RUNNER_FIELDS = ("out",)


# Fields a sweep may not set: each run of a sweep starts fresh (a rerun resumes the sweep).
REFUSED_FIELDS = {
    "resume": "a sweep's runs start fresh; to resume a sweep, rerun the same hybrid sweep "
    "command (finished runs are skipped, unfinished ones rerun)",
}


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
