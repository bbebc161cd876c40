"""``train``: build the components, run the loop, write the run directory.

``train`` is where the flat ``TrainConfig`` ends: it checks it, then builds each component
from its own settings, made by ``hybrid/assembly.py``, and runs ``Training`` (the one loop,
``hybrid/core/loop.py``). Resume, the run directory and its lock, stop signals, resource
checks, the device choice and the initial parameters live here, beside the assembly.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
    loop_settings,
    make_task,
    runtime_settings,
    scheduler_settings,
    server_codec,
    server_settings,
    tracking_settings,
    worker_pool,
)
from hybrid.config import ConfigError, TrainConfig, check_flags_take_effect, given_fields
from hybrid.core.global_model import build_global_model, resolve_device
from hybrid.core.learner import Learner
from hybrid.core.loop import Interrupted, Training
from hybrid.core.worker import build_model
from hybrid.defaults import apply_env_defaults, apply_runtime_defaults
from hybrid.envs import EnvInfo, describe
from hybrid.evaluation import Evaluator
from hybrid.nets import FlatParams
from hybrid.protocol import CollectExperience, Task
from hybrid.runtimes import Runtime, make_runtime, workers_write_params
from hybrid.schedulers import (
    ReplicaScheduler,
    make_scheduler,
    scheduler_source,
    short_name,
    typed_scheduler_args,
)
from hybrid.seeding import MODEL_INIT, SCHEDULER, int_seed, stream
from hybrid.tracking import (
    CallbackLike,
    Callbacks,
    Tracker,
    record_scheduler_source,
    write_json_atomic,
)

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
    state: dict[str, Any] | None
    """None: the run stopped before its first checkpoint and starts over."""
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
    checkpoint.check_scheduler_named_again(stored_cfg.scheduler, cfg.scheduler)
    if not checkpoint.list_checkpoints(run_dir):  # killed before its first: start it over
        changes = _flags_given_on_resume(cfg, stored_cfg, run_dir)
        resumed = stored_cfg.replace(**changes, out=str(run_dir), resume=str(run_dir))
        return ResumePlan(resumed, None, changes, stored | changes)
    try:
        _, state = checkpoint.load_latest(run_dir)
    except checkpoint.CheckpointError as exc:
        raise ConfigError(f"resume: {exc}") from None
    written = state.get("config")
    if isinstance(written, dict):  # newer checkpoints record their config
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
        expected = training.runtime.worker_count()
        if len(saved) != expected:
            raise ConfigError(
                f"resume: the checkpoint holds {len(saved)} workers but config.json runs "
                f"{expected} (workers or clients were edited?); restore config.json"
            )


def learner_device(
    cfg: TrainConfig, info: EnvInfo, applies_alone: bool, replicas: bool = False
) -> torch.device:
    """Where θ, the server optimizer and the learner run (``--device``).

    ``auto`` is cuda when torch finds a GPU, except where θ must stay in CPU memory: where
    the runtime lets its workers step θ in shared memory (Hogwild!; the runtime says when:
    ``workers_write_params``, told whether the scheduler's updates apply alone), and for
    multi-agent learners, and for a decentralized run's replicas (``replicas``) on processes,
    rows of shared CPU memory. There ``cuda`` is refused in one line.
    """
    persistent_workers = cfg.clients is None  # edge clients come and go: never Hogwild!
    hogwild = workers_write_params(runtime_settings(cfg), applies_alone, persistent_workers)
    why = (
        "Hogwild! workers step θ in shared CPU memory (use --no-lock-free to keep cuda)"
        if hogwild
        else "multi-agent learners run on CPU"
        if info.multiagent
        else "the replicas are rows of shared CPU memory on processes (use --runtime serial)"
        if replicas and cfg.runtime == "processes"
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
    given: set[str] | None = None  # the fields the user set (a new run's)
    if cfg.resume:
        _check_resume_dir(cfg)
        # locked before reading anything: what a running run writes is not read half-done
        lock.enter_context(lock_run_dir(Path(cfg.resume), "resume"))
        checkpoint.remove_stale_tmp(Path(cfg.resume))
        plan = _resume_config(cfg)
        cfg, resume_state = plan.cfg, plan.state
    else:
        given = given_fields(cfg, overrides)
        # hybrid/defaults.py (keyword overrides always win); config.json records the result
        cfg = apply_env_defaults(cfg, keep=overrides)
        cfg = apply_runtime_defaults(cfg, keep=overrides)
        # Every value is now the one in effect: recorded with env_defaults off, config.json
        # and Result.config rerun as they are (a value equal to a global default, such as
        # workers=8 on CartPole, is not replaced by the env's defaults a second time).
        cfg = cfg.replace(env_defaults=False)
    info = check_config(cfg)
    if given is not None:  # a flag that would do nothing here is refused
        check_flags_take_effect(cfg, given)
    cfg = cfg.replace(scheduler_args=typed_scheduler_args(cfg.scheduler, cfg.scheduler_args))
    created: list[Path] = []
    if plan is not None:
        run_dir = Path(cfg.out)
        if resume_state is None:
            checkpoint.restart_from_config(run_dir, plan.stored if plan.changed else None)
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
        device = learner_device(
            cfg, info, scheduler.applies_alone, replicas=isinstance(scheduler, ReplicaScheduler)
        )
        params = initial_params(cfg, info)
        global_model = build_global_model(
            server_settings(cfg), params, info.obs_stats_shape, device
        )
        scheduler.bind(global_model.view(), np.random.default_rng(stream(cfg.seed, SCHEDULER)))
        learner = make_learner(cfg, info, scheduler.task_kind).to(global_model.device)
        runtime = make_runtime(
            runtime_settings(cfg),
            info,
            global_model,
            scheduler.applies_alone,
            worker_pool(cfg, info),
            replicas=isinstance(scheduler, ReplicaScheduler),
        )
        if isinstance(scheduler, ReplicaScheduler) and cfg.progress:
            print(scheduler.describe())  # the graph's spectral gap, before any row
        evaluator = Evaluator(eval_settings(cfg), info, obs_stats=global_model.obs_stats)
        if plan is None:
            write_json_atomic(run_dir / "config.json", cfg.to_dict())
        record_scheduler_source(run_dir, scheduler_source(cfg.scheduler), resuming=plan is not None)
    except BaseException:
        if runtime is not None:
            runtime.close()
        if plan is None:
            remove_run_dir(run_dir, created)  # a start that failed leaves nothing behind
        raise
    tracker = Tracker(tracking_settings(cfg), run_dir, hooks)
    training = Training(
        loop_settings(cfg),
        run_dir,
        global_model,
        scheduler,
        learner,
        runtime,
        evaluator,
        tracker,
        info.reward_threshold,
        task=make_task(scheduler.task_kind, cfg),
        codec=server_codec(cfg),
    )
    summary: dict[str, Any] | None = None
    try:
        if plan is not None and plan.state is not None:
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
    "Result",
    "check_config",
    "train",
]
