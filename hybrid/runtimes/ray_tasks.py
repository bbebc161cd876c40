"""``hybrid sweep --backend ray``: each run of a sweep as a Ray task, on a local Ray or a
cluster. The sweep (``hybrid.sweep``) plans, resumes and judges the runs; this module only
starts, polls and stops them, so that Ray stays inside ``hybrid/runtimes``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from hybrid.errors import ConfigError, TaskLost
from hybrid.runtimes.ray import connect

RunOnNode = Callable[[list[str], str, str, str], int]


class RunToStart(Protocol):
    """What the backend needs of a planned run (``hybrid.sweep.PlannedRun`` has it): its
    name for the logs, the ``hybrid train`` arguments, and its run directory."""

    @property
    def name(self) -> str: ...
    @property
    def argv(self) -> Sequence[str]: ...
    @property
    def run_dir(self) -> Path: ...


class RayBackend:
    """Each run is a Ray task (``cpus``/``gpus`` per run) on a local Ray or a cluster.

    Ray starts as many as the cluster's resources hold and queues the rest; ``--out`` must be
    a directory every node sees (a shared file system), as each run writes there itself.
    """

    CANCEL_WAIT_S = 15.0

    def __init__(
        self, log_dir: Path, address: str, cpus: float, gpus: float, run: RunOnNode
    ) -> None:
        """``run(argv, run_dir, out_log, err_log) -> exit code`` runs one run on its node
        (``hybrid.sweep.run_on_node``). ConfigError when ``address`` reaches no Ray or no
        node can hold a run."""
        import ray

        self.ray, self.log_dir = ray, log_dir
        # A local Ray is started as the ray runtime starts it: loopback only, private token.
        self.session = connect(address, workers=1)
        self.remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=3)(run)
        total = ray.cluster_resources()
        self.capacity = int(min(total.get("CPU", 0) // cpus if cpus else 2**31, 2**31))
        if gpus:
            self.capacity = min(self.capacity, int(total.get("GPU", 0) // gpus))
        if self.capacity < 1:
            self.close()
            raise ConfigError(
                f"--cpus-per-run {cpus:g} / --gpus-per-run {gpus:g}: no node of this Ray "
                f"({total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs) can hold a run"
            )

    def start(self, run: RunToStart) -> Any:
        out, err = self.log_dir / f"{run.name}.out", self.log_dir / f"{run.name}.err"
        for log in (out, err):
            log.write_bytes(b"")
        return self.remote.remote(list(run.argv), str(run.run_dir), str(out), str(err))

    def poll(self, handle: Any) -> int | None:
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        try:
            return int(self.ray.get(handle))
        except self.ray.exceptions.TaskCancelledError:
            return -signal.SIGTERM
        except self.ray.exceptions.RayError as exc:  # its node was lost past the retries
            lines = [line for line in str(exc).splitlines() if line.strip()]
            raise TaskLost(lines[-1] if lines else type(exc).__name__) from None

    def stop(self, handles: Sequence[Any]) -> None:
        for handle in handles:
            self.ray.cancel(handle)  # KeyboardInterrupt in the task: it stops its run
        _, late = self.ray.wait(list(handles), num_returns=len(handles), timeout=self.CANCEL_WAIT_S)
        for handle in late:
            self.ray.cancel(handle, force=True)

    def close(self) -> None:
        if self.session is not None:  # ours to stop (a notebook's own Ray is left running)
            self.session.close()
            self.session = None


__all__ = ["RayBackend", "RunToStart"]
