"""Command-line pieces the subcommands share: TrainConfig flags and one-line errors.

``hybrid train``, ``hybrid sweep`` and ``hybrid calibrate`` parse the same TrainConfig
flags here; every error the user typed ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from hybrid.config import ConfigError, TrainConfig


def fail(command: str, message: str) -> int:
    print(f"hybrid {command}: error: {message}", file=sys.stderr)
    return 2


def _bool_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(TrainConfig) if f.type in ("bool", bool)}


def normalize_bool_flags(argv: Sequence[str]) -> list[str]:
    """Accept ``--track=True`` / ``--track=false`` (what ``wandb agent`` passes) as tyro flags."""
    bools = _bool_fields()
    out = []
    for arg in argv:
        match = re.fullmatch(r"--([\w-]+)=(true|false|True|False|1|0)", arg)
        name = match.group(1).replace("-", "_") if match else ""
        if match and name in bools:
            flag = name.replace("_", "-")
            out.append(f"--{flag}" if match.group(2) in ("true", "True", "1") else f"--no-{flag}")
        else:
            out.append(arg)
    return out


SCHEDULER_ARG_PREFIX = "scheduler_arg."
"""Sweep YAML names a scheduler setting ``scheduler_arg.KEY``; ``wandb agent`` then passes
``--scheduler_arg.KEY=VALUE``, which ``hybrid train`` reads as ``--scheduler-arg KEY=VALUE``."""


def gather_scheduler_args(argv: Sequence[str]) -> list[str]:
    """Turn every ``--scheduler-arg key=value`` (repeatable) and every sweep-style
    ``--scheduler_arg.key=value`` into one ``--scheduler-args key value ...``, the form tyro
    parses into ``TrainConfig.scheduler_args``."""
    pairs: list[str] = []
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        dotted = re.match(r"--scheduler[-_]arg\.", arg)
        if dotted:
            pair = arg[dotted.end() :]
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ConfigError(f"scheduler_arg: expected --scheduler_arg.KEY=VALUE, got {arg!r}")
            pairs += [key, value]
        elif arg == "--scheduler-arg" or arg.startswith("--scheduler-arg="):
            pair = arg.partition("=")[2] if "=" in arg else next(args, "")
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ConfigError(f"scheduler_arg: expected key=value, got {pair!r}")
            pairs += [key, value]
        else:
            rest.append(arg)
    return [*rest, "--scheduler-args", *pairs] if pairs else rest


def parse_train_args(argv: Sequence[str]) -> TrainConfig:
    """Parse flags into a TrainConfig; a parse error becomes a one-line ConfigError."""
    import tyro

    argv = gather_scheduler_args(normalize_bool_flags(argv))
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return tyro.cli(TrainConfig, args=argv, prog="hybrid train")
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise ConfigError(_one_line(captured.getvalue())) from None
    # -h / --help (as a flag, not as a flag's value, which is an error above): print the
    # help again, uncaptured, at the terminal's width.
    return tyro.cli(TrainConfig, args=argv, prog="hybrid train")


def given_fields(argv: Sequence[str]) -> set[str]:
    """The TrainConfig fields whose flags ``argv`` gives (``--workers 8``, ``--workers=8``,
    ``--no-track``, ``--scheduler-arg k=v``): a flag given stays the user's even when its
    value is the global default, which hybrid/defaults.py would otherwise replace."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    given: set[str] = set()
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name = re.split(r"[=.]", arg[2:], maxsplit=1)[0].replace("-", "_")
        if name in ("scheduler_arg", "scheduler_args"):
            name = "scheduler_args"
        elif name not in fields and name.startswith("no_"):
            name = name[3:]
        if name in fields:
            given.add(name)
    return given


def _one_line(tyro_message: str) -> str:
    # tyro draws a box: a title, a rule, the message, a rule, help. Keep the message.
    lines = [line.strip() for line in tyro_message.splitlines()]
    rules = [i for i, line in enumerate(lines) if line and set(line) <= set("-─━╭╮╰╯│ ")]
    body = lines[rules[0] + 1 : rules[1]] if len(rules) >= 2 else lines
    text = " ".join(line.strip("│ ") for line in body if line.strip("│ "))
    return (text or "could not parse the arguments") + " (see hybrid train --help)"


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input in one line (exit 2) instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
