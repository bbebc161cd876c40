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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from hybrid.protocol import Update, Verdict


@dataclass(frozen=True)
class TrackingSettings:
    """What the tracker needs (the assembly fills it from the config)."""

    total_env_steps: int
    label: str
    """The console's name of the run, e.g. ``async/CartPole-v1``."""
    progress: bool
    track: bool
    """Log to wandb as well."""
    wandb_project: str
    wandb_group: str
    wandb_job_type: str
    wandb_tags: tuple[str, ...]
    config: dict[str, Any]
    """The whole config as plain data: what wandb records with the run."""
    cluster_profile: str | None
    """A measured profile the serial clock charged: copied into the run directory."""


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


SCHEDULER_SOURCE = "scheduler_source.json"
"""In a run directory: the scheduler file that ran (resolved path, SHA-256 of its bytes)."""


def record_scheduler_source(run_dir: Path, source: Any, resuming: bool) -> None:
    """Write which scheduler file ran (``source``: its ``path`` and ``sha256``; None for a
    built-in or importable scheduler). A resume must run the same bytes: an edited file
    would continue the run under other code, so it is refused in one line."""
    if source is None:
        return
    record = {"path": source.path, "sha256": source.sha256}
    path = Path(run_dir) / SCHEDULER_SOURCE
    if resuming and path.is_file():
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = None
        if isinstance(before, dict) and before.get("sha256") != source.sha256:
            from hybrid.errors import ConfigError

            raise ConfigError(
                f"scheduler: {source.path} changed since this run started (SHA-256 "
                f"{str(before.get('sha256'))[:12]}... then, {source.sha256[:12]}... now); a "
                "resume continues the same run: restore the file or start a new run"
            )
    write_json_atomic(path, record)


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


def _in_jupyter() -> bool:
    """True inside a Jupyter kernel (Lab, Notebook, VS Code, Colab), not in a terminal IPython."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has done it already
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _bar_class(stream: TextIO) -> Any:
    """The tqdm class that renders here, or None where a bar would not (CI logs, pipes).

    This is tqdm.auto's choice, made by hand: tqdm.auto warns in a kernel without
    ipywidgets, where the text bar renders well (Jupyter redraws a carriage return).
    """
    if _in_jupyter():
        try:
            import ipywidgets  # noqa: F401  (the widget bar needs it)
            from tqdm.notebook import tqdm
        except ImportError:
            from tqdm.std import tqdm
        return tqdm
    if stream.isatty():
        from tqdm.std import tqdm

        return tqdm
    return None


class Console:
    """Live progress of one run, fed one metrics row at a time (never per update).

    A tqdm bar in a terminal and in Jupyter (a widget with ipywidgets installed); a
    one-line status every ``STATUS_EVERY_S`` elsewhere (CI logs, subprocess pipes) and at
    every evaluation; nothing when disabled (``--no-progress``). Both show env steps/s,
    the last training and evaluation returns and the last window's mean staleness.
    """

    STATUS_EVERY_S = 10.0
    # Short, with the status's most telling parts first: a narrow terminal cuts the end.
    # tqdm puts ", " before a postfix.
    BAR_FORMAT = (
        "{desc} {percentage:3.0f}%|{bar:10}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
    )

    def __init__(self, total: int, label: str, enabled: bool, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr  # now: Jupyter replaces it
        self.env_steps = 0
        self.steps_per_s: float | None = None
        self.episode_return: float | None = None
        self.eval_return: float | None = None
        self.staleness_mean: float | None = None
        self._last_line = -math.inf
        self._bar: Any = None
        bar_class = _bar_class(self.stream) if enabled else None
        if bar_class is not None:
            self._bar = bar_class(
                total=total,
                desc=label,
                file=self.stream,
                bar_format=self.BAR_FORMAT,
                unit_scale=True,
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def update(self, row: dict[str, Any]) -> None:
        """Take in one metrics row (``kind`` train or eval) and redraw if it is time."""
        if not self.enabled:
            return
        self.env_steps = int(row["env_steps"])
        # A value missing from this row (no episode ended, no update applied) keeps the last.
        self.steps_per_s = row.get("perf/env_steps_per_s", self.steps_per_s)
        self.episode_return = row.get("charts/episode_return", self.episode_return)
        self.eval_return = row.get("eval/return_mean", self.eval_return)
        self.staleness_mean = row.get("sched/staleness_mean", self.staleness_mean)
        if self._bar is not None:
            self._bar.set_postfix_str(self.status(), refresh=False)
            self._bar.update(min(self.env_steps, self.total) - self._bar.n)  # tqdm throttles
            return
        now = time.monotonic()
        if row["kind"] == "eval" or now - self._last_line >= self.STATUS_EVERY_S:
            self._last_line = now
            pct = 100.0 * self.env_steps / self.total
            line = f"[{self.label}] {self.env_steps:,} steps ({pct:.0f}%) {self.status()}"
            print(line.rstrip(), file=self.stream)

    def status(self) -> str:
        """Env steps/s, the last evaluation return, the last window's mean staleness and
        mean training episode return; what is not known yet is left out."""
        parts = []
        if self.steps_per_s is not None:
            parts.append(f"{self.steps_per_s:,.0f} env steps/s")
        if self.eval_return is not None:
            parts.append(f"eval {self.eval_return:.1f}")
        if self.staleness_mean is not None:
            parts.append(f"staleness {self.staleness_mean:.2f}")
        if self.episode_return is not None:
            parts.append(f"return {self.episode_return:.1f}")
        return ", ".join(parts)

    def close(self, finished: bool = False) -> None:
        """``finished``: the run ended normally, if early (solved) its bar shows complete."""
        if self._bar is None:
            return
        if finished and 0 < self._bar.n < self._bar.total:
            # A run that stopped early (solved) ends at 100% of what it ran: closed short of
            # its total, tqdm's notebook widget turns red, as it does on an error.
            started, done = self._bar.start_t, self._bar.n
            self._bar.reset(total=done)
            self._bar.start_t = started  # keep the elapsed time
            self._bar.update(done)
        self._bar.set_postfix_str(self.status(), refresh=False)
        self._bar.close()
        self._bar = None


class WandbSink:
    """wandb logging that never stops training: every failure becomes one warning."""

    def __init__(self, settings: TrackingSettings, run_dir: Path) -> None:
        self.run: Any = None
        try:
            import wandb

            if not _wandb_configured():
                os.environ.setdefault("WANDB_MODE", "offline")
            self.run = wandb.init(
                project=settings.wandb_project,
                group=settings.wandb_group,
                job_type=settings.wandb_job_type,
                name=run_dir.name,
                dir=str(run_dir),
                config=settings.config,
                tags=list(settings.wandb_tags),
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


class Callback:
    """What ``hybrid.train(cfg, callbacks=[...])`` calls while a run trains: for live plots.

    Subclass it and override what you need, or pass any object with some of these
    methods, or a plain function: it is called with every row, train and eval (tell them
    apart by ``row["kind"]``). Rows are dicts, exactly as metrics.jsonl holds them
    (NaN written as None); each call gets its own copy.

    A callback that raises is warned about once and called no more; training goes on
    (the rule for wandb too): a plotting bug should not cost the run, and metrics.jsonl
    holds every row to plot again. Time spent in callbacks is not training time
    (``wall_s``, ``env_steps_per_s``).
    """

    def on_log(self, row: dict[str, Any]) -> None:
        """A ``train`` row, every ``log_every`` env steps."""

    def on_eval(self, row: dict[str, Any]) -> None:
        """An ``eval`` row, every ``eval_every`` env steps and at the end."""

    def on_end(self, summary: dict[str, Any]) -> None:
        """Once, when the run finished: what summary.json holds. Not called on an error."""


# a Callback, any object with some of its methods (duck-typed), or a function of a row
CallbackLike = Callback | Callable[[dict[str, Any]], None]


class Callbacks:
    """The run's callbacks, each resolved once to its hooks; a failing one is dropped."""

    def __init__(self, callbacks: Sequence[CallbackLike] | None = None) -> None:
        self._hooks: list[tuple[Any, dict[str, Callable[[dict[str, Any]], None]]]] = []
        for callback in callbacks or ():
            if isinstance(callback, type):
                raise TypeError(f"callbacks: pass an instance, {callback.__name__}(), not a class")
            hooks = {
                name: getattr(callback, name)
                for name in ("on_log", "on_eval", "on_end")
                if callable(getattr(callback, name, None))
            }
            if not hooks and callable(callback):
                hooks = {"on_log": callback, "on_eval": callback}
            if not hooks:
                raise TypeError(
                    f"callbacks: {callback!r} is neither callable nor has on_log, on_eval or on_end"
                )
            self._hooks.append((callback, hooks))
        self.on_log_s = 0.0
        """Time spent in on_log, which the loop does not count as training (on_eval runs
        inside the evaluation, whose time the loop leaves out already)."""

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def call(self, hook: str, data: dict[str, Any]) -> None:
        started = time.perf_counter()
        for entry in list(self._hooks):
            callback, hooks = entry
            function = hooks.get(hook)
            if function is None:
                continue
            try:
                function(dict(data))
            except Exception as exc:
                self._hooks.remove(entry)
                warnings.warn(
                    f"callback {callback!r} raised in {hook}; it is called no more and "
                    f"the run goes on: {exc!r}",
                    stacklevel=2,
                )
        if hook == "on_log":
            self.on_log_s += time.perf_counter() - started


class Tracker:
    def __init__(
        self, settings: TrackingSettings, run_dir: Path, callbacks: Callbacks | None = None
    ) -> None:
        self.run_dir = run_dir
        self.callbacks = callbacks if callbacks is not None else Callbacks()
        self._jsonl = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        # One line per worker task, for `hybrid timeline`; buffered, it is written often.
        self._spans = open(run_dir / "spans.jsonl", "a")  # noqa: SIM115
        # Rows written so far: a checkpoint records them, so a resume that finds a log cut
        # short (a power loss: logs are not fsynced) can say how many rows it lost.
        self._rows = {"metrics.jsonl": 0, "spans.jsonl": 0}
        self.console = Console(settings.total_env_steps, settings.label, settings.progress)
        self.wandb = WandbSink(settings, run_dir) if settings.track else None
        if settings.cluster_profile is not None:
            # The measured machine the clock ran on, kept beside the config that names it.
            copy = run_dir / PROFILE_COPY
            if not copy.exists():  # a resumed run keeps the copy its first segment made
                shutil.copyfile(settings.cluster_profile, copy)

    def log(self, row: dict[str, Any], histograms: dict[str, list[float]] | None = None) -> None:
        """One metrics.jsonl row, shown on the console and handed to the callbacks;
        ``histograms`` (raw samples) go to wandb only."""
        clean = finite_json(row)
        self._jsonl.write(json.dumps(clean, allow_nan=False) + "\n")
        self._jsonl.flush()
        self._rows["metrics.jsonl"] += 1
        if self.wandb is not None:
            self.wandb.log(row, histograms)
        self.console.update(clean)
        if self.callbacks:
            self.callbacks.call("on_eval" if row["kind"] == "eval" else "on_log", clean)

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
            f'"verdict": "{verdict.value}", "env_steps": {int(update.env_steps)}'
            # the task's settings a scheduler chose for it (ready's per-worker settings)
            + (f', "task": {json.dumps(update.task_settings)}' if update.task_settings else "")
            # a Byzantine edge client's update (its pool marks every update of such a run)
            + (', "byzantine": true' if update.stats.get("fed/byzantine") else "")
            # seconds a real runtime held the result to emulate a traced client's device
            + (f', "held": {_number(float(update.held_s))}' if update.held_s else "")
            + "}\n"
        )
        self._rows["spans.jsonl"] += 1

    def mixing(self, event: dict[str, Any]) -> None:
        """Record one mix of a decentralized run's replicas (``hybrid.replicas.mixing_event``)
        as a line of spans.jsonl beside the tasks, so it is flushed, checkpointed and cut on
        resume with them; ``hybrid timeline`` draws it between the workers' rows."""
        self._spans.write(json.dumps(finite_json(event), allow_nan=False) + "\n")
        self._rows["spans.jsonl"] += 1

    def offsets(self) -> dict[str, Any]:
        """Byte lengths of the logs now, and their rows: a resume cuts what a crashed run
        wrote after them."""
        self._jsonl.flush()
        self._spans.flush()
        return {
            "metrics.jsonl": self._jsonl.tell(),
            "spans.jsonl": self._spans.tell(),
            "rows": dict(self._rows),
        }

    def truncate(self, offsets: dict[str, Any]) -> None:
        """Cut each log back to where the checkpoint left it. A log shorter than that (its
        tail never reached the disk) is not padded: it keeps its whole rows, a warning says
        how many rows were lost, and the run appends after them."""
        rows = offsets.get("rows") if isinstance(offsets.get("rows"), dict) else {}
        for name, handle in (("metrics.jsonl", self._jsonl), ("spans.jsonl", self._spans)):
            handle.flush()
            offset = int(offsets[name])
            size = os.fstat(handle.fileno()).st_size
            recorded = rows.get(name)
            if size >= offset:
                handle.truncate(offset)
                handle.seek(offset)
                self._rows[name] = (
                    int(recorded)
                    if recorded is not None
                    else _count_rows(self.run_dir / name, offset)
                )
                continue
            kept = _last_whole_row_end(self.run_dir / name, size)
            handle.truncate(kept)
            handle.seek(kept)
            present = _count_rows(self.run_dir / name, kept)
            self._rows[name] = present
            lost = (
                f"{int(recorded) - present} rows"
                if recorded is not None
                else f"{offset - kept} bytes of rows"
            )
            warnings.warn(
                f"resume: {name} holds {kept} bytes of whole rows but the checkpoint recorded "
                f"{offset} (its tail never reached the disk): {lost} lost; appending after "
                "the last whole row",
                RuntimeWarning,
                stacklevel=2,
            )

    def close(self, summary: dict[str, Any] | None = None, artifact: Path | None = None) -> None:
        """``summary`` None: the run did not finish (an error, an interrupt)."""
        self.console.close(finished=summary is not None)
        if summary is not None and self.callbacks:
            self.callbacks.call("on_end", summary)
        if not self._spans.closed:
            self._spans.close()
        if not self._jsonl.closed:
            self._jsonl.flush()
            os.fsync(self._jsonl.fileno())
            self._jsonl.close()
        if self.wandb is not None:
            self.wandb.finish(summary, artifact)
            self.wandb = None


def _last_whole_row_end(path: Path, size: int) -> int:
    """The byte just after the last newline within the first ``size`` bytes of ``path``."""
    with open(path, "rb") as f:
        data = f.read(size)
    return data.rfind(b"\n") + 1


def _count_rows(path: Path, size: int) -> int:
    with open(path, "rb") as f:
        return f.read(size).count(b"\n")
