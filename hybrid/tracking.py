"""Run logging: metrics.jsonl (always; the source of truth), console progress, wandb.

metrics.jsonl holds one JSON object per event, flushed as it is written so a
crash loses at most the line in progress. Every row carries ``kind``
(``train`` or ``eval``), ``env_steps``, ``updates``, ``wall_s`` (training wall
seconds) and ``virtual_s`` (the serial runtime's clock, else null). Metric
names are grouped as ``charts/``, ``losses/``, ``sched/``, ``perf/``, ``eval/``.
spans.jsonl holds one line per worker task (start, upload, end on the runtime's
clock, base version, staleness, verdict) for ``hybrid timeline``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

from hybrid.cluster_profile import is_profile_path
from hybrid.config import TrainConfig
from hybrid.protocol import Update, Verdict

PROFILE_COPY = "cluster_profile.json"
"""Where a run on a measured profile (``--cluster PATH.json``) keeps a copy of it."""


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file, fsync, rename: readers never see half a file.

    Non-finite numbers become null: strict JSON readers refuse NaN and Infinity."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(finite_json(data), f, indent=2, sort_keys=True, allow_nan=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (also inside lists and dicts) as None: JSON has
    no NaN or Infinity, and null is what strict readers accept."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def _number(value: float) -> str:
    # repr() of a finite float is what json writes; the rest is null
    return repr(value) if math.isfinite(value) else "null"


class Console:
    """A progress bar on a terminal; a periodic one-line status otherwise (CI logs)."""

    def __init__(self, total: int, label: str, enabled: bool, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.label = label
        self.enabled = enabled
        self.stream = stream
        self.interactive = enabled and stream.isatty()
        self._last_line = 0.0
        self._progress: Any = None
        if self.interactive:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} steps"),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._progress.add_task(label, total=total, status="")
            self._progress.start()

    def update(self, env_steps: int, status: str, force: bool = False) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.update(self._task, completed=min(env_steps, self.total), status=status)
            return
        now = time.monotonic()
        if force or now - self._last_line >= 10.0:
            self._last_line = now
            pct = 100.0 * env_steps / self.total
            print(f"[{self.label}] {env_steps:,} steps ({pct:.0f}%) {status}", file=self.stream)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


class WandbSink:
    """wandb logging that never stops training: every failure becomes one warning."""

    def __init__(self, cfg: TrainConfig, run_dir: Path) -> None:
        self.run: Any = None
        try:
            import wandb

            if not _wandb_configured():
                os.environ.setdefault("WANDB_MODE", "offline")
            self.run = wandb.init(
                project=cfg.wandb_project,
                group=cfg.exp_name or cfg.env,
                job_type=cfg.scheduler,
                name=run_dir.name,
                dir=str(run_dir),
                config=cfg.to_dict(),
                tags=[cfg.scheduler, cfg.runtime, cfg.algo],
                reinit="finish_previous",
            )
            self.run.define_metric("env_steps")
            self.run.define_metric("*", step_metric="env_steps")
        except Exception as exc:
            self._disable(exc)

    def _disable(self, exc: BaseException) -> None:
        warnings.warn(f"wandb disabled, training continues with JSONL only: {exc}", stacklevel=3)
        self.run = None

    def log(self, row: dict[str, Any], histograms: dict[str, list[float]] | None = None) -> None:
        if self.run is None:
            return
        try:
            import wandb

            data: dict[str, Any] = {k: v for k, v in row.items() if isinstance(v, int | float)}
            for name, values in (histograms or {}).items():
                if values:
                    data[name] = wandb.Histogram(values)
            self.run.log(data)
        except Exception as exc:
            self._disable(exc)

    def finish(self, summary: dict[str, Any] | None, artifact: Path | None = None) -> None:
        if self.run is None:
            return
        try:
            if summary:
                self.run.summary.update(summary)
            if artifact is not None:
                import wandb

                checkpoint = wandb.Artifact(f"{self.run.name}-checkpoint", type="checkpoint")
                checkpoint.add_file(str(artifact))
                self.run.log_artifact(checkpoint)
            self.run.finish()
        except Exception as exc:
            self._disable(exc)


def _wandb_configured() -> bool:
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


class Tracker:
    def __init__(self, cfg: TrainConfig, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._jsonl = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        # One line per worker task, for `hybrid timeline`; buffered, it is written often.
        self._spans = open(run_dir / "spans.jsonl", "a")  # noqa: SIM115
        self.console = Console(cfg.total_env_steps, f"{cfg.scheduler}/{cfg.env}", cfg.progress)
        self.wandb = WandbSink(cfg, run_dir) if cfg.track else None
        if cfg.runtime == "serial" and is_profile_path(cfg.cluster):
            # The measured machine the clock ran on, kept beside the config that names it.
            copy = run_dir / PROFILE_COPY
            if not copy.exists():  # a resumed run keeps the copy its first segment made
                shutil.copyfile(cfg.cluster, copy)

    def log(self, row: dict[str, Any], histograms: dict[str, list[float]] | None = None) -> None:
        """One metrics.jsonl row; ``histograms`` (raw samples) go to wandb only."""
        self._jsonl.write(json.dumps(finite_json(row), allow_nan=False) + "\n")
        self._jsonl.flush()
        if self.wandb is not None:
            self.wandb.log(row, histograms)

    def span(self, update: Update, staleness: int | None, verdict: Verdict) -> None:
        """Record one task: when it computed and uploaded, from which version, how stale.

        Written when the update is applied (``staleness`` is its τ then) or dropped
        (``staleness`` None: it never reached θ).
        """
        # Formatted by hand: json.dumps of a dict costs more than the rest of the line's
        # bookkeeping, once per update. repr() of a float is what json writes.
        start, end = float(update.started_s), float(update.finished_s)
        tau = "null" if staleness is None else int(staleness)
        self._spans.write(
            f'{{"worker": {int(update.worker_id)}, "start": {_number(start)}, '
            f'"upload_start": {_number(end - float(update.upload_s))}, "end": {_number(end)}, '
            f'"base_version": {int(update.base_version)}, "staleness": {tau}, '
            f'"verdict": "{verdict.value}", "env_steps": {int(update.env_steps)}}}\n'
        )

    def offsets(self) -> dict[str, int]:
        """Byte lengths of the logs now: a resume cuts what a crashed run wrote after them."""
        self._jsonl.flush()
        self._spans.flush()
        return {"metrics.jsonl": self._jsonl.tell(), "spans.jsonl": self._spans.tell()}

    def truncate(self, offsets: dict[str, int]) -> None:
        for name, handle in (("metrics.jsonl", self._jsonl), ("spans.jsonl", self._spans)):
            handle.flush()
            handle.truncate(offsets[name])
            handle.seek(offsets[name])

    def close(self, summary: dict[str, Any] | None = None, artifact: Path | None = None) -> None:
        self.console.close()
        if not self._spans.closed:
            self._spans.close()
        if not self._jsonl.closed:
            self._jsonl.flush()
            os.fsync(self._jsonl.fileno())
            self._jsonl.close()
        if self.wandb is not None:
            self.wandb.finish(summary, artifact)
            self.wandb = None
