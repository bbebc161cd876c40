"""What the files of a sweep say: whether a run directory is complete or pruned, its eval
rows and metric value, whether it was trained with this sweep's values, and the lock that
keeps one runner per ``--out``. ``Outcome`` is how a run of this invocation ended."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.config import TrainConfig
from hybrid.sweep.params import SweepError
from hybrid.sweep.planning import PlannedRun, _is_scheduler_arg
from hybrid.sweep.spec import SCHEDULER_ARG, Metric, Sweep


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


@dataclass
class Outcome:
    run: PlannedRun
    status: str
    """done, skipped, failed or pruned."""
    seconds: float = 0.0
    message: str = ""


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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value: Any) -> None:
    """Atomically: a reader (a resumed sweep) sees all of it or nothing."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)
