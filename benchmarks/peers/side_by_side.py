"""hybrid's figures next to its peers', for benchmarks/cartpole.py and perf_compare.py.

The performance targets were stated as absolute figures measured the day they were set;
the machine's speed changes from day to day, so each target is kept here as a ratio to the
peer's figure (the target over the peer's figure that day), and the peer is measured again in the
same run as hybrid, its runs interleaved with hybrid's. The peers run in their own venv
(``make peers``) through benchmarks/peers/measure.py; nothing here imports them.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEASURE = Path(__file__).resolve().with_name("measure.py")
DEFAULT_PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"


@dataclass(frozen=True)
class PeerFigure:
    """A peer's figure that one of hybrid's figures is compared with."""

    peer: str
    name: str
    """measure.py's figure name."""
    quoted: float
    """The peer's figure when the targets were set (measured that day)."""
    unit: str
    target_ratio: float | None
    """The bound on hybrid / peer that the target amounts to; None: no ratio target."""
    higher_is_better: bool


SB3_RATE = 16_300.0
SB3_STEPS = 12_480.0
SB3_WALL_S = 0.81
TORCHRL_FPS = 5_500.0
FLOWER_ROUND_MS = 103.0


def sb3_rate(target_rate: float) -> PeerFigure:
    return PeerFigure(
        "SB3 A2C", "sb3_a2c_env_steps_per_s", SB3_RATE, "env steps/s", target_rate / SB3_RATE, True
    )


# hybrid's figure (as the benchmark scripts name it) -> the peer's figure it is compared with
SYNC_RATE = sb3_rate(30_000)
ASYNC_RATE = sb3_rate(20_000)
STEPS_TO_SOLVE = {
    "sync": PeerFigure("SB3 A2C", "sb3_a2c_env_steps_to_solve", SB3_STEPS, "env steps", 1.0, False),
    "async": PeerFigure(
        "SB3 A2C", "sb3_a2c_env_steps_to_solve", SB3_STEPS, "env steps", 1.5, False
    ),
}
STEPS_TO_SOLVE_NO_TARGET = PeerFigure(
    "SB3 A2C", "sb3_a2c_env_steps_to_solve", SB3_STEPS, "env steps", None, False
)
WALL_TO_SOLVE = {
    "sync": PeerFigure("SB3 A2C", "sb3_a2c_train_wall_s_to_solve", SB3_WALL_S, "s", 0.5, False),
}
WALL_TO_SOLVE_NO_TARGET = PeerFigure(
    "SB3 A2C", "sb3_a2c_train_wall_s_to_solve", SB3_WALL_S, "s", None, False
)
RATE = {"sync": SYNC_RATE, "async": ASYNC_RATE}
PERF_CELLS = {
    "sync env steps/s": SYNC_RATE,
    "async env steps/s": ASYNC_RATE,
    "processes async 2x8 env steps/s": PeerFigure(
        "TorchRL collector", "torchrl_collector_frames_per_s", TORCHRL_FPS, "frames/s", 8.0, True
    ),
    "fedavg ms per round": PeerFigure(
        "Flower", "flower_ms_per_round", FLOWER_ROUND_MS, "ms", 0.1, False
    ),
    # start-up's target is absolute (< 1 s); the ratio to Flower's is shown beside it
    "fedavg s from start to first round's end": PeerFigure(
        "Flower", "flower_startup_s", 13.0, "s", None, False
    ),
    "fedavg peak RSS MB": PeerFigure("Flower", "flower_rss_mb", 1_730.0, "MB", None, False),
}
PEER_ONLY = [PeerFigure("TorchRL collector", "torchrl_collector_startup_s", 4.4, "s", None, False)]
"""Peer figures without a hybrid counterpart in the tables: printed below them."""
PERF_PEER_RUN = {
    "sync": "sb3-rate",
    "async": "sb3-rate",
    "processes": "torchrl",
    "fedavg": "flower",
}
"""perf_compare's runs -> the measure.py run (``--only``) whose figures they are compared with."""


def peers_python(given: str | None, disabled: bool) -> Path | None:
    """The peers' interpreter: ``--peers`` if given, else .venv-peers' when it exists."""
    if disabled:
        return None
    if given is not None:
        path = Path(given)
        if not path.exists():
            raise SystemExit(f"--peers {given}: no such interpreter (make peers builds one)")
        return path
    return DEFAULT_PEERS_PYTHON if DEFAULT_PEERS_PYTHON.exists() else None


def measure(python: Path, only: str, *args: str) -> dict[str, list[float]]:
    """One measure.py run in the peers' venv: each figure's runs (inf where unsolved)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
    }
    done = subprocess.run(
        [str(python), str(MEASURE), "--only", only, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"peer measurement {only} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, list[float]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            figures[record["name"]] = [math.inf if r is None else r for r in record["runs"]]
    return figures


def merge(into: dict[str, list[float]], measured: dict[str, list[float]]) -> None:
    for name, runs in measured.items():
        into.setdefault(name, []).extend(runs)


def ratio(hybrid: list[float], peer: list[float], paired: bool) -> float | None:
    """hybrid / peer: the median of per-repeat ratios when the runs alternated pairwise
    (load skews each pair alike), else the ratio of the medians (seeds: no pairing)."""
    if not hybrid or not peer:
        return None
    if paired and len(hybrid) == len(peer):
        ratios = [h / p for h, p in zip(hybrid, peer, strict=True) if 0 < p < math.inf]
        return statistics.median(ratios) if ratios and all(map(math.isfinite, ratios)) else None
    h, p = statistics.median(hybrid), statistics.median(peer)
    return h / p if 0 < p < math.inf and math.isfinite(h) else None


def target_text(figure: PeerFigure) -> str:
    """The target as a bound on hybrid / peer, e.g. ``>= 1.84x SB3 A2C``."""
    if figure.target_ratio is None:
        return "-"
    sign = ">=" if figure.higher_is_better else "<="
    return f"{sign} {figure.target_ratio:.2f}x {figure.peer}"


def verdict(figure: PeerFigure, measured: float | None) -> str:
    if figure.target_ratio is None or measured is None:
        return "-"
    met = (
        measured >= figure.target_ratio
        if figure.higher_is_better
        else measured <= figure.target_ratio
    )
    return "met" if met else "missed"


def number(value: float) -> str:
    if not math.isfinite(value):
        return "not solved"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def quoted_cell(figure: PeerFigure) -> str:
    return f"{figure.peer} {number(figure.quoted)}"


QUOTED_COLUMNS = ["peer when targets set"]
"""The column added without peers: the peer's figure as quoted with the targets."""
PEER_COLUMNS = ["peer when targets set", "peer today", "hybrid / peer", "target", "met"]


def peer_columns(side_by_side: bool, label: str = "") -> list[str]:
    columns = PEER_COLUMNS if side_by_side else QUOTED_COLUMNS
    return [f"{label}{columns[0]}", *columns[1:]]


def peer_cells(
    figure: PeerFigure | None, hybrid: list[float], peer: list[float] | None, paired: bool
) -> list[str]:
    """A row's peer cells (``peer_columns``): the quoted figure; with the peer measured
    (``peer`` not None): its median today, hybrid / peer, the target as a ratio, met or not."""
    if figure is None:
        return [""] * (len(QUOTED_COLUMNS) if peer is None else len(PEER_COLUMNS))
    if peer is None:
        return [quoted_cell(figure)]
    measured = ratio(hybrid, peer, paired)
    return [
        number(figure.quoted),
        number(statistics.median(peer)) if peer else "-",
        f"{measured:.2f}x" if measured is not None else "-",
        target_text(figure),
        verdict(figure, measured),
    ]


def markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


LEFT_ALIGNED = {"figure", "scheduler", "per seed", "runs", "met"}
"""Text columns; numbers are right-aligned."""


def markdown_header(columns: list[str]) -> str:
    """The header and alignment lines of a Markdown table."""
    align = ["---" if column in LEFT_ALIGNED else "--:" for column in columns]
    return markdown_row(columns) + "\n" + markdown_row(align)


def peer_only_lines(peers: dict[str, list[float]]) -> list[str]:
    """Peer figures without a hybrid counterpart, beside the quoted ones."""
    lines = []
    for figure in PEER_ONLY:
        if figure.name in peers:
            runs = peers[figure.name]
            lines.append(
                f"{figure.peer} {figure.name}: {number(statistics.median(runs))} {figure.unit} "
                f"today (runs {', '.join(number(r) for r in runs)}); when the targets were set: "
                f"{number(figure.quoted)}"
            )
    return lines
