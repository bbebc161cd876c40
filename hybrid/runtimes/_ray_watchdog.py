"""Ends a local Ray whose driver died without closing it (SIGKILL, OOM kill, power cut of
the process), and removes its private directory.

``ray.init`` starts the GCS and the raylet, which start agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) and workers; when the driver is killed outright nothing runs its
clean-up, and the agents, reparented to PID 1, live on with the directory that holds the
run's token and sockets. So the ray runtime starts this watchdog beside each local Ray it
starts: a small process of the standard library only (run by its path, so it imports
neither hybrid, torch nor Ray), in a session of its own so that a signal to the driver's
process group does not reach it. It waits for the driver to exit (a pidfd where Linux has
one, else polling), then SIGKILLs every process of that Ray (those whose command line names
the private directory, and their descendants) and removes the directory. A driver that
closes its Ray normally stops the watchdog first (SIGTERM), and nothing is killed twice.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.5
"""How often the driver is looked for where no pidfd is available."""


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): a pid is the same process only
    with the same start time. None when it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _names(pid: str, needle: bytes) -> bool:
    """Whether process ``pid``'s command line or environment names ``needle``: Ray's
    processes inherit the run's RAY_AUTH_TOKEN_PATH, which lies in its private directory,
    even the agents that rename themselves ``ray::...`` and outlive their parent."""
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                if needle in f.read():
                    return True
        except OSError:
            continue  # another user's process, or gone
    return False


def processes_of(private_dir: Path) -> dict[int, str]:
    """pid -> start time of a local Ray's processes: those whose command line or environment
    names its directory (GCS, raylet, monitors, agents) and all their descendants (workers).
    This process is never one of them."""
    table: dict[int, tuple[int, str, bool]] = {}  # pid -> (parent, start time, names it)
    needle = str(private_dir).encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), fields[19], _names(entry, needle))
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
    me = os.getpid()
    found = {pid for pid, (_, _, named) in table.items() if named and pid != me}
    grew = True
    while grew:
        children = {pid for pid, (parent, _, _) in table.items() if parent in found}
        children.discard(me)
        grew = not children <= found
        found |= children
    return {pid: table[pid][1] for pid in found}


def kill_processes(processes: dict[int, str]) -> None:
    """SIGKILL those of ``processes`` still alive (the same process: same start time)."""
    for pid, started in processes.items():
        if start_time(pid) != started:
            continue  # gone, or the pid was reused
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue  # gone meanwhile


def end_ray(private_dir: Path) -> None:
    """Kill every process of the Ray in ``private_dir`` (twice: a process that was starting
    a child while we listed), then remove the directory."""
    for _ in range(2):
        kill_processes(processes_of(private_dir))
        time.sleep(0.2)
    shutil.rmtree(private_dir, ignore_errors=True)


def wait_for_exit(pid: int, started: str, private_dir: Path) -> dict[int, str]:
    """Return once process ``pid`` (started at ``started``) has exited, with the processes
    of the Ray in ``private_dir`` seen meanwhile (listed every ``POLL_S``): when the driver
    dies its raylet may go first, and agents it started are no longer its descendants."""
    seen: dict[int, str] = {}
    pidfd_open = getattr(os, "pidfd_open", None)
    fd = -1
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except OSError:
            fd = -1
    try:
        while start_time(pid) == started:
            seen.update(processes_of(private_dir))
            if fd >= 0:
                select.select([fd], [], [], POLL_S)  # wakes at once when the driver exits
            else:
                time.sleep(POLL_S)
    finally:
        if fd >= 0:
            os.close(fd)
    return seen


def main(argv: list[str]) -> int:
    """``_ray_watchdog.py DRIVER_PID DRIVER_START_TIME PRIVATE_DIR``."""
    pid, started, private_dir = int(argv[0]), argv[1], Path(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal is the driver's
    seen = wait_for_exit(pid, started, private_dir)
    kill_processes(seen)
    end_ray(private_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
