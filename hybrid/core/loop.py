"""The one loop: ``Training.run``, with the state that makes it checkpointable and resumable.

Every scheduler, runtime and algorithm runs through ``Training.run``; nothing
else owns control flow. ``train()``, which builds the parts and the run directory around
it, is in ``hybrid/trainer.py``.
"""

from __future__ import annotations

import dataclasses
import signal
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybrid import checkpoint
from hybrid.checkpoint import from_plain, to_plain, update_from_state, update_to_state
from hybrid.codecs import Codec, PayloadError
from hybrid.core.appliers import Applier
from hybrid.core.global_model import GlobalModel, all_finite, params_sha256
from hybrid.core.learner import Learner
from hybrid.core.scheduler_checks import check_ready, check_verdict
from hybrid.errors import ConfigError
from hybrid.evaluation import Evaluator
from hybrid.protocol import Payload, Snapshot, Task, Update
from hybrid.replicas import ReplicaApplier, mixing_event
from hybrid.runtimes import Runtime
from hybrid.schedulers import Guarded, MixingStep, ReplicaScheduler, Scheduler, Verdict
from hybrid.tracking import Tracker


@dataclass(frozen=True)
class LoopSettings:
    """What the loop itself is set by: the budget and the cadences (``assembly.loop_settings``
    fills them from the config). The parts it drives come ready-built."""

    total_env_steps: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    """Versions between checkpoints; 0: none."""
    keep_checkpoints: int
    checkpoint_replay: bool
    stop_when_solved: bool
    config: dict[str, Any] = field(default_factory=dict)
    """The run's config as config.json records it: each checkpoint carries it, so that a
    resume can check config.json against the run it continues."""


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

    def __init__(self, codec: Codec, numel: int) -> None:
        self.numel = numel
        self.codec = codec

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
    task_settings: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The task settings a scheduler chose for each worker with a task in flight (``ready``
    returned ``(worker id, settings)``): recorded on its update when it arrives."""


class Training:
    """The one loop, with the state that makes it checkpointable and resumable."""

    MAX_NONFINITE_STREAK = 100  # that many non-finite updates in a row: the run diverged

    def __init__(
        self,
        settings: LoopSettings,
        run_dir: Path,
        global_model: GlobalModel,
        scheduler: Scheduler,
        learner: Learner,
        runtime: Runtime,
        evaluator: Evaluator,
        tracker: Tracker,
        threshold: float | None,
        *,
        task: Task,
        codec: Codec,
    ) -> None:
        """``task``: what every dispatched snapshot asks of its workers (of the scheduler's
        ``task_kind``); ``codec``: decodes what workers send."""
        self.settings = settings
        self.run_dir = run_dir
        self.global_model = global_model
        self.scheduler = scheduler
        self.learner = learner
        self.runtime = runtime
        # Who writes θ is the runtime's choice (Hogwild!: its workers); a decentralized
        # scheduler's workers each step a replica of their own: in shared memory where the
        # runtime's workers share them (processes); on ray the actors hold them and the
        # runtime supplies the applier.
        self.applier: Applier = (
            runtime.replica_applier(global_model, scheduler.push_sum)
            or ReplicaApplier(
                global_model, scheduler.workers, runtime.replica_exchange(), scheduler.pair_lock
            )
            if isinstance(scheduler, ReplicaScheduler)
            else runtime.applier
        )
        self.evaluator = evaluator
        self.tracker = tracker
        self.threshold = threshold
        self.task = task
        self.receiver = Receiver(codec, global_model.params.numel())
        self.state = LoopState(
            RunStats(),
            settings.log_every,
            settings.eval_every,
            settings.checkpoint_every or 2**62,
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
        if isinstance(self.applier, ReplicaApplier):
            self.applier.gather(self.global_model)  # θ̄, where the replicas live elsewhere
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
        settings, st, stats = self.settings, self.state, self.state.stats
        global_model, scheduler, runtime = self.global_model, self.scheduler, self.runtime
        while stats.env_steps < settings.total_env_steps:
            if self.stop_signal is not None:
                self.settle()
                raise Interrupted(self.stop_signal, self.checkpoint())
            idle = runtime.idle_workers()
            starting = scheduler.ready(idle, global_model.version)
            check_ready(scheduler, starting, idle)  # a user's ready() may return anything
            if not starting and scheduler.finished():
                break  # it starts no more tasks, e.g. its privacy budget is spent
            if starting:
                progress = stats.env_steps / settings.total_env_steps
                # a worker is named by its id, or as (id, its task settings)
                entries = {(e[0] if isinstance(e, tuple) else e): e for e in starting}
                # one snapshot for all tasks started together (one per replica when the
                # workers train replicas), then grouped by the task settings ready() chose
                for ids, snapshot in self.applier.snapshots(
                    global_model, self.task, progress, list(entries)
                ):
                    group = [entries[w] for w in ids]
                    for worker_ids, group_snapshot in self.task_groups(group, snapshot):
                        if len(worker_ids) > 1:  # tasks on one snapshot may batch
                            runtime.dispatch_group(worker_ids, group_snapshot)
                        else:
                            runtime.dispatch(worker_ids[0], group_snapshot)
                    stats.bytes_down += len(ids) * snapshot.params.numel() * 4
            update = runtime.next_update()
            if update.overdue:
                # A real runtime stopped waiting at the task's deadline while the worker
                # computes on: the scheduler learns the task is late (cost_s > deadline_s) as
                # on the virtual clock and closes its round without it. Nothing arrived, so
                # nothing is checked or counted; the result, when it comes, is an update.
                check_verdict(
                    scheduler, scheduler.admit(update, staleness(update, global_model.version))
                )
            else:
                if st.task_settings:
                    update.task_settings = st.task_settings.pop(update.worker_id, None)
                global_model.observe(update)  # e.g. observation statistics, whatever the verdict
                rejection = self.receiver.receive(update)
                if rejection is None:
                    # what τ would be if it were applied now: the scheduler's admission input
                    verdict = scheduler.admit(update, staleness(update, global_model.version))
                    check_verdict(scheduler, verdict)
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
                progress = stats.env_steps / settings.total_env_steps
                for direction in self.learner.steps(step, global_model, progress):
                    stats.window_grad_norms.append(
                        self.applier.apply(global_model, direction, progress)
                    )
                if isinstance(step, MixingStep) and isinstance(self.applier, ReplicaApplier):
                    self.record_mix(step)
                self.check_finite(applied=True)
            elif st.nonfinite_streak:
                self.check_finite(applied=False)

            if stats.env_steps >= st.next_log:
                st.next_log += settings.log_every
                staleness_window = list(stats.window_staleness)
                train_row = (
                    self.row("train")
                    | stats.drain_window()
                    | self.learner.metrics()
                    | runtime.metrics()
                    | scheduler.metrics()
                    | self.applier.metrics()
                )
                train_row["perf/env_steps_per_s"] = stats.env_steps / max(train_row["wall_s"], 1e-9)
                self.tracker.log(train_row, {"sched/staleness": staleness_window})
            if stats.env_steps >= st.next_eval:
                st.next_eval += settings.eval_every
                self.evaluate()
                if st.solved_at is not None and settings.stop_when_solved:
                    break
            if global_model.version >= st.next_checkpoint:
                while st.next_checkpoint <= global_model.version:
                    st.next_checkpoint += settings.checkpoint_every
                self.checkpoint()

        train_wall_s = self.train_s()
        self.settle()  # from here on, the global model is what the summary describes
        if st.last_eval is None or st.last_eval[0] != stats.env_steps:
            self.evaluate()
        assert st.last_eval is not None
        if settings.checkpoint_every:
            self.checkpoint()
        return self.summary(train_wall_s)

    def settle(self) -> None:
        """The runtime settles; a decentralized run's global model is then the average of
        the replicas as its workers left them."""
        self.runtime.settle()
        if isinstance(self.applier, ReplicaApplier):
            self.applier.refresh(self.global_model)

    def record_mix(self, step: MixingStep) -> None:
        """One line of the exchanges' timeline, at the arrival of the step's last update."""
        if step.mixing is None:
            return
        assert isinstance(self.applier, ReplicaApplier)
        when = max((float(u.finished_s) for u in step.updates), default=None)
        if when is None:
            virtual = self.runtime.virtual_time()
            when = virtual if virtual is not None else self.train_s()
        self.tracker.mixing(mixing_event(step, self.applier.mixes, when))

    def task_groups(
        self, starting: Sequence[int | tuple[int, Mapping[str, Any]]], snapshot: Snapshot
    ) -> list[tuple[list[int], Snapshot]]:
        """The workers ``ready`` started, grouped by the task they run: ``snapshot`` for those
        named by id alone, and for those named with settings (``(worker id, {"steps": 20})``,
        as Flower's ``configure_fit`` configures each client) the snapshot with those fields
        of its task replaced. Groups keep the order of their first worker."""
        if not any(isinstance(entry, tuple) for entry in starting):
            return [(list(starting), snapshot)]  # every task as the run's config sets it
        groups: dict[tuple[tuple[str, Any], ...], tuple[list[int], Snapshot]] = {}
        for entry in starting:
            worker_id, task_settings = entry if isinstance(entry, tuple) else (entry, {})
            key = tuple(sorted(task_settings.items()))
            if key not in groups:
                task = self._task_with(snapshot.task, task_settings)
                groups[key] = ([], dataclasses.replace(snapshot, task=task))
            groups[key][0].append(int(worker_id))
            if task_settings:
                self.state.task_settings[int(worker_id)] = dict(task_settings)
            else:
                self.state.task_settings.pop(int(worker_id), None)
        return list(groups.values())

    def scheduler_name(self) -> str:
        """The scheduler's class name (a user's scheduler runs wrapped in a guard)."""
        scheduler = self.scheduler
        return type(scheduler.inner if isinstance(scheduler, Guarded) else scheduler).__name__

    def _task_with(self, task: Task, task_settings: Mapping[str, Any]) -> Task:
        """``task`` with ``task_settings`` in place of its fields; a setting the task does not
        have, or of another type, is the scheduler's mistake: said in one line."""
        fields = {f.name: f for f in dataclasses.fields(task)}
        for name, value in task_settings.items():
            if name not in fields:
                raise ValueError(
                    f"{self.scheduler_name()}.ready: {type(task).__name__} has no "
                    f"setting {name!r}; its settings are {', '.join(fields)}"
                )
            default = getattr(task, name)
            allowed = (int, float) if isinstance(default, float) else (type(default),)
            if isinstance(value, bool) != isinstance(default, bool) or not isinstance(
                value, allowed
            ):
                raise ValueError(
                    f"{self.scheduler_name()}.ready: {name}={value!r} is not a "
                    f"{type(default).__name__}"
                )
        try:
            return dataclasses.replace(task, **task_settings) if task_settings else task
        except ValueError as exc:  # a value the task refuses (rollout_steps=-1)
            raise ValueError(f"{self.scheduler_name()}.ready: {exc}") from None

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
        what = (
            "the parameters are not finite"
            if not finite
            else f"{st.nonfinite_streak} updates in a row were not finite"
        )
        raise Diverged(
            f"diverged at {st.stats.env_steps:,} env steps (version {self.global_model.version}):"
            f" {what}; lower --lr or clip with --max-grad-norm{where}"
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
            # a measured machine's hash and validation errors (serial runtime on a profile)
            **self.runtime.summary_fields(),
            "final_params_sha256": global_model.sha256(),
            **{
                name.removeprefix("sched/").removeprefix("decentral/"): value
                for name, value in (self.scheduler.metrics() | self.applier.metrics()).items()
            },
            "evaluated_model": "mean of the replicas"
            if isinstance(self.scheduler, ReplicaScheduler)
            else "global",
            **self.evaluator.final_metrics(global_model.params),  # e.g. per-client fairness
            **self._replica_summary(),
        }

    def _replica_summary(self) -> dict[str, Any]:
        """A decentralized run's who-sent-to-whom counts, and each replica's mean evaluation
        return when its scheduler asks."""
        scheduler, applier = self.scheduler, self.applier
        if not isinstance(scheduler, ReplicaScheduler) or not isinstance(applier, ReplicaApplier):
            return {}
        summary: dict[str, Any] = {"messages_sent": applier.messages.tolist()}
        if scheduler.evaluate_replicas:
            returns = [self.evaluator.evaluate(row) for row in applier.replica_params()]
            summary["replica_eval_returns"] = [float(r.mean()) for r in returns]
        return summary

    # --- checkpoints ---------------------------------------------------------------------------

    def checkpoint(self) -> Path:
        """Write everything a resume needs, atomically; returns the file."""
        started = time.perf_counter()
        if isinstance(self.applier, ReplicaApplier):
            self.applier.gather(self.global_model)  # θ̄ and every replica, wherever they live
        state = {
            "format": 1,
            "config": self.settings.config,  # a resume checks config.json against it
            "global_model": self.global_model.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scheduler_rng": self.scheduler.rng.bit_generator.state,
            "scheduler_buffer": [(update_to_state(u), s) for u, s in self.scheduler.buffer],
            "learner": self.learner.state_dict(with_replay=self.settings.checkpoint_replay),
            "runtime": self.runtime.state_dict(),
            "applier": self.applier.state_dict(),
            "loop": self._loop_state(),
            "logs": self.tracker.offsets(),
        }
        # A signal that would stop the run now waits for the write (see _stop_on_signals):
        # raised inside torch.save it left a torn file and a traceback.
        self.writing_checkpoint = True
        try:
            path = checkpoint.save(
                self.run_dir,
                self.global_model.version,
                to_plain(state),
                self.settings.keep_checkpoints,
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
        try:
            # the file's structures are checked before anything is restored from them; a
            # hostile or damaged file is refused in one line naming the first wrong value
            # (checkpoint.load_latest checked the parts every run writes)
            state = from_plain(state)
            loop_state = loop_state_from_checkpoint(state["loop"])
            buffer = [
                (
                    update_from_state(u, f"scheduler_buffer[{i}][0]"),
                    checkpoint.count(s, f"scheduler_buffer[{i}][1]"),
                )
                for i, (u, s) in enumerate(state["scheduler_buffer"])
            ]
        except checkpoint.CheckpointError as exc:
            raise ConfigError(f"resume: the checkpoint's {exc}") from None
        try:
            self._restore(state)
        except checkpoint.CheckpointError as exc:  # a component's check of its own state
            raise ConfigError(f"resume: the checkpoint's {exc}") from None
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
            # the components' own states: one that does not fit them (an edited config.json)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"resume: the checkpoint does not fit config.json ({first[:160]}); "
                "restore config.json"
            ) from None
        self.scheduler.buffer = buffer
        self.state = loop_state
        try:
            # not under the catch above: a parallel runtime restarts its workers here, and
            # their failures are the runtime's, not the config's (the worker count was
            # checked before); a runtime or log state that is damaged is still one line
            if state["runtime"]:
                self.runtime.load_state_dict(state["runtime"])
            self.tracker.truncate(state["logs"])
        except checkpoint.CheckpointError as exc:
            raise ConfigError(f"resume: the checkpoint's {exc}") from None
        st, settings = self.state, self.settings
        changed = changed or {}
        if "log_every" in changed:
            st.next_log = st.stats.env_steps + settings.log_every
        if "eval_every" in changed:
            st.next_eval = st.stats.env_steps + settings.eval_every
        if "checkpoint_every" in changed or not settings.checkpoint_every:
            # 0 turns checkpoints off; the loop's cadence must never add 0
            st.next_checkpoint = (
                self.global_model.version + settings.checkpoint_every
                if settings.checkpoint_every
                else 2**62
            )

    def _restore(self, state: dict[str, Any]) -> None:
        saved = state["global_model"]
        # torch's load_state_dict takes an optimizer state that does not fit (a moment
        # missing restarts from zero): it is checked against the optimizer first
        version = checkpoint.count(saved["version"], "global_model.version")
        checkpoint.check_optimizer_state(
            saved["optimizer"],
            self.global_model.optimizer,
            "global_model.optimizer",
            self.applier.optimizer_steps(version),
        )
        self.global_model.load_state_dict(saved)
        self.scheduler.load_state_dict(state["scheduler"])
        if "scheduler_rng" in state:  # checkpoints from before the scheduler had one
            checkpoint.set_generator_state(
                self.scheduler.rng.bit_generator, state["scheduler_rng"], "scheduler_rng"
            )
        self.learner.load_state_dict(state["learner"])
        self.applier.load_state_dict(state.get("applier", {}))


def loop_state_from_checkpoint(loop: dict[str, Any]) -> LoopState:
    """The loop's counters as a checkpoint holds them (``Training._loop_state``), checked.

    Counts are whole numbers from 0 to 2**62, seconds finite and ≥ 0, windows lists of
    numbers. Every field is required (each checkpoint format has written them all), except
    ``task_settings``, which older checkpoints lack: a counter that went missing would
    silently start again from zero."""
    check = checkpoint
    unknown = sorted(str(k) for k in loop if k not in LOOP_STATE_FIELDS)
    if unknown:
        raise check.CheckpointError(f"loop: holds {', '.join(unknown)[:80]}, not a loop counter")
    raw = check.table(check.entry(loop, "stats", "loop"), "loop.stats")
    unknown = sorted(str(k) for k in raw if k not in RUN_STATS_FIELDS)
    if unknown:
        raise check.CheckpointError(f"loop.stats: holds {', '.join(unknown)[:80]}, not a counter")

    def stat(name: str) -> Any:
        return check.entry(raw, name, "loop.stats")

    def numbers(name: str) -> list[float]:  # what episodes and losses were: nan is data
        return check.reals(stat(name), f"loop.stats.{name}", finite=False)

    rejected = check.table(stat("rejected"), "loop.stats.rejected")
    histogram = check.table(stat("staleness"), "loop.stats.staleness")
    losses = check.table(stat("window_losses"), "loop.stats.window_losses")
    stats = RunStats(
        **{
            name: check.count(stat(name), f"loop.stats.{name}")
            for name in ("env_steps", "received", "dropped", "bytes_up", "bytes_down")
        },
        rejected=Counter(
            {str(k): check.count(v, f"loop.stats.rejected.{k}") for k, v in rejected.items()}
        ),
        staleness=Counter(
            {
                check.count(k, "loop.stats.staleness (a staleness)"): check.count(
                    v, f"loop.stats.staleness.{k}"
                )
                for k, v in histogram.items()
            }
        ),
        window_returns=numbers("window_returns"),
        window_lengths=check.counts(stat("window_lengths"), "loop.stats.window_lengths"),
        window_losses={
            str(name): check.reals(values, f"loop.stats.window_losses.{name}", finite=False)
            for name, values in losses.items()
        },
        window_staleness=check.counts(stat("window_staleness"), "loop.stats.window_staleness"),
        window_grad_norms=numbers("window_grad_norms"),
    )

    def field(name: str) -> Any:
        return check.entry(loop, name, "loop")

    last_eval = field("last_eval")
    if last_eval is not None:
        env_steps, mean_return = check.items(last_eval, "loop.last_eval", length=2)
        last_eval = (
            check.count(env_steps, "loop.last_eval[0]"),
            check.real(mean_return, "loop.last_eval[1]", finite=False),
        )
    solved_at = field("solved_at")
    task_settings = check.table(loop.get("task_settings", {}), "loop.task_settings")
    return LoopState(
        stats,
        **{
            name: check.count(field(name), f"loop.{name}")
            for name in ("next_log", "next_eval", "next_checkpoint", "nonfinite_streak")
        },
        solved_at=None if solved_at is None else check.count(solved_at, "loop.solved_at"),
        last_eval=last_eval,
        train_s_before=check.real(field("train_s_before"), "loop.train_s_before", 0.0),
        task_settings={
            check.count(w, "loop.task_settings (a worker id)"): check.table(
                s, f"loop.task_settings.{w}"
            )
            for w, s in task_settings.items()
        },
    )


LOOP_STATE_FIELDS = {f.name for f in dataclasses.fields(LoopState)}
RUN_STATS_FIELDS = {f.name for f in dataclasses.fields(RunStats)}


def staleness(update: Update, version: int) -> int:
    """τ: the updates applied to θ between the worker's read and this update's apply.

    The loop applies at ``version``, so τ = version − ``base_version``; a Hogwild! worker
    applied the update itself and measured τ on the shared apply counter. A worker's own
    earlier update is already in θ when it reads again: it is never staleness.
    """
    return update.staleness if update.staleness is not None else version - update.base_version


__all__ = [
    "Diverged",
    "Interrupted",
    "LoopSettings",
    "Training",
    "params_sha256",
]
