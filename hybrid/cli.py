"""``hybrid`` command line: a thin wrapper over ``hybrid.train`` and the analysis tools.

Errors in what the user typed end in one line on stderr and exit code 2,
with nothing written to disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import sys
from collections.abc import Sequence

from hybrid.config import ConfigError, TrainConfig

USAGE = """usage: hybrid COMMAND [flags]

commands:
  train     train one run (hybrid train --help lists every flag)
  compare   aggregate run directories into figures and tables
  demo      a small scheduler comparison on CartPole-v1
"""


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


def parse_train_args(argv: Sequence[str]) -> TrainConfig:
    """Parse flags into a TrainConfig; a parse error becomes a one-line ConfigError."""
    import tyro

    if any(a in ("-h", "--help") for a in argv):
        return tyro.cli(TrainConfig, args=list(argv), prog="hybrid train")
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return tyro.cli(TrainConfig, args=normalize_bool_flags(argv), prog="hybrid train")
    except SystemExit:
        raise ConfigError(_one_line(captured.getvalue())) from None


def _one_line(tyro_message: str) -> str:
    # tyro draws a box: a title, a rule, the message, a rule, help. Keep the message.
    lines = [line.strip() for line in tyro_message.splitlines()]
    rules = [i for i, line in enumerate(lines) if line and set(line) <= set("-─━╭╮╰╯│ ")]
    body = lines[rules[0] + 1 : rules[1]] if len(rules) >= 2 else lines
    text = " ".join(line.strip("│ ") for line in body if line.strip("│ "))
    return (text or "could not parse the arguments") + " (see hybrid train --help)"


def train_command(argv: Sequence[str]) -> int:
    from hybrid.core.loop import train

    try:
        cfg = parse_train_args(argv)
        result = train(cfg)
    except ConfigError as exc:
        return fail("train", str(exc))
    except KeyboardInterrupt:
        print("hybrid train: interrupted", file=sys.stderr)
        return 130
    s = result.summary
    solved = f"solved at {s['env_steps_to_solve']:,} env steps" if s["solved"] else "not solved"
    print(
        f"{result.run_dir}: {solved}; final eval return {s['final_eval_return']:.1f}; "
        f"{s['env_steps']:,} env steps in {s['train_wall_s']:.1f} s "
        f"({s['env_steps_per_s']:,.0f}/s); staleness mean {s['staleness_mean']:.2f}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "train":
        return train_command(rest)
    if command == "compare":
        from hybrid.reports import compare_command

        return compare_command(rest)
    if command == "demo":
        from hybrid.reports import demo_command

        return demo_command(rest)
    return fail(command, f"unknown command {command!r}; choose one of train, compare, demo")


if __name__ == "__main__":
    sys.exit(main())
