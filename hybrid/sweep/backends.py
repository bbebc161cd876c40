"""Where a run executes: ``LocalBackend`` (a ``hybrid train`` process here) and
``run_on_node`` (the body of a Ray task, hybrid/runtimes/ray_tasks.py); both tie the run's
process group to the runner and stop it whole."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybrid.sweep.planning import PlannedRun
from hybrid.sweep.state import is_complete, is_finished

RUN_ENV = {"WANDB_MODE": "offline"}


RUN_ENV_REMOVED = ("WANDB_SWEEP_ID", "WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH")
"""A run started by this runner is never part of an online sweep."""


def _run_env() -> dict[str, str]:
    env = dict(os.environ, **RUN_ENV)
    for key in RUN_ENV_REMOVED:
        env.pop(key, None)
    return env


class LocalBackend:
    """Each run is a ``hybrid train`` process on this machine."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir

    def start(self, run: PlannedRun) -> subprocess.Popen[bytes]:
        if run.run_dir.exists() and not is_finished(run.run_dir):  # died half-way: start afresh
            shutil.rmtree(run.run_dir)
        with (
            open(self.log_dir / f"{run.name}.out", "wb") as out,
            open(self.log_dir / f"{run.name}.err", "wb") as err,
        ):
            return subprocess.Popen(
                run.argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=_run_env(),
                **_die_with_parent(),
            )

    def poll(self, handle: subprocess.Popen[bytes]) -> int | None:
        return handle.poll()

    def stop(self, handles: Sequence[subprocess.Popen[bytes]]) -> None:
        _stop(dict.fromkeys(handles))

    def close(self) -> None:
        pass


def run_on_node(argv: Sequence[str], run_dir: str, out_log: str, err_log: str) -> int:
    """The body of a ray-backend run, on whichever node Ray placed it: one ``hybrid train``.

    A run directory without summary.json is a retry after its node was lost (Ray re-runs the
    task): start afresh. ``ray.cancel`` (pruning, Ctrl-C) raises KeyboardInterrupt here, which
    stops the run's process group as the local backend does.
    """
    path = Path(run_dir)
    if path.exists() and not is_complete(path):
        shutil.rmtree(path)
    with open(out_log, "ab") as out, open(err_log, "ab") as err:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=_run_env(),
            **_die_with_parent(),
        )
    try:
        return proc.wait()
    except BaseException:
        _stop({proc: None})
        raise


def _die_with_parent() -> dict[str, Any]:
    """Popen arguments that tie a run to this runner, so that a SIGKILLed sweep leaves no run.

    Each run leads a process group of its own (its env workers, Ray...), which ``_stop``
    signals whole. On Linux the kernel also sends the run SIGTERM when this runner dies,
    however it dies (PR_SET_PDEATHSIG, set in the child before exec): SIGTERM rather than
    SIGKILL, so the run stops its own workers on the way out.
    """
    if os.name != "posix":
        return {}
    # A session of its own (Python 3.10 has no process_group=): its own group, no terminal.
    if not sys.platform.startswith("linux"):
        return {"start_new_session": True}
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    runner = os.getpid()

    def set_parent_death_signal() -> None:  # runs in the child, between fork and exec
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != runner:  # the runner died before prctl: nobody will signal us
            os._exit(1)

    return {"start_new_session": True, "preexec_fn": set_parent_death_signal}


def _stop(running: dict[subprocess.Popen[bytes], Any]) -> None:
    """SIGTERM each run's process group, then SIGKILL what is left of it after 10 s."""
    for proc in running:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)  # the run leads its group (_die_with_parent)
    except (AttributeError, ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
