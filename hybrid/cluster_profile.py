"""A measured cluster profile: what one machine's cores cost, for the serial runtime's clock.

``hybrid calibrate`` measures it (hybrid/calibrate.py) and writes it as plain JSON;
``--cluster profile.json`` runs the serial runtime on it (hybrid/runtimes/virtual_cluster.py).
Every cost is CPU seconds on one core of the machine that was measured; the clock shares
``cores`` among the busy workers and the main process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid.errors import ConfigError

PROFILE_FORMAT = 1
MODELLED_RUNTIMES = ("processes", "ray")


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
    main_preempts: bool = True
    """The main process, asleep between updates, takes a core the moment it has work and
    the workers share the others (Linux lets a task that has slept preempt a busy one);
    false: the workers and the main process share the cores equally."""
    measured_on: dict[str, Any] = field(default_factory=dict)
    """What was measured, where and when (env, algo, sizes, machine): information only."""

    def to_dict(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, **dataclasses.asdict(self)}

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
        if values.pop("format", None) != PROFILE_FORMAT:
            raise bad(f"format must be {PROFILE_FORMAT} (write one with hybrid calibrate)")
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(values) - names):
            raise bad(f"unknown field {unknown[0]!r}")
        required = names - {"measured_on", "main_preempts"}
        if missing := sorted(required - set(values)):
            raise bad(f"missing field {missing[0]!r}")
        if values["runtime"] not in MODELLED_RUNTIMES:
            raise bad(f"runtime {values['runtime']!r}; choose one of processes, ray")
        cores = values["cores"]
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise bad(f"cores must be an integer >= 1, got {cores!r}")
        for name in required - {"runtime", "cores"}:
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise bad(f"{name} must be a finite number >= 0, got {value!r}")
        if values["step_cost_s"] <= 0:
            raise bad("step_cost_s must be > 0: a task must take time")
        if values["jitter_sigma"] > 2:
            raise bad(f"jitter_sigma {values['jitter_sigma']} is above 2; remeasure")
        if not isinstance(values.get("main_preempts", True), bool):
            raise bad(f"main_preempts must be true or false, got {values['main_preempts']!r}")
        if not isinstance(values.get("measured_on", {}), dict):
            raise bad("measured_on must be an object")
        floats = {n: float(values[n]) for n in required - {"runtime", "cores"}}
        return cls(**{**values, **floats})

    @classmethod
    def load(cls, path: str | Path) -> ClusterProfile:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(
                f"cluster: cannot read profile {str(path)!r} ({exc.strerror}); "
                "write one with hybrid calibrate, or use homogeneous, heterogeneous, stragglers"
            ) from None
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"cluster: {str(path)!r} is not valid JSON ({exc.msg})") from None
        return cls.from_dict(values, repr(str(path)))


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


__all__ = ["ClusterProfile", "is_profile_path", "physical_cores"]
