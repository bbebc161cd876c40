"""Reading run directories: their config, summary and metric rows, as objects or DataFrames.

A run directory, as written by the trainer, holds ``config.json`` (flat config), ``metrics.jsonl``
(append-only rows tagged by ``kind``) and, once the run finished, ``summary.json``.
"""

from __future__ import annotations

import glob
import json
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

_NAN = float("nan")


class AnalysisWarning(UserWarning):
    """Something in the inputs was skipped or could not be used."""


class CompareError(ValueError):
    """Inputs that cannot give a meaningful comparison. One line; the CLI exits with code 2."""


def warn(message: str) -> None:
    """Warn with an [`AnalysisWarning`][hybrid.analysis.AnalysisWarning] at the caller's caller."""
    warnings.warn(message, AnalysisWarning, stacklevel=3)


def to_float(v: Any) -> float:
    """A logged value as a float: NaN where absent, not a number, or too large for a float."""
    if v is None or isinstance(v, (str, dict, list)):
        return _NAN
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit integer
        return _NAN


# --------------------------------------------------------------------------- loading


def read_jsonl(path: str | Path, kinds: Collection[str] | None = None) -> tuple[list[dict], int]:
    """Parse a JSONL file, skipping lines that are not JSON objects (e.g. a crash-torn tail).

    With ``kinds``, only rows whose ``kind`` is in it are kept. Returns ``(rows, skipped)``.
    """
    # errors="replace": a crash can also cut a multi-byte character in half.
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    keep = set(kinds) if kinds is not None else None
    # Parsing dominates load time; lines that cannot hold a wanted kind are dropped by a
    # substring test first (a false positive is parsed and filtered below, so still exact
    # for what json.dumps writes).
    needles = [json.dumps(k) for k in keep] if keep is not None else None
    rows: list[dict] = []
    skipped = 0
    loads = json.loads
    for line in text.splitlines():
        if not line or line.isspace():
            continue
        if needles is not None and not any(n in line for n in needles):
            continue
        try:
            row = loads(line)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(row, dict):
            skipped += 1
            continue
        if keep is None or row.get("kind") in keep:
            rows.append(row)
    return rows, skipped


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def summary_problem(path: Path) -> str | None:
    """Why ``path`` (a summary.json) is unusable: None when it reads as a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        return f"unreadable ({exc})"
    try:
        summary = json.loads(text)
    except ValueError as exc:
        return f"corrupt (not valid JSON: {exc})"
    return None if isinstance(summary, dict) else "corrupt (not a JSON object)"


@dataclass
class Run:
    """One run directory: its config, its summary (None if unfinished) and metric rows."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any] | None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped_lines: int = 0

    @property
    def complete(self) -> bool:
        return self.summary is not None

    @property
    def name(self) -> str:
        return self.path.name

    def column(self, kind: str, key: str) -> np.ndarray:
        """Values of ``key`` over the rows of ``kind`` as floats, NaN where absent or null."""
        return np.array(
            [to_float(r.get(key)) for r in self.rows.get(kind, ())], dtype=float
        ).reshape(-1)


def load_run(path: str | Path, kinds: Collection[str] | None = None) -> Run:
    """Load a run directory. ``kinds`` limits which metric rows are kept (all by default).

    Raises FileNotFoundError without a readable ``config.json``. An unreadable
    ``summary.json`` (e.g. torn by a crash) counts as absent.
    """
    p = Path(path)
    config = _read_json(p / "config.json")
    if not isinstance(config, dict):
        raise FileNotFoundError(f"{p}: no readable config.json")
    summary = _read_json(p / "summary.json")
    metrics = p / "metrics.jsonl"
    rows: dict[str, list[dict[str, Any]]] = {}
    skipped = 0
    if metrics.is_file():
        flat, skipped = read_jsonl(metrics, kinds)
        for row in flat:
            rows.setdefault(str(row.get("kind")), []).append(row)
    return Run(p, config, summary if isinstance(summary, dict) else None, rows, skipped)


def find_runs(root: str | Path) -> list[Path]:
    """Every directory at or under ``root`` holding a ``config.json``, sorted."""
    r = Path(root)
    return sorted({c.parent for c in r.rglob("config.json")})


# --------------------------------------------------------------------------- data frames

FRAME_KINDS: dict[str, str] = {
    "metrics": "every row of metrics.jsonl (train and eval rows; `kind` says which)",
    "train": "the train rows of metrics.jsonl (losses, staleness, throughput)",
    "eval": "the eval rows of metrics.jsonl (eval/return_mean, eval/return_std)",
    "spans": "one row per worker task from spans.jsonl (start, upload_start, end, "
    "base_version, staleness, verdict, env_steps; virtual seconds on the serial runtime)",
    "summary": "one row per finished run: summary.json",
    "config": "one row per run: config.json",
}
"""What [`frame`][hybrid.analysis.frame] and [`load_runs`][hybrid.analysis.load_runs] read, by
``kind``."""

_GLOB_CHARS = frozenset("*?[")


def _frame_rows(path: Path, kind: str) -> list[dict[str, Any]] | None:
    """The rows of one kind in one run directory; None when the run has no such file."""
    if kind in ("metrics", "train", "eval"):
        metrics = path / "metrics.jsonl"
        if not metrics.is_file():
            return None
        return read_jsonl(metrics, None if kind == "metrics" else (kind,))[0]
    if kind == "spans":
        spans = path / "spans.jsonl"
        if not spans.is_file():
            return None
        # the tasks; a decentralized run's mix lines are the timeline's (hybrid.timeline)
        return [row for row in read_jsonl(spans)[0] if "mix" not in row]
    if kind == "summary":
        summary = _read_json(path / "summary.json")
        return [summary] if isinstance(summary, dict) else None
    return [{}]  # config: the config columns are added by the caller


def _check_kind(kind: str) -> None:
    if kind not in FRAME_KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(FRAME_KINDS)}")


def _records(
    path: Path, kind: str, config: bool | Sequence[str]
) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Rows of ``kind`` with a ``run`` column first and the config fields after the row's."""
    p = Path(path)
    cfg = _read_json(p / "config.json")
    if not isinstance(cfg, dict):
        raise FileNotFoundError(f"{p}: no readable config.json")
    rows = _frame_rows(p, kind)
    if rows is None:
        return None
    fields = list(cfg) if config is True else [] if config is False else list(config)
    out = []
    for row in rows:
        rec: dict[str, Any] = {"run": str(p), **row}
        for name in fields:
            # A config field never hides a logged value of the same name.
            rec[f"config/{name}" if name in row else name] = cfg.get(name)
        out.append(rec)
    return out, fields


def _dataframe(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    # Lists (staleness_histogram, scheduler_args...) stay Python objects in their cells.
    return pd.DataFrame.from_records(records) if records else pd.DataFrame({"run": []})


def frame(
    run: str | Path, kind: str = "metrics", *, config: bool | Sequence[str] = True
) -> pd.DataFrame:
    """One run directory as a pandas DataFrame: one row per logged row of ``kind``.

    ``kind`` is one of [`FRAME_KINDS`][hybrid.analysis.FRAME_KINDS]. The first column, ``run``, is
    the run directory; the config fields follow the logged columns (all of them, none with
    ``config=False``, or the ones named), so frames of several runs concatenate and group by any
    field. A config field whose name a row already has becomes ``config/<name>``. Raises
    FileNotFoundError when ``run`` has no config.json or no file for ``kind``.
    """
    _check_kind(kind)
    got = _records(Path(run), kind, config)
    if got is None:
        raise FileNotFoundError(f"{run}: holds no data for kind={kind!r} ({FRAME_KINDS[kind]})")
    return _dataframe(got[0])


def expand(paths: Any) -> list[Path]:
    """Run directories from paths, globs, folders holding runs, Result or Run objects."""
    if isinstance(paths, (str, Path)) or hasattr(paths, "run_dir"):
        paths = [paths]
    found: list[Path] = []
    for item in paths:
        if hasattr(item, "run_dir"):  # a hybrid.Result
            found.append(Path(item.run_dir))
            continue
        if isinstance(item, Run):
            found.append(item.path)
            continue
        text = str(item)
        matches = sorted(glob.glob(text)) if _GLOB_CHARS & set(text) else [text]
        if not matches:
            warn(f"{text!r} matches no path")
        for m in map(Path, matches):
            if (m / "config.json").is_file():
                found.append(m)
            elif m.is_dir():
                found += find_runs(m)
            elif not m.exists():
                raise FileNotFoundError(f"runs: {str(m)!r} does not exist")
    unique: dict[Path, Path] = {}
    for f in found:
        unique.setdefault(f.resolve(), f)
    return list(unique.values())


def load_runs(
    paths: Any, kind: str = "metrics", *, config: bool | Sequence[str] = True
) -> pd.DataFrame:
    """Many runs as one pandas DataFrame: [`frame`][hybrid.analysis.frame] of each, stacked.

    ``paths`` is a path, a glob (``"runs/sweep/*"``), a folder searched for run directories, a
    [`hybrid.Result`][hybrid.Result], or a list of those. Runs are read in path order; one without
    data for ``kind`` (an unfinished run has no summary) is left out with an
    [`AnalysisWarning`][hybrid.analysis.AnalysisWarning]. Group with pandas, e.g.
    ``load_runs("runs/*", "eval").groupby(["scheduler", "env_steps"])["eval/return_mean"]``.
    """
    _check_kind(kind)
    records: list[dict[str, Any]] = []
    for p in expand(paths):
        try:
            got = _records(p, kind, config)
        except FileNotFoundError as exc:
            warn(f"skipping {exc}")
            continue
        if got is None:
            warn(f"skipping {p}: no data for kind={kind!r}")
            continue
        records += got[0]
    return _dataframe(records)
