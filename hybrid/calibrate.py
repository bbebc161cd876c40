"""``hybrid calibrate``: measure this machine's costs into a profile for the virtual clock.

What one task, one update and one dispatch cost is measured here, in this process, on
the real code: a ``Worker`` runs tasks (acting is timed apart from the whole task), the
one loop (``Training``) runs on an instant stand-in runtime to time its per-update
bookkeeping, the global model's optimizer step and snapshot are timed directly, and the
messages a task and a result make are pickled and sent through a local socket pair the
way each real runtime sends them. Costs are CPU time of this thread (``thread_time``),
so other programs on a busy machine inflate them less than wall-clock timings would.
A task's costs are means (throughput follows the mean); the sub-millisecond costs of
the main process are medians of many repetitions. The clock then shares the measured
machine's physical cores among the workers and the main process: on processes a time slice
at a time, as the kernel runs them (its base slice, read where readable, plus half a tick),
on ray by processor sharing.

Short real runs of the runtime then fit what the in-process figures miss (``measure_runtime``):
a task's cost in a worker process, the server's round trip, Hogwild!'s read delay, the cost
growth at N = cores and, on processes, past them (N = 2C and 4C).

What is not measured: Ray's own daemons.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pickle
import platform
import selectors
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid import assembly
from hybrid.cluster_profile import MODELLED_RUNTIMES, ClusterProfile
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.appliers import WorkersApply
from hybrid.core.worker import Worker
from hybrid.envs import EnvInfo, describe
from hybrid.protocol import CollectExperience, ComputeGradient, Snapshot, Step, Update
from hybrid.runtimes import RuntimeDefaults
from hybrid.runtimes._parallel import (
    dumps_message,
    pack,
    payload_tensor,
    physical_cores,
    unpack,
    update_record,
)
from hybrid.stats import ks_distance

DEFAULT_BUDGET_S = 15.0
"""Seconds of measuring (setup aside): gradient tasks take 45 %, an actor's tasks and the
learner 10 %, the loop a fifth, the rest the rest."""


@dataclasses.dataclass(frozen=True)
class Measurements:
    """What ``measure`` found, before it is cast as one runtime's profile (``profile_for``)."""

    cores: int
    step_cost_s: float
    task_compute_s: float
    """A task's fixed compute: load θ, loss, backward (the whole task minus acting)."""
    jitter_sigma: float
    loop_s: float
    """The loop's bookkeeping per update, without applying or snapshotting."""
    apply_s: float
    snapshot_s: float
    """Copy θ for a snapshot, then copy it once more (into shared memory, or a message)."""
    slot_copy_s: float
    """Copy a gradient into or out of a shared-memory slot."""
    send_s: dict[str, float]
    """Pickle and send one message, by kind (processes task / result, ray task / result)."""
    receive_s: dict[str, float]
    """Receive and unpickle one message, by kind."""
    measured_on: dict[str, Any]
    collect_compute_s: float | None = None
    """An actor's task (acting for a learner) beyond acting: pack the trajectory."""
    learn_s: float = 0.0
    """The learner's CPU per env step of a batch of actors' trajectories."""


def _median_cpu_s(fn: Callable[[], object], budget_s: float, least: int = 5) -> float:
    """Median CPU seconds of ``fn()``, repeated for about ``budget_s`` (at least ``least``)."""
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < least or time.perf_counter() < deadline:
        started = time.thread_time()
        fn()
        samples.append(time.thread_time() - started)
    return statistics.median(samples)


def _measure_tasks(worker: Worker, budget_s: float) -> tuple[float, float, float]:
    """(step cost, fixed compute per task, lognormal sigma of a task's duration)."""
    snapshot = Snapshot(worker.flat.flat.clone(), 0)
    acting: list[float] = []
    tasks: list[float] = []
    env_steps = 1
    deadline = time.perf_counter() + budget_s
    while len(tasks) < 5 or time.perf_counter() < deadline:  # a spread needs a few
        started = time.thread_time()
        rollout = worker.runner.collect(
            worker.model, worker.settings.rollout_steps, worker.generator
        )
        acting.append(time.thread_time() - started)
        env_steps = rollout.env_steps
        started = time.thread_time()
        worker.run_task(snapshot)
        tasks.append(time.thread_time() - started)
    # Means, not medians: throughput is set by the mean cost, rare slow tasks included.
    step_cost = statistics.fmean(acting) / env_steps
    compute = max(statistics.fmean(tasks) - statistics.fmean(acting), 0.0)
    logs = np.log(np.maximum(tasks, 1e-9))
    return step_cost, compute, float(np.std(logs))


def _measure_learning(
    cfg: TrainConfig, info: EnvInfo, worker: Worker, step_cost: float, budget_s: float
) -> tuple[float, float]:
    """(an actor's fixed compute per task beyond acting, the learner's CPU per env step of
    a batch of ``learner_batch`` of its trajectories): the work the ``hybrid`` scheduler
    moves from the workers to the main process."""
    from hybrid.trainer import initial_params, make_learner

    snapshot = Snapshot(worker.flat.flat.clone(), 0, task=CollectExperience())
    worker.run_task(snapshot)  # first-task costs: not ours
    tasks: list[float] = []
    updates: list[Update] = []
    deadline = time.perf_counter() + 0.5 * budget_s
    while len(tasks) < 5 or time.perf_counter() < deadline:
        started = time.thread_time()
        updates.append(worker.run_task(snapshot))
        tasks.append(time.thread_time() - started)
    compute = max(statistics.fmean(tasks) - step_cost * updates[-1].env_steps, 0.0)
    learner = make_learner(cfg, info, CollectExperience)
    model = assembly.global_model(cfg, initial_params(cfg, info), info.obs_dim)
    batch = [u.payload for u in updates[-cfg.learner_batch :]]
    env_steps = sum(u.env_steps for u in updates[-cfg.learner_batch :])
    step = Step(batch=batch, lags=[0] * len(batch))
    # the learner's own work: the directions it yields, not their applies (apply_s)
    learning = _median_cpu_s(lambda: list(learner.steps(step, model, 0.0)), 0.5 * budget_s)
    return compute, learning / env_steps


class _InstantRuntime(RuntimeDefaults):
    """A stand-in runtime whose tasks cost nothing: what remains is the loop's own cost."""

    applier = WorkersApply()  # apply only counts, snapshot does not copy: the loop's own cost

    def __init__(self, workers: int, template: Update) -> None:
        self.busy = [False] * workers
        self.template = template
        self.queue: list[Update] = []

    def idle_workers(self) -> list[int]:
        return [w for w, busy in enumerate(self.busy) if not busy]

    def dispatch(self, worker_id: int, snapshot: Snapshot) -> None:
        self.busy[worker_id] = True
        self.queue.append(
            dataclasses.replace(
                self.template,
                worker_id=worker_id,
                base_version=snapshot.version,
                payload=self.template.payload,  # copies are priced apart, per runtime
            )
        )

    def next_update(self) -> Update:
        update = self.queue.pop(0)
        self.busy[update.worker_id] = False
        return update

    def virtual_time(self) -> float | None:
        return None

    def settle(self) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def worker_count(self) -> int:
        return len(self.busy)

    def close(self) -> None:
        pass


def _measure_loop(cfg: TrainConfig, info: EnvInfo, template: Update, budget_s: float) -> float:
    """CPU seconds of the one loop per update, applying nothing (the apply is timed apart)."""
    from hybrid.core.loop import Training
    from hybrid.schedulers import make_scheduler
    from hybrid.tracking import Tracker
    from hybrid.trainer import initial_params, make_learner

    updates = max(200, min(50_000, int(budget_s / 1e-4)))
    loop_cfg = cfg.replace(
        scheduler="async",
        runtime="serial",
        total_env_steps=updates * template.env_steps,
        eval_every=2**62,
        eval_episodes=1,
        checkpoint_every=0,
        track=False,
        progress=False,
    )
    global_model = assembly.global_model(loop_cfg, initial_params(loop_cfg, info), info.obs_dim)
    scheduler = make_scheduler(assembly.scheduler_settings(loop_cfg))
    runtime = _InstantRuntime(loop_cfg.workers, template)
    evaluator = assembly.evaluator(loop_cfg, info, obs_stats=global_model.obs_stats)
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = Tracker(assembly.tracking_settings(loop_cfg), Path(run_dir))
        training = Training(
            assembly.loop_settings(loop_cfg),
            Path(run_dir),
            global_model,
            scheduler,
            make_learner(loop_cfg, info, scheduler.task_kind),
            runtime,
            evaluator,
            tracker,
            None,
            task=assembly.make_task(scheduler.task_kind, loop_cfg),
            codec=assembly.server_codec(loop_cfg),
        )
        started = time.thread_time()
        training.run()
        # the final evaluation is not the loop's per-update cost: take it out
        spent = time.thread_time() - started - training.excluded_s
        tracker.close()
    evaluator.close()
    return max(spent, 0.0) / max(global_model.version, 1)


def _socket_pair(kind: str) -> tuple[socket.socket, socket.socket]:
    """A connected pair: a Unix socket pair (the processes runtime's duplex pipe) or TCP on
    the loopback interface (the ray runtime's connection to an actor)."""
    if kind == "processes":
        return socket.socketpair()
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    for end in (client, peer):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, peer


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        got += sock.recv_into(view[got:])
    return bytes(buffer)


def _measure_message(kind: str, message: Any, budget_s: float) -> tuple[float, float]:
    """(send, receive) CPU seconds of one message: pickle + send, receive + unpickle, with a
    length header as ``multiprocessing.connection`` frames it."""
    sender, receiver = _socket_pair(kind)
    selector = selectors.DefaultSelector()  # the main process waits on all workers at once
    selector.register(receiver, selectors.EVENT_READ)
    try:

        def send() -> None:
            data = dumps_message(message)
            sender.sendall(struct.pack("!i", len(data)) + data)

        def receive() -> None:
            selector.select(0)
            (size,) = struct.unpack("!i", _recv_exactly(receiver, 4))
            body = unpack(pickle.loads(_recv_exactly(receiver, size)))
            for part in body if isinstance(body, tuple) else ():
                if isinstance(part, np.ndarray):  # θ as an array: the actor copies it in
                    payload_tensor(part)

        sends: list[float] = []
        receives: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(sends) < 20 or time.perf_counter() < deadline:
            started = time.thread_time()
            send()
            sends.append(time.thread_time() - started)
            started = time.thread_time()
            receive()
            receives.append(time.thread_time() - started)
        return statistics.median(sends), statistics.median(receives)
    finally:
        selector.close()
        sender.close()
        receiver.close()


def measure(cfg: TrainConfig, budget_s: float = DEFAULT_BUDGET_S) -> Measurements:
    """Measure this machine's costs for ``cfg``'s env, algorithm and sizes."""
    if budget_s <= 0:
        raise ConfigError(f"budget_s: {budget_s} must be > 0")
    torch.set_num_threads(cfg.torch_threads)
    info = describe(cfg.env, assembly.env_settings(cfg))
    worker = Worker(0, assembly.worker_settings(cfg), info)
    try:
        worker.run_task(Snapshot(worker.flat.flat.clone(), 0))  # first-task costs: not ours
        step_cost, compute, sigma = _measure_tasks(worker, 0.45 * budget_s)
        template = worker.run_task(Snapshot(worker.flat.flat.clone(), 0))
        params = worker.flat.flat.clone()
        collect_compute, learn_s = _measure_learning(cfg, info, worker, step_cost, 0.1 * budget_s)
    finally:
        worker.close()
    if not isinstance(template.payload, torch.Tensor):
        raise ConfigError(
            f"scheduler: calibrate measures gradient tasks; {cfg.algo} sent a "
            f"{type(template.payload).__name__}"
        )
    gradient = template.payload
    loop_s = _measure_loop(cfg, info, template, 0.2 * budget_s)

    global_model = assembly.global_model(cfg, params, info.obs_dim)
    apply_s = _median_cpu_s(lambda: global_model.apply(Step(gradient.clone())), 0.05 * budget_s)
    shared = torch.empty_like(global_model.params)
    snapshot_s = _median_cpu_s(
        lambda: shared.copy_(global_model.snapshot(ComputeGradient()).params), 0.05 * budget_s
    )
    slot = torch.empty_like(gradient)
    slot_copy_s = _median_cpu_s(lambda: slot.copy_(gradient), 0.02 * budget_s)

    record = update_record(template)
    theta = global_model.params.numpy()
    messages = {
        "processes_task": ("processes", ("task", ComputeGradient(), None, 0.5)),
        "processes_result": ("processes", ("result", record)),
        "ray_task": ("ray", (theta, 1, ComputeGradient(), None)),
        "ray_result": ("ray", ("result", record | {"wire": pack(gradient)})),
    }
    send_s, receive_s = {}, {}
    for name, (kind, message) in messages.items():
        send_s[name], receive_s[name] = _measure_message(kind, message, 0.04 * budget_s)
    measured_on = {
        "env": cfg.env,
        "algo": cfg.algo,
        "envs_per_worker": cfg.envs_per_worker,
        "rollout_steps": cfg.rollout_steps,
        "hidden": cfg.hidden,
        "layers": cfg.layers,
        "optimizer": cfg.optimizer,
        "torch_threads": cfg.torch_threads,
        "machine": f"{platform.node()} {platform.machine()} {_cpu_model()}".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "budget_s": budget_s,
        "machine_detail": machine_description(physical_cores(), cfg.torch_threads),
    }
    return Measurements(
        cores=physical_cores(),
        step_cost_s=step_cost,
        task_compute_s=compute,
        jitter_sigma=sigma,
        loop_s=loop_s,
        apply_s=apply_s,
        snapshot_s=snapshot_s,
        slot_copy_s=slot_copy_s,
        send_s=send_s,
        receive_s=receive_s,
        measured_on=measured_on,
        collect_compute_s=collect_compute,
        learn_s=learn_s,
    )


def profile_for(m: Measurements, runtime: str = "processes") -> ClusterProfile:
    """The costs of ``runtime``'s way of moving tasks and results, from the measurements.

    processes: θ in shared memory (the worker copies it in, and its gradient into its slot,
    which the main process copies out), small pickled messages on a Unix socket pair.
    ray: θ pickled once per version and sent with every task, the gradient with the result,
    over TCP on the loopback interface.
    """
    if runtime not in MODELLED_RUNTIMES:
        raise ConfigError(f"runtime: unknown {runtime!r}; choose one of processes, ray")
    send, receive = m.send_s, m.receive_s
    if runtime == "processes":
        moving = (
            receive["processes_task"]
            + m.slot_copy_s  # take the task, read θ
            + m.slot_copy_s
            + send["processes_result"]  # gradient into the slot, report
        )
        server_receive = receive["processes_result"] + m.slot_copy_s + m.loop_s
        snapshot, dispatch = m.snapshot_s, send["processes_task"]
    else:
        moving = receive["ray_task"] + send["ray_result"]
        server_receive = receive["ray_result"] + m.loop_s
        # θ is copied and pickled once per version; every task sends those bytes
        snapshot = m.snapshot_s + max(send["ray_task"] - m.slot_copy_s, 0.0)
        dispatch = m.slot_copy_s  # a write of the pickled θ into the connection
    collect = None if m.collect_compute_s is None else moving + m.collect_compute_s
    return ClusterProfile(
        runtime=runtime,
        cores=m.cores,
        step_cost_s=m.step_cost_s,
        task_overhead_s=moving + m.task_compute_s,
        collect_overhead_s=collect,
        learn_s=m.learn_s,
        jitter_sigma=m.jitter_sigma,
        receive_s=server_receive,
        apply_s=m.apply_s,
        snapshot_s=snapshot,
        dispatch_s=dispatch,
        measured_on=m.measured_on,
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@contextlib.contextmanager
def held_to_cores(cores: int | None) -> Iterator[int]:
    """Hold this process (and the workers it starts, which inherit it) to its first
    ``cores`` usable CPUs, as ``taskset`` would; yields the physical cores then usable."""
    if cores is None:
        yield physical_cores()
        return
    usable = sorted(os.sched_getaffinity(0))
    if not 1 <= cores <= len(usable):
        raise ConfigError(
            f"cores: {cores} is not in [1, {len(usable)}] (CPUs this process may use)"
        )
    os.sched_setaffinity(0, usable[:cores])
    try:
        yield physical_cores()
    finally:
        os.sched_setaffinity(0, usable)


def machine_description(cores: int, torch_threads: int) -> dict[str, Any]:
    """The machine a profile was measured on: what a reader needs to judge where it holds."""
    import gymnasium

    import hybrid

    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "cores": cores,
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "torch_threads": torch_threads,
        "load_average": load,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
        "hybrid": getattr(hybrid, "__version__", "unknown"),
    }


@dataclasses.dataclass(frozen=True)
class SpanStats:
    """A run's task costs and gaps, from its spans.jsonl (seconds)."""

    durations: list[float]
    """Per task: from the worker's start to its result (compute)."""
    gaps: list[float]
    """Per task after a worker's first: from its previous result to its start."""
    steps_per_s: float
    waiting: float
    staleness_histogram: list[int]
    """How many updates were applied at each staleness τ = 0, 1, 2, ..."""


def pooled(runs: Sequence[SpanStats]) -> SpanStats:
    """Repeated runs of one cell as one: their tasks and gaps together, the median pace
    and waiting, the staleness counts summed."""
    histogram = [0] * max(len(run.staleness_histogram) for run in runs)
    for run in runs:
        for tau, n in enumerate(run.staleness_histogram):
            histogram[tau] += n
    return SpanStats(
        durations=[d for run in runs for d in run.durations],
        gaps=[g for run in runs for g in run.gaps],
        steps_per_s=statistics.median(run.steps_per_s for run in runs),
        waiting=statistics.median(run.waiting for run in runs),
        staleness_histogram=histogram,
    )


def span_stats(run_dir: Path, summary: dict[str, Any], warm_up: int = 2) -> SpanStats:
    """Costs and gaps of a run's tasks; each worker's first ``warm_up`` tasks are left out
    (cold caches, the first optimizer steps)."""
    from hybrid.timeline import read_spans, waiting_fraction

    rows: dict[int, list[dict[str, float]]] = {}
    with open(run_dir / "spans.jsonl") as f:
        for line in f:
            row = json.loads(line)
            if "mix" in row:  # a decentralized run's mix of replicas, not a task
                continue
            rows.setdefault(int(row["worker"]), []).append(row)
    durations: list[float] = []
    gaps: list[float] = []
    for own in rows.values():
        own.sort(key=lambda r: r["start"])
        for previous, task in zip(own[warm_up:], own[warm_up + 1 :], strict=False):
            gaps.append(max(task["start"] - previous["upload_start"], 0.0))
        durations += [max(t["upload_start"] - t["start"], 0.0) for t in own[warm_up:]]
    clock = summary["virtual_time_s"] or summary["train_wall_s"]
    return SpanStats(
        durations=durations,
        gaps=gaps,
        steps_per_s=summary["env_steps"] / max(clock, 1e-9),
        waiting=waiting_fraction(read_spans(run_dir)),
        staleness_histogram=summary["staleness_histogram"],
    )


QUANTILES = 21
"""Evenly spaced quantiles kept of each measured distribution (every 5%)."""


def _quantiles(values: Sequence[float]) -> tuple[float, ...]:
    """``QUANTILES`` evenly spaced quantiles of ``values``, whose draws keep their mean.

    The clock draws from them by inverse CDF, linear between neighbours, so its draws'
    mean is the mean of the trapezoids between them. As measured, the top quantile is the
    sample's largest value (a task preempted once for milliseconds), which would then
    stand for the whole top 5 % and raise that mean far above the sample's (by 31 % for
    CartPole's task costs on a 2-core machine): throughput follows the mean, so the top
    quantile is set to what keeps it, the others as measured."""
    measured = np.quantile(values, np.linspace(0, 1, QUANTILES))
    target = float(np.mean(values))
    top = QUANTILES - 1
    below_top = float(np.sum(measured[: top - 1] + measured[1:top])) / 2  # all but the top span
    needed = 2 * (top * target - below_top) - measured[top - 1]
    if needed >= measured[top - 1]:
        measured[top] = needed
    else:  # the spans below the top alone are above the mean: scale them all to it
        measured = measured * target / _trapezoid_mean(measured)
    return tuple(float(q) for q in measured)


def _trapezoid_mean(quantiles: Sequence[float] | np.ndarray) -> float:
    """The mean of draws from evenly spaced quantiles, linear between them."""
    values = np.asarray(quantiles, dtype=float)
    return float(np.mean((values[:-1] + values[1:]) / 2))


def _run(cfg: TrainConfig, out: Path, **changes: Any) -> tuple[Path, dict[str, Any]]:
    import warnings

    import hybrid

    run_cfg = cfg.replace(out=str(out), **changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # oversubscribed on purpose, at times
        result = hybrid.train(run_cfg, workers=run_cfg.workers)
    assert result.summary is not None
    return result.run_dir, result.summary


CALIBRATION_CELLS: dict[str, tuple[tuple[str, str], ...]] = {
    # (scheduler, N: "1", "C", "2C" or "4C"): sync rounds give the server's round trip and
    # the cost of a task in a worker; N = C adds the growth when every core is busy, 2C and
    # 4C the growth past them; async on processes is Hogwild!, whose gap from a result to
    # the next read is its own
    "processes": (("sync", "1"), ("sync", "C"), ("async", "1"), ("sync", "2C"), ("sync", "4C")),
    # ray's actors are processes too, which the node's kernel slices the same way; one
    # point past the cores (its actors start slowly) and the slope through it
    "ray": (("sync", "1"), ("sync", "C"), ("sync", "2C")),
}
MAX_GROWTH_WORKERS = 32
"""The 4C run is left out where it would start more workers than this (a big machine:
the 2C point and the slope through it stand for the rest)."""

WORKERS_PER_CORE = {"1": 0, "C": 1, "2C": 2, "4C": 4}

DEFAULT_BASE_SLICE_S = 0.75e-3
"""The kernel's base slice per log2 CPUs (EEVDF's sysctl_sched_base_slice, CFS's
sched_min_granularity): 0.75 ms × (1 + log2 min(CPUs, 8)) unless tuned."""
SLICE_FILES = (
    "/sys/kernel/debug/sched/base_slice_ns",
    "/proc/sys/kernel/sched_base_slice_ns",
    "/sys/kernel/debug/sched/min_granularity_ns",
    "/proc/sys/kernel/sched_min_granularity_ns",
)
DEFAULT_HZ = 250


def _kernel_hz() -> tuple[int, str]:
    """The scheduler tick's rate (CONFIG_HZ) and where it was read."""
    import gzip

    release = platform.release()
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{release}", open)):
        try:
            with opener(path, "rt") as config:
                for line in config:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=", 1)[1]), path
        except (OSError, ValueError, EOFError):
            continue
    return DEFAULT_HZ, f"CONFIG_HZ not readable, {DEFAULT_HZ} assumed"


def kernel_quantum() -> tuple[float, str]:
    """How long the kernel lets a task run while others wait (seconds), and where that
    came from: its base slice (read where readable, else its default for this many CPUs)
    plus half a scheduler tick, as a slice that has run out is noticed at the next tick."""
    slice_s, source = 0.0, ""
    for path in SLICE_FILES:
        try:
            slice_s = int(Path(path).read_text().split()[0]) * 1e-9
            source = path
            break
        except (OSError, ValueError, IndexError):
            continue
    if not slice_s > 0:
        cpus = os.cpu_count() or 1
        slice_s = DEFAULT_BASE_SLICE_S * (1 + int(math.log2(min(cpus, 8))))
        source = f"the kernel's default base slice for {cpus} CPUs (no sched file readable)"
    hz, hz_source = _kernel_hz()
    quantum = slice_s + 0.5 / hz
    text = f"base slice {slice_s * 1e3:.2f} ms ({source}) + half a tick at {hz} Hz ({hz_source})"
    return quantum, text


def measure_runtime(
    cfg: TrainConfig,
    profile: ClusterProfile,
    seconds_per_run: float = 4.0,
    work_dir: Path | None = None,
    refit_from: Path | None = None,
    repeats: int = 1,
) -> ClusterProfile:
    """Short real runs of ``profile.runtime`` at N = 1 and N = cores; the clock's task cost,
    its distribution, the server's round trip, Hogwild!'s read delay and the cost growth
    under contention fitted from their spans, and the fitted clock's residuals on them.

    ``refit_from``: the ``work_dir`` of an earlier calibration, whose real runs are fitted
    again instead of running new ones (``profile`` is then that calibration's profile: its
    costs are already a worker's, so the scale comes out 1). What a change to the clock
    needs: the same measurements, modelled anew, nothing measured twice.

    ``repeats``: real runs per cell, seeds base, base + 1, …: their spans pooled, their
    pace the median (one run's pace on a shared machine is easily 20 % off its next)."""
    cores = profile.cores
    steps_per_task = cfg.rollout_steps * cfg.envs_per_worker
    modelled_task_s = profile.step_cost_s * steps_per_task + profile.task_overhead_s
    base = cfg.replace(
        runtime=profile.runtime,
        stop_when_solved=False,
        eval_every=2**62,
        eval_episodes=1,
        checkpoint_every=0,
        track=False,
        progress=False,
        env_defaults=False,
    )

    def budget(workers: int) -> int:
        tasks = max(40, seconds_per_run * min(workers, cores) / max(modelled_task_s, 1e-6))
        return int(min(tasks, 20_000) * steps_per_task)

    cells = [
        (sched, max(1, WORKERS_PER_CORE[n] * cores))
        for sched, n in CALIBRATION_CELLS[profile.runtime]
        if WORKERS_PER_CORE[n] * cores <= MAX_GROWTH_WORKERS or n in ("1", "C")
    ]
    cells = list(dict.fromkeys(cells))  # one core: N = C is N = 1
    if profile.runtime in ("processes", "ray"):
        # the kernel runs more busy workers than cores a slice at a time, not all at once
        # (ray: this machine's kernel, taken to be what a cluster's nodes run)
        quantum, quantum_source = kernel_quantum()
        profile = dataclasses.replace(profile, quantum_s=quantum, quantum_source=quantum_source)
    real: dict[tuple[str, int], SpanStats] = {}
    with contextlib.ExitStack() as stack:
        root = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for scheduler, workers in cells:
            runs = []
            for k in range(repeats):
                name = f"real-{scheduler}-{workers}" + (f"-r{k}" if k else "")
                if refit_from is not None:
                    run_dir = Path(refit_from) / name
                    if k and not run_dir.is_dir():
                        break  # the earlier calibration ran fewer
                    summary = json.loads((run_dir / "summary.json").read_text())
                else:
                    run_dir, summary = _run(
                        base,
                        root / name,
                        scheduler=scheduler,
                        workers=workers,
                        total_env_steps=budget(workers),
                        seed=base.seed + k,
                    )
                runs.append(span_stats(run_dir, summary))
            real[(scheduler, workers)] = pooled(runs)

        alone = real[("sync", 1)]
        mean_task = statistics.fmean(alone.durations)
        scale = mean_task / modelled_task_s
        server_s = profile.receive_s + profile.apply_s + profile.snapshot_s + profile.dispatch_s
        wake = [max(g - server_s, 0.0) for g in alone.gaps]
        read_delay = 0.0
        if ("async", 1) in real:
            # Hogwild!: a real task's span runs to after its claim and its own apply, so
            # what a cycle (task and gap) costs beyond the task's compute and that apply is
            # the time from the result to the next read (the main process's wake-up first)
            hogwild = real[("async", 1)]
            cycle = statistics.fmean(hogwild.durations) + statistics.fmean(hogwild.gaps or [0.0])
            read_delay = max(cycle - mean_task - profile.apply_s, 0.0)
        fitted = dataclasses.replace(
            profile,
            step_cost_s=profile.step_cost_s * scale,
            task_overhead_s=profile.task_overhead_s * scale,
            # an actor's task runs in the same worker process, at the same scale
            collect_overhead_s=(
                None if profile.collect_overhead_s is None else profile.collect_overhead_s * scale
            ),
            task_cost_quantiles=_quantiles([d / mean_task for d in alone.durations]),
            wake_s_quantiles=_quantiles(wake),
            read_delay_s=read_delay,
        )
        # How a task's cost grows with N workers on C cores (contention up to C, the growth
        # past it): fitted so that the clock's sync rounds keep the real runs' pace. Not
        # from the spans: a real span past the cores holds waits for a core that the
        # kernel spreads differently from the clock's slices, so span lengths disagree
        # where throughput, which the fit is for, need not.
        contention = 0.0
        if cores > 1:
            factor = _fit_cost_factor(
                lambda f: (
                    _virtual(
                        base,
                        dataclasses.replace(fitted, contention=(f - 1.0) * cores / (cores - 1)),
                        root / "virtual-fit",
                        "sync",
                        cores,
                        budget(cores),
                    ).steps_per_s
                ),
                real[("sync", cores)].steps_per_s,
                lowest=1.0,  # contention slows a task down, never speeds it up
            )
            contention = max(factor - 1.0, 0.0) * cores / (cores - 1)
        fitted = dataclasses.replace(fitted, contention=min(contention, 100.0))
        growth_points = []
        for scheduler, workers in cells:
            if scheduler != "sync" or workers <= cores:
                continue
            load = workers / cores
            growth = _fit_cost_factor(
                lambda g, w=workers, x=load: (
                    _virtual(
                        base,
                        dataclasses.replace(fitted, growth_past_cores=((x, g),)),
                        root / f"virtual-fit-{w}",
                        "sync",
                        w,
                        budget(w),
                    ).steps_per_s
                ),
                real[("sync", workers)].steps_per_s,
            )
            growth_points.append((load, growth))
        if growth_points:
            fitted = dataclasses.replace(
                fitted,
                growth_past_cores=tuple(growth_points),
                growth_slope=growth_slope(growth_points),
            )

        residuals = []
        for (scheduler, workers), measured in real.items():
            virtual = _virtual(
                base,
                fitted,
                root / f"virtual-{scheduler}-{workers}",
                scheduler,
                workers,
                budget(workers),
            )
            residuals.append(
                {
                    "scheduler": scheduler,
                    "workers": workers,
                    "steps_per_s_real": measured.steps_per_s,
                    "steps_per_s_virtual": virtual.steps_per_s,
                    "steps_per_s_error": virtual.steps_per_s / measured.steps_per_s - 1.0,
                    "waiting_real": measured.waiting,
                    "waiting_virtual": virtual.waiting,
                    "ks_staleness": ks_distance(
                        measured.staleness_histogram, virtual.staleness_histogram
                    ),
                }
            )
    fit = {
        "runs": [f"{s} N={n}" for s, n in cells],
        **({"refit_from": str(refit_from)} if refit_from is not None else {}),
        "seconds_per_run": seconds_per_run,
        "repeats": repeats,
        "in_process_task_s": modelled_task_s,
        "worker_task_s": mean_task,
        "worker_over_in_process": scale,
        "round_trip_median_s": statistics.median(alone.gaps) if alone.gaps else 0.0,
        "server_cpu_modelled_s": server_s,
        "lognormal_sigma_of_worker_tasks": float(np.std(np.log(np.maximum(alone.durations, 1e-9)))),
        "residuals": residuals,
    }
    return dataclasses.replace(fitted, fit=fit)


FIT_ROUNDS = 4
"""Clock runs per fitted cost factor (each a short virtual run)."""
FIT_TOLERANCE = 0.02
"""A fitted factor is kept once the clock's pace is within this of the real one."""


def _fit_cost_factor(
    pace: Callable[[float], float], real_pace: float, lowest: float = 0.1
) -> float:
    """The cost factor f at which the clock's steps/s, ``pace(f)``, is the real runs':
    secant steps on log steps/s against log f (exact in two for a power law, steps/s ∝
    f^-a: a = 1 where the workers' CPU sets the pace, less where the server's share
    does), at most ``FIT_ROUNDS`` clock runs, f bounded to [lowest, 100]; the best f
    seen."""
    tried: list[tuple[float, float]] = []  # (log f, log of pace over the real pace)
    log_f, slope = 0.0, -1.0
    for _ in range(FIT_ROUNDS):
        miss = math.log(pace(math.exp(log_f)) / real_pace)
        tried.append((log_f, miss))
        if abs(miss) <= math.log1p(FIT_TOLERANCE):
            break
        if len(tried) > 1:
            (f0, m0), (f1, m1) = tried[-2], tried[-1]
            if f1 != f0 and (m1 - m0) / (f1 - f0) < -0.05:  # else the pace barely moves
                slope = (m1 - m0) / (f1 - f0)
        log_f = min(max(log_f - miss / slope, math.log(lowest)), math.log(100.0))
        if any(abs(log_f - f) < 1e-9 for f, _ in tried):
            break  # at a bound already tried: no better factor within it
    best = min(tried, key=lambda t: abs(t[1]))
    return math.exp(best[0])


def growth_slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of a line through (1, 1) fitted to (N / C, cost factor)
    points: how much a task's cost grows per busy process per core past the core count
    (never below 0: fewer processes than the fit saw do not speed a task up)."""
    across = sum((x - 1) ** 2 for x, _ in points)
    if across <= 0:
        return 0.0
    return min(max(sum((x - 1) * (y - 1) for x, y in points) / across, 0.0), 100.0)


def _virtual(
    base: TrainConfig,
    profile: ClusterProfile,
    out: Path,
    scheduler: str,
    workers: int,
    total_env_steps: int,
) -> SpanStats:
    """The serial runtime's clock on ``profile`` for one calibration cell (``out`` is
    emptied first: a fit runs the same cell again with another factor)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "profile.json"
    profile.save(path)
    run_dir, summary = _run(
        base,
        out / "run",
        runtime="serial",
        cluster=str(path),
        scheduler=scheduler,
        workers=workers,
        total_env_steps=total_env_steps,
    )
    return span_stats(run_dir, summary)


def describe_profile(profile: ClusterProfile) -> str:
    """What was measured, one line per cost, in microseconds."""
    us = 1e6
    lines = [
        f"cores                 {profile.cores}",
        f"env step (acting)     {profile.step_cost_s * us:8.1f} µs per env step",
        f"task overhead         {profile.task_overhead_s * us:8.1f} µs per task"
        " (read θ, loss + backward, pack and send)",
        f"task jitter           {profile.jitter_sigma:8.3f} lognormal sigma",
        f"server receive        {profile.receive_s * us:8.1f} µs per update"
        " (take, decode, check, admit, log)",
        f"server apply          {profile.apply_s * us:8.1f} µs per optimizer step",
        f"snapshot              {profile.snapshot_s * us:8.1f} µs per version dispatched",
        f"dispatch              {profile.dispatch_s * us:8.1f} µs per task sent",
    ]
    if profile.collect_overhead_s is not None:
        lines.append(
            f"actor task overhead   {profile.collect_overhead_s * us:8.1f} µs per task"
            " (read θ, pack and send a trajectory)"
        )
    if profile.learn_s:
        lines.append(
            f"learner               {profile.learn_s * us:8.2f} µs per env step trained on"
            " (loss, V-trace, backward)"
        )
    if profile.task_cost_quantiles:
        q = profile.task_cost_quantiles
        wake = profile.wake_s_quantiles
        lines += [
            f"task cost / mean      {q[2]:.2f} (10%) {q[10]:.2f} (50%) {q[18]:.2f} (90%)"
            " in a worker process",
            f"wake-up latency       {wake[10] * us:8.1f} µs median, {wake[18] * us:.1f} µs 90%"
            " (round trip beyond the server's CPU)",
            f"Hogwild! read delay   {profile.read_delay_s * us:8.1f} µs",
            f"contention            {profile.contention:8.3f} (cost growth at N = cores)",
        ]
        for load, factor in profile.growth_past_cores:
            lines.append(f"cost past the cores   {factor:8.3f} × at {load:g} workers per core")
        if profile.growth_past_cores:
            lines.append(f"growth slope          {profile.growth_slope:8.3f} per worker per core")
    if profile.quantum_s:
        lines.append(
            f"time slice            {profile.quantum_s * us:8.1f} µs ({profile.quantum_source})"
        )
        for r in profile.fit.get("residuals", []):
            lines.append(
                f"fit {r['scheduler']:>5} N={r['workers']}: steps/s {r['steps_per_s_real']:,.0f}"
                f" real, {r['steps_per_s_error']:+.1%} on the clock; waiting "
                f"{r['waiting_real']:.1%} real, {r['waiting_virtual']:.1%} virtual; "
                f"KS(τ) {r['ks_staleness']:.3f}"
            )
    return "\n".join(lines)


CALIBRATE_FIELDS = ("env", "algo", "envs_per_worker", "rollout_steps", "hidden", "optimizer")
"""The TrainConfig fields calibrate takes as flags."""


def _check_writable(out: Path) -> str | None:
    """Why ``out`` cannot be written, or None: tried before anything is measured."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".calibrate-"):
            pass
    except OSError as exc:
        return f"out: cannot write {str(out)!r} ({exc.strerror or exc})"
    if out.exists() and (out.is_dir() or not os.access(out, os.W_OK)):
        return f"out: cannot write {str(out)!r} (a folder, or not writable)"
    return None


def _available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rollout_bytes(cfg: TrainConfig, obs_dim: int) -> int:
    """What one worker's rollout holds: per env step and env, the observation (and the next
    one), action, reward, done, value and log-probability as float32."""
    return cfg.rollout_steps * cfg.envs_per_worker * (2 * obs_dim + 8) * 4


def check_memory(cfg: TrainConfig, workers: int) -> None:
    """Refuse a measurement whose rollouts would not fit in the memory free now."""
    info = describe(cfg.env, assembly.env_settings(cfg))
    needed = rollout_bytes(cfg, info.obs_dim) * workers
    free = _available_memory_bytes()
    if free is not None and needed > free // 2:
        raise ConfigError(
            f"rollout_steps: {cfg.rollout_steps:,} steps × {cfg.envs_per_worker:,} envs would "
            f"allocate about {needed / 2**30:,.1f} GiB over {workers} worker(s), more than half "
            f"the {free / 2**30:,.1f} GiB free; lower rollout_steps or envs_per_worker"
        )


def calibrate_command(argv: Sequence[str]) -> int:
    from hybrid.flags import OneLineParser, fail

    parser = OneLineParser(
        prog="hybrid calibrate",
        description="Measure this machine's costs (env step, task, server receive and apply, "
        "snapshot, cores) into a profile, then fit the task cost's distribution, the server's "
        "round trip and contention from short real runs of the runtime; train --cluster "
        "PROFILE.json runs the serial runtime's virtual clock on it.",
    )
    # None = not given: the env's defaults fill it, as `hybrid train --env ...` would
    parser.add_argument("--env", default=None, help=f"Gymnasium env id ({TrainConfig.env})")
    parser.add_argument("--algo", default=None, help=f"algorithm ({TrainConfig.algo})")
    parser.add_argument("--envs-per-worker", type=int, default=None)
    parser.add_argument("--rollout-steps", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--optimizer", default=None)
    parser.add_argument(
        "--runtime",
        default="processes",
        choices=MODELLED_RUNTIMES,
        help="the real runtime whose way of moving tasks the clock imitates",
    )
    parser.add_argument(
        "--cores",
        type=int,
        default=None,
        help="hold the measurement (and its real runs) to this many CPUs, as taskset would",
    )
    parser.add_argument(
        "--run-s",
        type=float,
        default=2.0,
        help="seconds of each short real run of the runtime (0: in-process measurement only)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="real runs per calibration cell (seeds base, base + 1, ...): spans pooled, "
        "the median pace fitted",
    )
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="seconds")
    parser.add_argument("--out", required=True, help="where the profile (.json) is written")
    args = parser.parse_args(argv)
    if not args.out.endswith(".json"):
        return fail("calibrate", f"out: {args.out!r} must end in .json (what --cluster takes)")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        return fail("calibrate", f"budget_s: {args.budget_s} must be > 0")
    if not (math.isfinite(args.run_s) and 0 <= args.run_s <= 600):
        return fail("calibrate", f"run_s: {args.run_s} must be in [0, 600] seconds")
    if not 1 <= args.repeats <= 20:
        return fail("calibrate", f"repeats: {args.repeats} must be in [1, 20]")
    given = {
        name: getattr(args, name) for name in CALIBRATE_FIELDS if getattr(args, name) is not None
    }
    out = Path(args.out)
    if (why := _check_writable(out)) is not None:
        return fail("calibrate", why)
    try:
        from hybrid.defaults import apply_env_defaults

        # the sizes `hybrid train --env ...` would run with; the flags given are kept as given
        cfg = apply_env_defaults(TrainConfig(**given, progress=False), keep=given)
        cfg.validate()
        started = time.perf_counter()
        with held_to_cores(args.cores) as cores:
            workers = cores if args.run_s > 0 else 0
            check_memory(cfg, 1 + workers)  # before anything is allocated
            profile = profile_for(measure(cfg, args.budget_s), args.runtime)
            if args.run_s > 0:
                profile = measure_runtime(cfg, profile, args.run_s, repeats=args.repeats)
    except ConfigError as exc:
        return fail("calibrate", str(exc))
    profile.save(out)
    print(describe_profile(profile))
    print(
        f"measured {cfg.env} / {cfg.algo} for the {args.runtime} runtime in "
        f"{time.perf_counter() - started:.0f} s; wrote {out} (use: hybrid train --cluster {out})",
        file=sys.stdout,
    )
    return 0


__all__ = [
    "Measurements",
    "calibrate_command",
    "growth_slope",
    "held_to_cores",
    "kernel_quantum",
    "measure",
    "measure_runtime",
    "profile_for",
]
