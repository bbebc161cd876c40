"""A measured cluster profile: what one machine's cores cost, for the serial runtime's clock.

``hybrid calibrate`` measures it (hybrid/calibrate.py) and writes it as plain JSON;
``--cluster profile.json`` runs the serial runtime on it (hybrid/runtimes/virtual_cluster.py).
Every cost is CPU seconds on one core of the machine that was measured; the clock shares
``cores`` among the busy workers and the main process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid.errors import ConfigError

PROFILE_FORMAT = 2
READABLE_FORMATS = (1, 2)
"""Format 1 (before the runtime's own runs were measured) lacks the distributions: read as
the same profile with none, it runs as it did."""
MODELLED_RUNTIMES = ("processes", "ray")
PROFILE_COPY = "cluster_profile.json"
"""The copy of its profile a run directory keeps (a resume reads this one)."""

MAX_COST_S = 3_600.0
"""Every cost in a profile is at most an hour, as the clock's flags are bounded
(step_cost_s): the clock's sums must stay finite over a whole run."""
MAX_CORES = 65_536
MAX_QUANTILES = 1_001
WRITTEN_WHEN_SET = (
    "quantum_s",
    "quantum_source",
    "growth_past_cores",
    "growth_slope",
    "collect_overhead_s",
    "learn_s",
)
"""Fields added to format 2 later: written only when set, so a profile without them keeps
its digest (and the runs that cite it their citation)."""


@dataclass(frozen=True)
class ClusterProfile:
    """Measured per-event costs of one machine, for one real runtime's way of moving tasks."""

    runtime: str
    """The real runtime the clock imitates: processes (shared memory, a pipe per worker;
    Hogwild! workers apply their own updates and run ahead) or ray (θ travels with every
    task over a local connection; the main process applies)."""
    cores: int
    """Physical cores the workers and the main process share."""
    step_cost_s: float
    """One env step with acting (the forward pass that picks the action), per env step
    (mean)."""
    task_overhead_s: float
    """A worker's fixed cost per task (mean): take the task and θ, loss and backward pass,
    pack and send the result."""
    jitter_sigma: float
    """Lognormal sigma of a task's duration; the clock draws factors of mean 1, so a task's
    mean cost stays step_cost_s × env steps + task_overhead_s."""
    receive_s: float
    """Main process, per update: take the result, decode and check it, admit and log it."""
    apply_s: float
    """One optimizer step on θ (the main process's, or under Hogwild! the worker's)."""
    snapshot_s: float
    """Main process: copy θ for a new version and publish it to the workers."""
    dispatch_s: float
    """Main process, per task: send a worker its task (and θ, on ray)."""
    task_cost_quantiles: tuple[float, ...] = ()
    """The shape of a task's cost in a worker process: evenly spaced quantiles (0 to 1) of
    a task's duration over the mean, measured from a real run's spans. When given, the
    clock draws a task's factor from it (inverse CDF) instead of the lognormal."""
    wake_s_quantiles: tuple[float, ...] = ()
    """Seconds between the server's dispatch and the worker's start beyond the CPU the
    clock charges (waking a process blocked on its pipe or socket), as evenly spaced
    quantiles, measured from a real run's round trips; drawn per task, it uses no core."""
    read_delay_s: float = 0.0
    """Hogwild!: seconds between a worker's result and its next read of θ (the main
    process wakes on the result and claims the task before the worker applies and reads),
    measured as the mean cycle of a lone Hogwild! worker beyond its task and apply."""
    contention: float = 0.0
    """Cost growth beyond fair sharing: with N workers on C cores a task's CPU work is
    multiplied by 1 + contention × (min(N, C) − 1) / C (caches, memory bandwidth, the
    main process's wake-ups, cores that are hyperthreads of one), fitted so that the
    clock's sync rounds at N = C keep a real run's pace."""
    fit: dict[str, Any] = field(default_factory=dict)
    """How the distributions were fitted and what the clock then predicted for the
    calibration runs themselves (residuals); information only."""
    main_preempts: bool = True
    """The main process, asleep between updates, takes a core the moment it has work and
    the workers share the others (Linux lets a task that has slept preempt a busy one);
    false: the workers and the main process share the cores equally."""
    measured_on: dict[str, Any] = field(default_factory=dict)
    """What was measured, where and when (env, algo, sizes, machine): information only."""
    quantum_s: float = 0.0
    """The kernel's time slice: the cores run their runnable tasks round-robin, FIFO, each
    for up to this many seconds at a time (a task shorter than what is left of its slice
    runs whole; a preempted one goes to the back). 0: processor sharing, every busy task
    advancing at once (profiles written before time slices were modelled)."""
    quantum_source: str = ""
    """Where quantum_s came from (the kernel file read, or the kernel's default): information."""
    growth_past_cores: tuple[tuple[float, float], ...] = ()
    """How a task's cost grows with more busy processes than cores: points (N / C, cost at
    N over the clock's cost there without this growth), N / C increasing and above 1,
    fitted so that the clock's sync rounds at N = 2C (and 4C) keep a real run's pace. The
    clock interpolates linearly from (1, 1) through them; beyond the last it follows
    growth_slope. Empty: no growth."""
    growth_slope: float = 0.0
    """The least-squares slope of the cost factor per busy process per core beyond C, a
    line through (1, 1) fitted to growth_past_cores: the growth beyond the last point."""
    collect_overhead_s: float | None = None
    """An actor's fixed cost per task where it only acts for a learner (``hybrid``: take
    the task and θ, pack and send the trajectory; no loss, no backward pass). None: not
    measured, such a task costs task_overhead_s (profiles written before it was)."""
    learn_s: float = 0.0
    """The main process's learner, per env step of the experience it trains on (the
    loss, V-trace and backward pass over a batch of trajectories, or a replay's
    minibatches), on top of apply_s per optimizer step. 0: not measured (profiles
    written before it was), a learner step costs apply_s alone."""

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        for name in ("task_cost_quantiles", "wake_s_quantiles"):
            values[name] = list(values[name])
        values["growth_past_cores"] = [list(point) for point in self.growth_past_cores]
        for f in dataclasses.fields(self):
            if f.name in WRITTEN_WHEN_SET and getattr(self, f.name) == f.default:
                del values[f.name]
        return {"format": PROFILE_FORMAT, **values}

    def cost_growth(self, workers: int) -> float:
        """A task's cost factor with ``workers`` workers on the profile's cores: the fitted
        contention up to the core count, times the growth past it."""
        cores = self.cores
        growth = 1.0 + self.contention * (min(workers, cores) - 1) / cores
        load = workers / cores
        if load <= 1 or not self.growth_past_cores:
            return growth
        points = ((1.0, 1.0), *self.growth_past_cores)
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if load <= x1:
                return growth * (y0 + (y1 - y0) * (load - x0) / (x1 - x0))
        last_x, last_y = points[-1]
        return growth * (last_y + self.growth_slope * (load - last_x))

    def digest(self) -> str:
        """sha256 of the profile's canonical JSON: what a run on it cites."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "profile") -> ClusterProfile:
        """Check every field; a bad one raises a one-line ConfigError naming ``cluster``."""

        def bad(message: str) -> ConfigError:
            return ConfigError(f"cluster: {where}: {message}")

        if not isinstance(values, dict):
            raise bad("is not a JSON object (write one with hybrid calibrate)")
        values = dict(values)
        if values.pop("format", None) not in READABLE_FORMATS:
            raise bad(f"format must be {PROFILE_FORMAT} (write one with hybrid calibrate)")
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(values) - names):
            raise bad(f"unknown field {str(unknown[0])[:40]!r}")
        optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        optional |= {"measured_on", "fit"}
        required = names - optional
        if missing := sorted(required - set(values)):
            raise bad(f"missing field {missing[0]!r}")
        if values["runtime"] not in MODELLED_RUNTIMES:
            raise bad(f"runtime {_short(values['runtime'])}; choose one of processes, ray")
        cores = values["cores"]
        if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= MAX_CORES:
            raise bad(f"cores must be an integer in [1, {MAX_CORES:,}], got {_short(cores)}")
        costs = (required | {"read_delay_s"}) - {"runtime", "cores", "jitter_sigma"}
        for name in sorted(costs | {"jitter_sigma", "contention"}):
            if name in values:
                values[name] = _bounded(bad, name, values[name], MAX_COST_S)
        if values["step_cost_s"] <= 0:
            raise bad("step_cost_s must be > 0: a task must take time")
        if values["jitter_sigma"] > 2:
            raise bad(f"jitter_sigma {values['jitter_sigma']} is above 2; remeasure")
        if values.get("contention", 0.0) > 100:
            raise bad(f"contention {values['contention']} is above 100; remeasure")
        for name, high in (("task_cost_quantiles", 1_000.0), ("wake_s_quantiles", MAX_COST_S)):
            if name in values:
                values[name] = _quantiles(bad, name, values[name], high)
        if not isinstance(values.get("main_preempts", True), bool):
            raise bad(f"main_preempts must be true or false, got {_short(values['main_preempts'])}")
        for name in ("measured_on", "fit"):
            if not isinstance(values.get(name, {}), dict):
                raise bad(f"{name} must be an object")
        if "quantum_s" in values:
            values["quantum_s"] = _bounded(bad, "quantum_s", values["quantum_s"], MAX_COST_S)
        source = values.get("quantum_source", "")
        if not isinstance(source, str) or len(source) > 400:
            raise bad("quantum_source must be a string of at most 400 characters")
        if "growth_slope" in values:
            values["growth_slope"] = _bounded(bad, "growth_slope", values["growth_slope"], 100.0)
        if "growth_past_cores" in values:
            values["growth_past_cores"] = _growth_points(bad, values["growth_past_cores"])
        if values.get("collect_overhead_s") is not None:  # null: not measured
            values["collect_overhead_s"] = _bounded(
                bad, "collect_overhead_s", values["collect_overhead_s"], MAX_COST_S
            )
        if "learn_s" in values:
            values["learn_s"] = _bounded(bad, "learn_s", values["learn_s"], MAX_COST_S)
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> ClusterProfile:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(
                f"cluster: cannot read profile {str(path)!r} ({exc.strerror}); "
                "write one with hybrid calibrate, or use homogeneous, heterogeneous, stragglers"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"cluster: {str(path)!r} is not UTF-8 text (a profile is the JSON hybrid "
                "calibrate writes)"
            ) from None
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"cluster: {str(path)!r} is not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError):  # an integer too long to read, nesting too deep
            raise ConfigError(
                f"cluster: {str(path)!r} holds a number or nesting too large to read"
            ) from None
        return cls.from_dict(values, repr(str(path)))


def _short(value: object) -> str:
    """A value for a one-line message: a 400-digit integer is not printed whole."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bounded(bad: Callable[[str], ConfigError], name: str, value: object, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(f"{name} must be a number, got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise bad(f"{name} must be a finite number in [0, {high:,}], got {value!r}")
    # compared before float(): a 400-digit integer would overflow the conversion
    if not 0 <= value <= high:
        raise bad(f"{name} must be in [0, {high:,}], got {_short(value)}")
    return float(value)


def _quantiles(
    bad: Callable[[str], ConfigError], name: str, value: object, high: float
) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) == 1 or len(value) > MAX_QUANTILES:
        raise bad(f"{name} must be a list of 2 to {MAX_QUANTILES} numbers, or empty")
    numbers = tuple(_bounded(bad, name, v, high) for v in value)
    if any(b < a for a, b in itertools.pairwise(numbers)):
        raise bad(f"{name} must be non-decreasing (quantiles)")
    return numbers


def _growth_points(
    bad: Callable[[str], ConfigError], value: object
) -> tuple[tuple[float, float], ...]:
    message = (
        "growth_past_cores must be a list of at most 64 [processes per core > 1, cost factor "
        "in (0, 100]] pairs, processes per core increasing"
    )
    if not isinstance(value, list) or len(value) > 64:
        raise bad(message)
    points = []
    for point in value:
        if not isinstance(point, list) or len(point) != 2:
            raise bad(message)
        load = _bounded(bad, "growth_past_cores", point[0], float(MAX_CORES))
        factor = _bounded(bad, "growth_past_cores", point[1], 100.0)
        if load <= 1 or factor <= 0 or (points and load <= points[-1][0]):
            raise bad(message)
        points.append((load, factor))
    return tuple(points)


def profile_in_effect(cluster: str, resume: str | None) -> str:
    """The profile file a run reads: the one named, or on a resume the copy its run
    directory keeps, so a run continues on the machine it started on whatever became of
    the user's file since."""
    if not (resume and is_profile_path(cluster)):
        return cluster
    return str(Path(resume) / PROFILE_COPY)


def is_profile_path(cluster: str) -> bool:
    """``--cluster`` names a measured profile rather than one of the built-in speed profiles."""
    return isinstance(cluster, str) and cluster.endswith(".json")


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads do not add throughput here)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    try:
        import psutil  # optional: present in most environments, not a dependency

        physical = psutil.cpu_count(logical=False) or usable
    except ImportError:
        physical = usable
    return max(1, min(physical, usable))


__all__ = [
    "PROFILE_COPY",
    "ClusterProfile",
    "is_profile_path",
    "physical_cores",
    "profile_in_effect",
]
