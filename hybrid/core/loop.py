"""The one loop, and ``train``: build the components, run the loop, write the run directory.

``train`` is where the flat ``TrainConfig`` ends: it checks it, then builds each component
from its own settings, made by ``hybrid/assembly.py``.

Every scheduler, runtime and algorithm runs through ``Training.run``; nothing
else owns control flow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hybrid import checkpoint
from hybrid.algorithms import ALGORITHMS
from hybrid.assembly import (
    algo_settings,
    env_settings,
    eval_settings,
    runtime_settings,
    scheduler_settings,
    server_settings,
    tracking_settings,
    worker_pool,
)
from hybrid.checkpoint import from_plain, to_plain, update_from_state, update_to_state
from hybrid.codecs import PayloadError, make_codec
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.appliers import SERVER_APPLIES, Applier
from hybrid.core.global_model import (
    GlobalModel,
    all_finite,
    build_global_model,
    params_sha256,
    resolve_device,
)
from hybrid.core.learner import Learner
from hybrid.core.worker import build_model
from hybrid.defaults import apply_env_defaults, apply_runtime_defaults
from hybrid.envs import EnvInfo, describe
from hybrid.evaluation import Evaluator
from hybrid.nets import FlatParams
from hybrid.protocol import CollectExperience, Payload, Task, TrainLocally, Update
from hybrid.runtimes import Runtime, make_runtime
from hybrid.schedulers import (
    Scheduler,
    Verdict,
    make_scheduler,
    short_name,
    typed_scheduler_args,
)
from hybrid.seeding import MODEL_INIT, SCHEDULER, int_seed, stream
from hybrid.tracking import CallbackLike, Callbacks, Tracker, write_json_atomic

if TYPE_CHECKING:
    import pandas as pd  # only for Result.frame's annotation: pandas is imported on use


@dataclass
class Result:
    """What a finished run hands back; everything here is also on disk in ``run_dir``."""

    run_dir: Path
    config: TrainConfig
    summary: dict[str, Any]
    params: torch.Tensor
    """The final global parameters (flat)."""

    @property
    def solved(self) -> bool:
        return bool(self.summary["solved"])

    @property
    def final_eval_return(self) -> float:
        return float(self.summary["final_eval_return"])

    def metrics(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl, optionally only those of one ``kind``."""
        rows = []
        with open(self.run_dir / "metrics.jsonl") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if kind is None or row.get("kind") == kind:
                    rows.append(row)
        return rows

    def frame(self, kind: str = "metrics") -> pd.DataFrame:
        """This run's rows of ``kind`` as a pandas DataFrame, config fields as columns.

        ``kind`` is one of [`hybrid.analysis.FRAME_KINDS`][hybrid.analysis.FRAME_KINDS]: ``metrics``
        (every row), ``train``, ``eval``, ``spans`` (one row per worker task), ``summary`` or
        ``config``.
        """
        from hybrid.analysis import frame

        return frame(self.run_dir, kind)


@dataclass
class RunStats:
    """Counters the loop keeps between log rows and for the summary."""

    env_steps: int = 0
    received: int = 0
    dropped: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    bytes_up: int = 0
    bytes_down: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    window_returns: list[float] = field(default_factory=list)
    window_lengths: list[int] = field(default_factory=list)
    window_losses: dict[str, list[float]] = field(default_factory=dict)
    window_staleness: list[int] = field(default_factory=list)
    window_grad_norms: list[float] = field(default_factory=list)

    def record(self, update: Update, verdict: Verdict) -> None:
        """An update arrived (its staleness is recorded when it is applied)."""
        self.env_steps += update.env_steps
        self.received += 1
        self.bytes_up += update.nbytes
        self.window_returns += update.episode_returns
        self.window_lengths += update.episode_lengths
        for name, value in update.stats.items():
            self.window_losses.setdefault(name, []).append(value)
        if verdict is Verdict.DROP:
            self.dropped += 1

    def record_applied(self, staleness: int) -> None:
        self.staleness[staleness] += 1
        self.window_staleness.append(staleness)

    def drain_window(self) -> dict[str, float]:
        row: dict[str, float] = {}
        if self.window_returns:
            row["charts/episode_return"] = float(np.mean(self.window_returns))
            row["charts/episode_length"] = float(np.mean(self.window_lengths))
            row["charts/episodes"] = len(self.window_returns)
        for name, values in self.window_losses.items():
            row[name] = float(np.mean(values))
        if self.window_staleness:
            row["sched/staleness_mean"] = float(np.mean(self.window_staleness))
            row["sched/staleness_max"] = int(max(self.window_staleness))
        if self.window_grad_norms:
            row["perf/grad_norm"] = float(np.mean(self.window_grad_norms))
        row["sched/dropped"] = self.dropped
        row["sched/rejected_corrupt"] = self.rejected["corrupt"]
        row["sched/rejected_nonfinite"] = self.rejected["nonfinite"]
        row["perf/bytes_up"] = self.bytes_up
        row["perf/bytes_down"] = self.bytes_down
        self.window_returns, self.window_lengths = [], []
        self.window_losses, self.window_staleness, self.window_grad_norms = {}, [], []
        return row

    def staleness_summary(self) -> dict[str, Any]:
        total = sum(self.staleness.values())
        top = max(self.staleness, default=0)
        return {
            "staleness_mean": sum(k * v for k, v in self.staleness.items()) / total
            if total
            else 0.0,
            "staleness_max": top,
            "staleness_histogram": [self.staleness.get(k, 0) for k in range(top + 1)],
        }


class Receiver:
    """Turns an arriving payload back into a vector; refuses what must never be applied."""

    def __init__(self, cfg: TrainConfig, numel: int) -> None:
        self.numel = numel
        self.codec = make_codec(cfg.codec, topk_ratio=cfg.topk_ratio, seed=cfg.seed)

    def receive(self, update: Update) -> str | None:
        """Decode ``update.payload`` in place; returns why it was rejected, or None."""
        if update.kind == Payload.TRAJECTORY:
            return None  # experience, not a direction: the learner checks what it learns
        if isinstance(update.payload, bytes | bytearray | memoryview):
            try:
                update.payload = self.codec.decode(bytes(update.payload), self.numel)
            except PayloadError as exc:
                warnings.warn(f"worker {update.worker_id}: payload rejected: {exc}", stacklevel=2)
                return "corrupt"
        if update.payload.shape != (self.numel,):
            warnings.warn(
                f"worker {update.worker_id}: payload of shape {tuple(update.payload.shape)} "
                f"rejected; the model has {self.numel} parameters",
                stacklevel=2,
            )
            return "corrupt"
        if not all_finite(update.payload):
            return "nonfinite"
        return None


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run after it wrote a checkpoint and flushed its logs."""

    def __init__(self, signum: int, checkpoint: Path | None) -> None:
        name = signal.Signals(signum).name
        where = f"; resume with --resume {checkpoint.parent.parent}" if checkpoint else ""
        super().__init__(f"stopped by {name}{where}")
        self.signum = signum
        self.exit_code = 128 + signum
        self.checkpoint = checkpoint


class Diverged(RuntimeError):
    """The global parameters stopped being finite numbers."""


@dataclass
class LoopState:
    """Where the loop stands: everything besides the components that a resume needs."""

    stats: RunStats
    next_log: int
    next_eval: int
    next_checkpoint: int
    solved_at: int | None = None
    last_eval: tuple[int, float] | None = None
    train_s_before: float = 0.0
    """Training seconds spent by earlier segments of a resumed run."""
    nonfinite_streak: int = 0


class Training:
    """The one loop, with the state that makes it checkpointable and resumable."""

    MAX_NONFINITE_STREAK = 100  # that many non-finite updates in a row: the run diverged

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        global_model: GlobalModel,
        scheduler: Scheduler,
        learner: Learner,
        runtime: Runtime,
        evaluator: Evaluator,
        tracker: Tracker,
        threshold: float | None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.global_model = global_model
        self.scheduler = scheduler
        self.learner = learner
        self.runtime = runtime
        # Who writes θ is the runtime's choice (Hogwild!: its workers); a runtime that does
        # not say leaves it to the loop's server optimizer.
        self.applier: Applier = getattr(runtime, "applier", SERVER_APPLIES)
        self.evaluator = evaluator
        self.tracker = tracker
        self.threshold = threshold
        self.task = make_task(scheduler.task_kind, cfg)
        self.receiver = Receiver(cfg, global_model.params.numel())
        self.state = LoopState(
            RunStats(), cfg.log_every, cfg.eval_every, cfg.checkpoint_every or 2**62
        )
        self.started = time.perf_counter()
        self.excluded_s = 0.0  # evaluation and checkpoint time: not training
        self.stop_signal: int | None = None
        self.last_checkpoint: Path | None = None
        self.writing_checkpoint = False
        self.deferred_signal: int | None = None
        """A second stop signal that arrived while a checkpoint was being written."""

    # --- time and rows -------------------------------------------------------------------------

    def train_s(self) -> float:
        excluded = self.excluded_s + self.tracker.callbacks.on_log_s  # a live plot is not training
        return self.state.train_s_before + time.perf_counter() - self.started - excluded

    def row(self, kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "env_steps": self.state.stats.env_steps,
            "updates": self.global_model.version,
            "wall_s": self.train_s(),
            "virtual_s": self.runtime.virtual_time(),
        }

    def evaluate(self) -> float:
        st = self.state
        started = time.perf_counter()
        returns = self.evaluator.evaluate(self.global_model.params)
        mean = float(returns.mean())
        st.last_eval = (st.stats.env_steps, mean)
        if self.threshold is not None and mean >= self.threshold and st.solved_at is None:
            st.solved_at = st.stats.env_steps
        eval_row = self.row("eval") | {
            "eval/return_mean": mean,
            "eval/return_std": float(returns.std()),
        }
        self.tracker.log(eval_row)  # also the console and the callbacks' on_eval
        self.excluded_s += time.perf_counter() - started
        return mean

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg, st, stats = self.cfg, self.state, self.state.stats
        global_model, scheduler, runtime = self.global_model, self.scheduler, self.runtime
        while stats.env_steps < cfg.total_env_steps:
            if self.stop_signal is not None:
                runtime.settle()
                raise Interrupted(self.stop_signal, self.checkpoint())
            starting = scheduler.ready(runtime.idle_workers(), global_model.version)
            if not starting and scheduler.finished():
                break  # it starts no more tasks, e.g. its privacy budget is spent
            if starting:
                # shared by all tasks started together
                snapshot = self.applier.snapshot(
                    global_model, self.task, stats.env_steps / cfg.total_env_steps
                )
                dispatch_group = getattr(runtime, "dispatch_group", None)
                if dispatch_group is not None and len(starting) > 1:
                    dispatch_group(starting, snapshot)  # tasks on one snapshot may batch
                else:
                    for worker_id in starting:
                        runtime.dispatch(worker_id, snapshot)
                stats.bytes_down += len(starting) * snapshot.params.numel() * 4
            update = runtime.next_update()
            global_model.observe(update)  # e.g. observation statistics, whatever the verdict
            rejection = self.receiver.receive(update)
            if rejection is None:
                # what τ would be if it were applied now: the scheduler's admission input
                verdict = scheduler.admit(update, staleness(update, global_model.version))
                st.nonfinite_streak = 0
            else:
                stats.rejected[rejection] += 1
                verdict = scheduler.reject(update)
                st.nonfinite_streak += rejection == "nonfinite"
            stats.record(update, verdict)
            if verdict is Verdict.DROP:
                self.tracker.span(update, None, verdict)
            if scheduler.full() and (step := scheduler.combine()) is not None:
                for applied in step.updates:  # τ is measured when an update is applied
                    tau = staleness(applied, global_model.version)
                    stats.record_applied(tau)
                    self.tracker.span(applied, tau, Verdict.BUFFER)
                progress = stats.env_steps / cfg.total_env_steps
                for direction in self.learner.steps(step, global_model, progress):
                    stats.window_grad_norms.append(
                        self.applier.apply(global_model, direction, progress)
                    )
                self.check_finite(applied=True)
            elif st.nonfinite_streak:
                self.check_finite(applied=False)

            if stats.env_steps >= st.next_log:
                st.next_log += cfg.log_every
                staleness_window = list(stats.window_staleness)
                train_row = (
                    self.row("train")
                    | stats.drain_window()
                    | self.learner.metrics()
                    | runtime.metrics()
                    | scheduler.metrics()
                )
                train_row["perf/env_steps_per_s"] = stats.env_steps / max(train_row["wall_s"], 1e-9)
                self.tracker.log(train_row, {"sched/staleness": staleness_window})
            if stats.env_steps >= st.next_eval:
                st.next_eval += cfg.eval_every
                self.evaluate()
                if st.solved_at is not None and cfg.stop_when_solved:
                    break
            if global_model.version >= st.next_checkpoint:
                while st.next_checkpoint <= global_model.version:
                    st.next_checkpoint += cfg.checkpoint_every
                self.checkpoint()

        train_wall_s = self.train_s()
        runtime.settle()  # from here on, the global model is what the summary describes
        if st.last_eval is None or st.last_eval[0] != stats.env_steps:
            self.evaluate()
        assert st.last_eval is not None
        if cfg.checkpoint_every:
            self.checkpoint()
        return self.summary(train_wall_s)

    def check_finite(self, applied: bool) -> None:
        """Stop a diverged run before it writes a checkpoint of garbage."""
        st = self.state
        finite = not applied or all_finite(self.global_model.params)  # one read: Hogwild!-safe
        if finite and st.nonfinite_streak < self.MAX_NONFINITE_STREAK:
            return
        where = (
            f"; the last good checkpoint is {self.last_checkpoint}"
            if (self.last_checkpoint)
            else ""
        )
        raise Diverged(
            f"diverged at {st.stats.env_steps:,} env steps (version {self.global_model.version}):"
            f" the parameters are not finite or {st.nonfinite_streak} updates in a row were;"
            f" lower --lr or clip with --max-grad-norm{where}"
        )

    def summary(self, train_wall_s: float) -> dict[str, Any]:
        st, stats, global_model = self.state, self.state.stats, self.global_model
        assert st.last_eval is not None
        return {
            "solved": st.solved_at is not None,
            "env_steps_to_solve": st.solved_at,
            "reward_threshold": self.threshold,
            "train_wall_s": train_wall_s,
            "env_steps": stats.env_steps,
            "updates": global_model.version,
            "tasks": stats.received,
            "dropped": stats.dropped,
            "rejected_corrupt": stats.rejected["corrupt"],
            "rejected_nonfinite": stats.rejected["nonfinite"],
            "bytes_up": stats.bytes_up,
            "bytes_down": stats.bytes_down,
            "compression_ratio": (
                stats.received * global_model.params.numel() * 4 / stats.bytes_up
                if stats.bytes_up
                else None
            ),
            "env_steps_per_s": stats.env_steps / max(train_wall_s, 1e-9),
            **stats.staleness_summary(),
            "staleness_unit": self.scheduler.staleness_unit,
            "final_eval_return": st.last_eval[1],
            "virtual_time_s": self.runtime.virtual_time(),
            "final_params_sha256": global_model.sha256(),
            **{
                name.removeprefix("sched/"): value
                for name, value in self.scheduler.metrics().items()
            },
            **self.evaluator.final_metrics(global_model.params),  # e.g. per-client fairness
        }

    # --- checkpoints ---------------------------------------------------------------------------

    def checkpoint(self) -> Path:
        """Write everything a resume needs, atomically; returns the file."""
        started = time.perf_counter()
        state = {
            "format": 1,
            "config": self.cfg.to_dict(),  # a resume checks config.json against it
            "global_model": self.global_model.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scheduler_rng": self.scheduler.rng.bit_generator.state,
            "scheduler_buffer": [(update_to_state(u), s) for u, s in self.scheduler.buffer],
            "learner": self.learner.state_dict(with_replay=self.cfg.checkpoint_replay),
            "runtime": getattr(self.runtime, "state_dict", dict)(),
            "loop": self._loop_state(),
            "logs": self.tracker.offsets(),
        }
        # A signal that would stop the run now waits for the write (see _stop_on_signals):
        # raised inside torch.save it left a torn file and a traceback.
        self.writing_checkpoint = True
        try:
            path = checkpoint.save(
                self.run_dir, self.global_model.version, to_plain(state), self.cfg.keep_checkpoints
            )
            self.last_checkpoint = path
        finally:
            self.writing_checkpoint = False
        self.excluded_s += time.perf_counter() - started
        if self.deferred_signal is not None:
            raise Interrupted(self.deferred_signal, path)
        return path

    def _loop_state(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it would rebuild the Counters from (key, count) pairs.
        def plain(obj: Any) -> dict[str, Any]:
            return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}

        stats = plain(self.state.stats)
        stats["rejected"] = dict(stats["rejected"])
        stats["staleness"] = dict(stats["staleness"])
        return plain(self.state) | {"stats": stats, "train_s_before": self.train_s()}

    def restore(self, state: dict[str, Any], changed: dict[str, Any] | None = None) -> None:
        """Continue from a checkpoint; ``changed`` names the resumable fields that differ
        from the config it was written under (their cadences start again from here)."""
        state = from_plain(state)
        try:
            self._restore(state)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
            # a checkpoint that does not fit the components (an edited config.json)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"resume: the checkpoint does not fit config.json ({first[:160]}); "
                "restore config.json"
            ) from None
        # not under the catch above: a parallel runtime restarts its workers here, and their
        # failures are the runtime's, not the config's (the worker count was checked before)
        if state["runtime"] and hasattr(self.runtime, "load_state_dict"):
            self.runtime.load_state_dict(state["runtime"])
        self.tracker.truncate(state["logs"])
        st, cfg = self.state, self.cfg
        changed = changed or {}
        if "log_every" in changed:
            st.next_log = st.stats.env_steps + cfg.log_every
        if "eval_every" in changed:
            st.next_eval = st.stats.env_steps + cfg.eval_every
        if "checkpoint_every" in changed or not cfg.checkpoint_every:
            # 0 turns checkpoints off; the loop's cadence must never add 0
            st.next_checkpoint = (
                self.global_model.version + cfg.checkpoint_every if cfg.checkpoint_every else 2**62
            )

    def _restore(self, state: dict[str, Any]) -> None:
        self.global_model.load_state_dict(state["global_model"])
        self.scheduler.load_state_dict(state["scheduler"])
        if "scheduler_rng" in state:  # checkpoints from before the scheduler had one
            self.scheduler.rng.bit_generator.state = state["scheduler_rng"]
        self.scheduler.buffer = [(update_from_state(u), s) for u, s in state["scheduler_buffer"]]
        self.learner.load_state_dict(state["learner"])
        loop = dict(state["loop"])
        stats = RunStats(**loop.pop("stats"))
        stats.rejected = Counter(stats.rejected)
        stats.staleness = Counter({int(k): v for k, v in stats.staleness.items()})
        last_eval = loop.pop("last_eval")
        self.state = LoopState(
            stats, **loop, last_eval=tuple(last_eval) if last_eval is not None else None
        )


def staleness(update: Update, version: int) -> int:
    """τ: the updates applied to θ between the worker's read and this update's apply.

    The loop applies at ``version``, so τ = version − ``base_version``; a Hogwild! worker
    applied the update itself and measured τ on the shared apply counter. A worker's own
    earlier update is already in θ when it reads again: it is never staleness.
    """
    return update.staleness if update.staleness is not None else version - update.base_version


def _check_resume_dir(cfg: TrainConfig) -> None:
    if not (Path(cfg.resume) / "config.json").is_file():
        raise ConfigError(f"resume: {cfg.resume!r} is not a run directory (no config.json)")


RESUMABLE = (
    "total_env_steps",
    "stop_when_solved",
    "log_every",
    "eval_every",
    "eval_episodes",
    "progress",
    "track",
    "wandb_project",
    "wandb_checkpoint",
    "exp_name",
    "checkpoint_every",
    "keep_checkpoints",
)
"""Fields a resume may change (budget; logging, evaluation, progress, tracking and checkpoint
cadence): they change what is recorded and when, not the run's dynamics. A flag given with
--resume that differs from the stored config and is not listed here is refused."""


@dataclass
class ResumePlan:
    """What ``_resume_config`` decided: the config to run, the checkpoint, and the
    resumable fields that differ from the config the checkpoint was written under."""

    cfg: TrainConfig
    state: dict[str, Any]
    changed: dict[str, Any]
    stored: dict[str, Any]
    """config.json as found (rewritten with ``changed`` once the resume has started)."""


def _resume_config(cfg: TrainConfig) -> ResumePlan:
    run_dir = Path(cfg.resume)
    try:
        stored = json.loads((run_dir / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(
            f"resume: {cfg.resume!r} is not a run directory (no readable config.json)"
        ) from None
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"resume: {cfg.resume!r} already finished (it has a summary.json)")
    # config.json is untrusted input: typed and validated like the command line (train()
    # validates the result), never imported from or called before that
    stored_cfg = TrainConfig.from_dict(stored)
    try:
        _, state = checkpoint.load_latest(run_dir)
    except checkpoint.CheckpointError as exc:
        raise ConfigError(f"resume: {exc}") from None
    written = state.get("config")
    if isinstance(written, dict):  # checkpoints since issue 20 record their config
        _check_same_run(stored_cfg, written)
    changes = _flags_given_on_resume(cfg, stored_cfg, run_dir)
    resumed = stored_cfg.replace(**changes, out=str(run_dir), resume=str(run_dir))
    before = written if isinstance(written, dict) else stored_cfg.to_dict()
    changed = {k: getattr(resumed, k) for k in RESUMABLE if getattr(resumed, k) != before.get(k)}
    return ResumePlan(resumed, state, changed, stored | changes)


_NOT_COMPARED = ("out", "resume", *RESUMABLE)


def _same_value(a: object, b: object) -> bool:
    # 1 and 1.0 are one lr (config.json may hold either); True and 1 are not one setting
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _check_same_run(stored: TrainConfig, written: dict[str, Any]) -> None:
    """config.json must still describe the run the checkpoint belongs to."""
    for f in dataclasses.fields(TrainConfig):
        if f.name in _NOT_COMPARED or f.name not in written:
            continue
        now, then = getattr(stored, f.name), written[f.name]
        if not _same_value(now, then):
            raise ConfigError(
                f"{f.name}: config.json has {now!r} but the checkpoint was written with "
                f"{then!r}; a resume continues the same run: restore config.json or start a "
                "new run"
            )


def _flags_given_on_resume(
    given: TrainConfig, stored: TrainConfig, run_dir: Path
) -> dict[str, Any]:
    """The resumable fields the caller changed; any other change is refused.

    A field counts as given when it differs from TrainConfig's default (as with
    hybrid/defaults.py, a flag set to exactly the default cannot be told apart)."""
    if given.out and Path(given.out).resolve() != run_dir.resolve():
        raise ConfigError(
            f"out: a resume writes to the run directory it continues ({str(run_dir)!r}); "
            "leave out unset"
        )
    defaults = TrainConfig()
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("out", "resume"):
            continue
        value, default = getattr(given, f.name), getattr(defaults, f.name)
        if _same_value(value, default):
            continue  # not given
        if _same_value(value, getattr(stored, f.name)):
            continue  # given as stored: nothing changes
        if f.name not in RESUMABLE:
            raise ConfigError(
                f"{f.name}: cannot change on resume (the run has {getattr(stored, f.name)!r}, "
                f"given {value!r}); only {', '.join(RESUMABLE)} may change"
            )
        changes[f.name] = value
    return changes


def _check_checkpoint_fits(state: dict[str, Any], training: Training) -> None:
    """Shapes first, with one line each: a config.json edited under an older checkpoint
    (which does not record its config) would otherwise fail deep in load_state_dict."""
    params = state.get("global_model", {}).get("params")
    numel = training.global_model.params.numel()
    if not isinstance(params, torch.Tensor) or params.numel() != numel:
        held = params.numel() if isinstance(params, torch.Tensor) else "no"
        raise ConfigError(
            f"resume: the checkpoint holds {held} parameters but config.json's model has "
            f"{numel} (env, hidden, layers, head, algo, ... were edited?); restore config.json"
        )
    runtime_state = state.get("runtime") or {}
    for key in ("workers", "incarnations"):
        saved = runtime_state.get(key)
        if not isinstance(saved, list):
            continue
        expected = (
            len(training.runtime.workers)  # type: ignore[attr-defined]
            if key == "workers" and hasattr(training.runtime, "workers")
            else training.cfg.workers
        )
        if len(saved) != expected:
            raise ConfigError(
                f"resume: the checkpoint holds {len(saved)} workers but config.json runs "
                f"{expected} (workers or clients were edited?); restore config.json"
            )


def make_task(kind: type[Task], cfg: TrainConfig) -> Task:
    """The task a scheduler's ``task_kind`` asks for, with its settings from the config."""
    if kind is TrainLocally:
        return TrainLocally(
            steps=cfg.local_steps,
            optimizer=cfg.local_optimizer,
            lr=cfg.local_lr,
            prox_mu=cfg.prox_mu,
            deadline_s=cfg.round_deadline_s,
        )
    return kind(deadline_s=cfg.round_deadline_s)


def learner_device(cfg: TrainConfig, info: EnvInfo, scheduler: Any) -> torch.device:
    """Where θ, the server optimizer and the learner run (``--device``).

    ``auto`` is cuda when torch finds a GPU, except where θ must stay in CPU memory: under
    Hogwild! (processes, lock-free, a scheduler whose updates apply alone, no codec: the
    rule ``runtimes._processes`` applies), workers step θ in shared memory; multi-agent
    learners run on CPU. There ``cuda`` is refused in one line.
    """
    hogwild = (
        cfg.runtime == "processes"
        and cfg.lock_free
        and scheduler.applies_alone
        and cfg.codec == "none"
    )
    why = (
        "Hogwild! workers step θ in shared CPU memory (use --no-lock-free to keep cuda)"
        if hogwild
        else "multi-agent learners run on CPU"
        if info.multiagent
        else ""
    )
    if why and cfg.device == "cuda":
        raise ConfigError(f"device: cuda: {why}; use --device cpu or auto")
    return torch.device("cpu") if why else resolve_device(cfg.device)


def make_learner(cfg: TrainConfig, info: EnvInfo, task_kind: type[Task]) -> Learner:
    if task_kind is CollectExperience:
        return ALGORITHMS[cfg.algo].learner(algo_settings(cfg), info)
    return Learner()


def check_head(cfg: TrainConfig, info: EnvInfo) -> None:
    if cfg.head == "categorical" and info.continuous:
        raise ConfigError(
            f"head: 'categorical' does not fit {cfg.env}'s continuous (Box) action space; "
            "use gaussian or auto"
        )
    if cfg.head == "gaussian" and not info.continuous:
        raise ConfigError(
            f"head: 'gaussian' does not fit {cfg.env}'s Discrete action space; "
            "use categorical or auto"
        )


def check_config(cfg: TrainConfig) -> EnvInfo:
    """Everything ``train`` checks before it writes or starts anything: the fields, the env
    (and its wrappers), the head, and whether the run fits in this machine's memory."""
    cfg.validate()
    info = describe(cfg.env, env_settings(cfg))
    check_head(cfg, info)
    check_resources(cfg, info)
    return info


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a large machine
        return 2**40


def check_resources(cfg: TrainConfig, info: EnvInfo, memory: int | None = None) -> None:
    """Refuse a run whose buffers or networks cannot fit in memory, with the estimate.

    Rough lower bounds, not a budget: the run also needs torch, the envs and the logs."""
    memory = _memory_bytes() if memory is None else memory
    gib = 2**30
    obs_bytes = info.obs_dim * (1 if info.obs_dtype == "uint8" else 4)
    # every worker of the serial runtime (and every parallel one) holds one rollout;
    # per step: an observation, action, reward, done, value, log-probability
    per_step = obs_bytes + 4 * (max(info.action_dim, 1) + 5)
    rollouts = cfg.workers * cfg.envs_per_worker * cfg.rollout_steps * per_step
    if cfg.scheduler == "hybrid":  # the learner's batch as well
        rollouts += cfg.learner_batch * cfg.envs_per_worker * cfg.rollout_steps * per_step
    if rollouts > memory:
        raise ConfigError(
            f"rollout_steps: {cfg.workers} workers x {cfg.envs_per_worker} envs x "
            f"{cfg.rollout_steps} steps need ~{rollouts / gib:,.1f} GiB of rollout buffers, "
            f"more than this machine's {memory / gib:,.1f} GiB; lower rollout_steps, "
            "envs_per_worker or workers"
        )
    width = cfg.hidden
    trunk = info.obs_dim * width + max(cfg.layers - 1, 0) * width * width
    if cfg.layers == 0:
        trunk = info.obs_dim
    params = 2 * (trunk + width * (info.action_dim + 1))  # actor and critic
    # parameters, gradients and two optimizer statistics for the global model and each
    # worker's copy
    model = 4 * 4 * params * (cfg.workers + 1)
    if model > memory:
        raise ConfigError(
            f"hidden: {cfg.layers} layers of {cfg.hidden} units are ~{params:,} parameters, "
            f"~{model / gib:,.1f} GiB for the global model and {cfg.workers} workers' copies, "
            f"more than this machine's {memory / gib:,.1f} GiB; lower hidden, layers or workers"
        )
    if cfg.scheduler == "hybrid" and cfg.algo == "nstep_q":
        replay = cfg.replay_capacity * (2 * obs_bytes + 4 * 4)  # obs, next obs, a, r, done, p
        if replay > memory:
            raise ConfigError(
                f"replay_capacity: {cfg.replay_capacity:,} transitions need "
                f"~{replay / gib:,.1f} GiB, more than this machine's {memory / gib:,.1f} GiB"
            )


def prepare_run_dir(cfg: TrainConfig) -> Path:
    if cfg.out:
        run_dir = Path(cfg.out)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        env, scheduler = cfg.env.replace("/", "_"), short_name(cfg.scheduler)
        run_dir = Path("runs") / f"{env}-{scheduler}-s{cfg.seed}-{stamp}"
    try:
        taken = run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir()))
    except OSError as exc:
        raise ConfigError(f"out: cannot read {str(run_dir)!r} ({_os_reason(exc)})") from None
    if taken:
        raise ConfigError(f"out: {str(run_dir)!r} already exists and is not empty; choose another")
    return run_dir


def create_run_dir(run_dir: Path) -> list[Path]:
    """Create ``run_dir`` (and missing parents) and prove it writable, before any worker
    starts; returns the folders it created, outermost first, for ``remove_run_dir``."""
    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()][::-1]
    created: list[Path] = []
    try:
        for folder in missing:
            folder.mkdir()
            created.append(folder)
        # the probe: a file must be creatable here (read-only mounts, immutable folders,
        # permissions); the run directory must be a directory (not under a file)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as exc:
        remove_run_dir(run_dir, created)
        raise ConfigError(
            f"out: cannot write a run directory at {str(run_dir)!r} ({_os_reason(exc)}); "
            "choose a writable folder"
        ) from None
    return created


def remove_run_dir(run_dir: Path, created: list[Path]) -> None:
    """Undo a new run directory whose start failed: what this run created, and nothing
    else (a folder that was there, empty, before the run stays, emptied)."""
    if created:
        shutil.rmtree(created[0], ignore_errors=True)
        return
    with contextlib.suppress(OSError):
        for child in run_dir.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


LOCK_NAME = "run.lock"
"""The file in a run directory that a running train or resume holds an exclusive flock on."""


@contextlib.contextmanager
def lock_run_dir(run_dir: Path, field: str) -> Iterator[None]:
    """Hold the run directory's lock for the whole run: a second train or resume of it is
    refused. The kernel drops a flock when its holder exits, crash or not, so no stale lock
    survives; the file stays (unlinking it would let two runs lock two different files)."""
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"{field}: cannot write to {str(run_dir)!r} ({_os_reason(exc)})"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError(
                f"{field}: {str(run_dir)!r} is in use by another run (it holds {LOCK_NAME}); "
                "wait for it to finish or stop it"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def initial_params(cfg: TrainConfig, info: EnvInfo) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int_seed(stream(cfg.seed, MODEL_INIT)))
        model = build_model(algo_settings(cfg), info)
    return FlatParams(model).flat.clone()


def train(
    config: TrainConfig | None = None,
    *,
    callbacks: Sequence[CallbackLike] | None = None,
    **overrides: Any,
) -> Result:
    """Train under ``config`` (fields may be overridden by keyword) and return the Result.

    Bad settings raise ConfigError before anything is written to disk. With
    ``resume=RUN_DIR`` the run continues from its newest checkpoint, under the
    config stored there. ``callbacks`` see every metrics row as it is logged and the
    summary (see ``hybrid.Callback``); they are not part of the config.
    """
    hooks = Callbacks(callbacks)  # a callback that is neither callable nor hooks: TypeError now
    cfg = (config or TrainConfig()).replace(**overrides) if overrides else (config or TrainConfig())
    with contextlib.ExitStack() as lock:
        return _train(cfg, overrides, lock, hooks)


def _train(
    cfg: TrainConfig, overrides: dict[str, Any], lock: contextlib.ExitStack, hooks: Callbacks
) -> Result:
    resume_state: dict[str, Any] | None = None
    plan: ResumePlan | None = None
    if cfg.resume:
        _check_resume_dir(cfg)
        # locked before reading anything: what a running run writes is not read half-done
        lock.enter_context(lock_run_dir(Path(cfg.resume), "resume"))
        checkpoint.remove_stale_tmp(Path(cfg.resume))
        plan = _resume_config(cfg)
        cfg, resume_state = plan.cfg, plan.state
    else:
        # hybrid/defaults.py (keyword overrides always win); config.json records the result
        cfg = apply_env_defaults(cfg, keep=overrides)
        cfg = apply_runtime_defaults(cfg, keep=overrides)
        # Every value is now the one in effect: recorded with env_defaults off, config.json
        # and Result.config rerun as they are (a value equal to a global default, such as
        # workers=8 on CartPole, is not replaced by the env's defaults a second time).
        cfg = cfg.replace(env_defaults=False)
    info = check_config(cfg)
    cfg = cfg.replace(scheduler_args=typed_scheduler_args(cfg.scheduler, cfg.scheduler_args))
    created: list[Path] = []
    if resume_state is not None:
        run_dir = Path(cfg.out)
    else:
        run_dir = prepare_run_dir(cfg)
        created = create_run_dir(run_dir)  # before any runtime starts a worker
        try:
            lock.enter_context(lock_run_dir(run_dir, "out"))
        except ConfigError:
            if created:  # else another run may be starting in the folder: leave it be
                remove_run_dir(run_dir, created)
            raise

    runtime: Runtime | None = None
    try:
        torch.set_num_threads(cfg.torch_threads)
        scheduler = make_scheduler(scheduler_settings(cfg))
        device = learner_device(cfg, info, scheduler)
        params = initial_params(cfg, info)
        global_model = build_global_model(
            server_settings(cfg), params, info.obs_stats_shape, device
        )
        scheduler.bind(global_model.view(), np.random.default_rng(stream(cfg.seed, SCHEDULER)))
        learner = make_learner(cfg, info, scheduler.task_kind).to(global_model.device)
        runtime = make_runtime(
            runtime_settings(cfg), info, global_model, scheduler, worker_pool(cfg, info)
        )
        evaluator = Evaluator(eval_settings(cfg), info, obs_stats=global_model.obs_stats)
        if resume_state is None:
            write_json_atomic(run_dir / "config.json", cfg.to_dict())
    except BaseException:
        if runtime is not None:
            runtime.close()
        if resume_state is None:
            remove_run_dir(run_dir, created)  # a start that failed leaves nothing behind
        raise
    tracker = Tracker(tracking_settings(cfg), run_dir, hooks)
    training = Training(
        cfg,
        run_dir,
        global_model,
        scheduler,
        learner,
        runtime,
        evaluator,
        tracker,
        info.reward_threshold,
    )
    summary: dict[str, Any] | None = None
    try:
        if plan is not None:
            _check_checkpoint_fits(plan.state, training)
            training.restore(plan.state, plan.changed)
            if plan.changed:  # config.json records the values in effect
                write_json_atomic(run_dir / "config.json", plan.stored)
        with _stop_on_signals(training):
            summary = training.run()
        write_json_atomic(run_dir / "summary.json", summary)
    finally:
        runtime.close()
        evaluator.close()
        artifact = training.last_checkpoint if cfg.wandb_checkpoint and summary else None
        tracker.close(summary, artifact)
    return Result(
        run_dir=run_dir, config=cfg, summary=summary, params=global_model.params.cpu().clone()
    )


@contextlib.contextmanager
def _stop_on_signals(training: Training) -> Iterator[None]:
    """SIGINT / SIGTERM ask the loop to checkpoint and stop at the next iteration."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def request_stop(signum: int, frame: Any) -> None:
        if training.stop_signal is None:
            training.stop_signal = signum
        elif training.writing_checkpoint:  # a second signal: stop once the file is whole
            training.deferred_signal = signum
        else:  # a second signal: stop now
            raise Interrupted(signum, training.last_checkpoint)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = [
    "LOCK_NAME",
    "Diverged",
    "Interrupted",
    "Result",
    "Training",
    "check_config",
    "params_sha256",
    "train",
]
