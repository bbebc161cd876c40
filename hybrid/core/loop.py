"""The one loop, and ``train``: build the components, run the loop, write the run directory.

Every scheduler, runtime and algorithm runs through ``run_loop``; nothing
else owns control flow.
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid.algorithms import ALGORITHMS
from hybrid.codecs import PayloadError, make_codec
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.global_model import GlobalModel, params_sha256
from hybrid.core.learner import Learner
from hybrid.core.update import Update
from hybrid.core.worker import build_model
from hybrid.envs import EnvInfo, describe
from hybrid.evaluation import Evaluator
from hybrid.nets import FlatParams
from hybrid.runtimes import Runtime, make_runtime
from hybrid.schedulers import Scheduler, Verdict, make_scheduler
from hybrid.seeding import MODEL_INIT, int_seed, stream
from hybrid.tracking import Tracker, write_json_atomic


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

    def record(self, update: Update, staleness: int, verdict: Verdict) -> None:
        self.env_steps += update.env_steps
        self.received += 1
        self.bytes_up += update.nbytes
        self.window_returns += update.episode_returns
        self.window_lengths += update.episode_lengths
        for name, value in update.stats.items():
            self.window_losses.setdefault(name, []).append(value)
        if verdict is Verdict.DROP:
            self.dropped += 1
        else:
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
        if update.kind == "trajectory":
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
        if not torch.isfinite(update.payload).all():
            return "nonfinite"
        return None


class WallClock:
    """Training wall time, with evaluation excluded."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.excluded = 0.0

    def train_s(self) -> float:
        return time.perf_counter() - self.start - self.excluded


def run_loop(
    cfg: TrainConfig,
    global_model: GlobalModel,
    scheduler: Scheduler,
    learner: Learner,
    runtime: Runtime,
    evaluator: Evaluator,
    tracker: Tracker,
    threshold: float | None,
) -> dict[str, Any]:
    stats = RunStats()
    clock = WallClock()
    receiver = Receiver(cfg, global_model.params.numel())
    next_log, next_eval = cfg.log_every, cfg.eval_every
    solved_at: int | None = None
    last_eval: tuple[int, float] | None = None

    def row(kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "env_steps": stats.env_steps,
            "updates": global_model.version,
            "wall_s": clock.train_s(),
            "virtual_s": runtime.virtual_time(),
        }

    def evaluate() -> float:
        nonlocal solved_at, last_eval
        started = time.perf_counter()
        returns = evaluator.evaluate(global_model.params)
        mean = float(returns.mean())
        last_eval = (stats.env_steps, mean)
        if threshold is not None and mean >= threshold and solved_at is None:
            solved_at = stats.env_steps
        eval_row = row("eval") | {"eval/return_mean": mean, "eval/return_std": float(returns.std())}
        tracker.log(eval_row)
        tracker.console.update(stats.env_steps, f"eval {mean:.1f}", force=True)
        clock.excluded += time.perf_counter() - started
        return mean

    while stats.env_steps < cfg.total_env_steps:
        starting = scheduler.ready(runtime.idle_workers(), global_model.version)
        if starting:
            # shared by all tasks started together
            snapshot = global_model.snapshot(task=scheduler.payload_kind)
            for worker_id in starting:
                runtime.dispatch(worker_id, snapshot)
            stats.bytes_down += len(starting) * snapshot.params.numel() * 4
        update = runtime.next_update()
        staleness = global_model.version - update.base_version
        rejection = receiver.receive(update)
        if rejection is None:
            verdict = scheduler.admit(update, staleness)
        else:
            stats.rejected[rejection] += 1
            verdict = scheduler.reject(update)
        stats.record(update, staleness, verdict)
        tracker.span(update, staleness, verdict)
        if scheduler.full() and (step := scheduler.combine()) is not None:
            progress = stats.env_steps / cfg.total_env_steps
            for direction in learner.steps(step, global_model, progress):
                stats.window_grad_norms.append(global_model.apply(direction, progress))

        if stats.env_steps >= next_log:
            next_log += cfg.log_every
            train_row = row("train") | stats.drain_window() | learner.metrics() | runtime.metrics()
            train_row["perf/env_steps_per_s"] = stats.env_steps / max(train_row["wall_s"], 1e-9)
            tracker.log(train_row)
            tracker.console.update(stats.env_steps, _status(train_row, last_eval))
        if stats.env_steps >= next_eval:
            next_eval += cfg.eval_every
            evaluate()
            if solved_at is not None and cfg.stop_when_solved:
                break

    train_wall_s = clock.train_s()
    if last_eval is None or last_eval[0] != stats.env_steps:
        evaluate()
    assert last_eval is not None
    return {
        "solved": solved_at is not None,
        "env_steps_to_solve": solved_at,
        "reward_threshold": threshold,
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
        "final_eval_return": last_eval[1],
        "virtual_time_s": runtime.virtual_time(),
        "final_params_sha256": global_model.sha256(),
    }


def _status(train_row: dict[str, Any], last_eval: tuple[int, float] | None) -> str:
    parts = [f"{train_row['perf/env_steps_per_s']:,.0f} steps/s"]
    if "charts/episode_return" in train_row:
        parts.append(f"return {train_row['charts/episode_return']:.1f}")
    if last_eval is not None:
        parts.append(f"eval {last_eval[1]:.1f}")
    return " | ".join(parts)


def make_learner(cfg: TrainConfig, info: EnvInfo, payload_kind: str) -> Learner:
    if payload_kind == "trajectory":
        return ALGORITHMS[cfg.algo].learner(cfg, info)
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


def prepare_run_dir(cfg: TrainConfig) -> Path:
    if cfg.out:
        run_dir = Path(cfg.out)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        run_dir = Path("runs") / f"{cfg.env}-{cfg.scheduler}-s{cfg.seed}-{stamp}"
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise ConfigError(f"out: {str(run_dir)!r} already exists and is not empty; choose another")
    return run_dir


def initial_params(cfg: TrainConfig, info: EnvInfo) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int_seed(stream(cfg.seed, MODEL_INIT)))
        model = build_model(cfg, info)
    return FlatParams(model).flat.clone()


def train(config: TrainConfig | None = None, **overrides: Any) -> Result:
    """Train under ``config`` (fields may be overridden by keyword) and return the Result.

    Bad settings raise ConfigError before anything is written to disk.
    """
    cfg = (config or TrainConfig()).replace(**overrides) if overrides else (config or TrainConfig())
    cfg.validate()
    info = describe(cfg.env)
    check_head(cfg, info)
    run_dir = prepare_run_dir(cfg)

    torch.set_num_threads(cfg.torch_threads)
    global_model = GlobalModel(
        initial_params(cfg, info),
        optimizer=cfg.optimizer,
        lr=cfg.lr,
        max_grad_norm=cfg.max_grad_norm,
        lr_schedule=cfg.lr_schedule,
        adam_eps=cfg.adam_eps,
        rmsprop_alpha=cfg.rmsprop_alpha,
        target_every=cfg.target_every if cfg.algo == "nstep_q" else 0,
    )
    scheduler = make_scheduler(cfg)
    learner = make_learner(cfg, info, scheduler.payload_kind)
    runtime = make_runtime(cfg, info)
    evaluator = Evaluator(cfg, info)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "config.json", cfg.to_dict())
    tracker = Tracker(cfg, run_dir)
    summary: dict[str, Any] | None = None
    try:
        summary = run_loop(
            cfg,
            global_model,
            scheduler,
            learner,
            runtime,
            evaluator,
            tracker,
            info.reward_threshold,
        )
        write_json_atomic(run_dir / "summary.json", summary)
    finally:
        runtime.close()
        evaluator.close()
        tracker.close(summary)
    return Result(run_dir=run_dir, config=cfg, summary=summary, params=global_model.params.clone())


__all__ = ["Result", "params_sha256", "run_loop", "train"]
