"""The local Ray a run starts is private, leaves nothing behind when its driver is killed,
and a --ray-address that is not Ray fails in one line within a bounded time. Every
server these tests start listens on loopback only."""

from __future__ import annotations

import http.server
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hybrid.errors import ConfigError

ray = pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")

from hybrid.runtimes._ray_watchdog import processes_of  # noqa: E402
from hybrid.runtimes.ray import probe_address  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server():
    """A loopback TCP server that accepts and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}", accepted
    stop.set()
    thread.join(2)
    for conn in accepted:
        conn.close()
    server.close()


@pytest.fixture
def web_server():
    """``python -m http.server`` in this process, on loopback."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_web_server_is_not_taken_for_ray(web_server):
    with pytest.raises(ConfigError, match="does not answer as Ray"):
        probe_address(web_server, timeout=5)


def test_a_silent_server_is_not_taken_for_ray(silent_server):
    with pytest.raises(ConfigError, match="does not answer as Ray") as caught:
        probe_address(silent_server[0], timeout=1)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("address", ["::::", "127.0.0.1:0", "127.0.0.1:99999", ":6379", "x y"])
def test_a_malformed_address_is_one_line(address):
    with pytest.raises(ConfigError, match=r"^ray_address: "):
        probe_address(address)


def test_a_refusing_address_is_one_line():
    with pytest.raises(ConfigError, match="nothing answers"):
        probe_address(f"127.0.0.1:{_free_port()}", timeout=2)


def _cli(*argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hybrid.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, WANDB_MODE="offline", **kwargs.pop("env", {})),
        start_new_session=True,
        **kwargs,
    )


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_the_cli_refuses_a_server_that_is_not_ray_in_one_line(tmp_path, web_server, command):
    if command == "train":
        argv = ["train", "--runtime", "ray", "--ray-address", web_server, "--workers", "1",
                "--out", str(tmp_path / "run")]  # fmt: skip
    else:
        spec = tmp_path / "s.yaml"
        spec.write_text(
            'command: ["${env}", hybrid, train, "${args}"]\n'
            "method: grid\nparameters:\n  seed: {values: [0]}\n"
        )
        argv = ["sweep", str(spec), "--backend", "ray", "--ray-address", web_server,
                "--out", str(tmp_path / "out")]  # fmt: skip
    child = _cli(*argv)
    _, err = child.communicate(timeout=120)  # ray.init alone would retry past 90 s
    assert child.returncode == 2, err[-2000:]
    assert len(err.strip().splitlines()) == 1 and "does not answer as Ray" in err, err[-2000:]


def test_sigterm_is_honoured_while_the_address_is_probed(tmp_path, silent_server):
    address, accepted = silent_server
    child = _cli(
        "train", "--runtime", "ray", "--ray-address", address, "--workers", "1",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not accepted:  # the probe is connected and waits for a reply that never comes
        assert child.poll() is None, child.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the run never probed the address"
        time.sleep(0.01)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode in (143, 2), err[-2000:]  # stopped, or the probe's own deadline
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]


# --- the local Ray: private, and gone when its driver is SIGKILLed -------------------------

START_AND_REPORT = """\
import json, os, stat, sys
from hybrid.runtimes.ray import connect
session = connect("", 1)
modes = {}
for root, dirs, files in os.walk(session.private_dir):
    for path in [root] + [os.path.join(root, f) for f in files]:
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode) or stat.S_ISSOCK(mode) or path.endswith("auth_token"):
            modes[path] = stat.S_IMODE(mode)
print(json.dumps({"dir": str(session.private_dir), "modes": modes}), flush=True)
sys.stdin.read()  # until the test kills this driver
"""


def _short_tmp(tmp_path_factory) -> Path:
    # Ray's socket paths must stay short: a folder of its own under /tmp for each test, so
    # that this test's private directory is told apart from other runs' on the machine
    folder = Path("/tmp") / f"hrt-{secrets.token_hex(3)}"
    folder.mkdir(mode=0o700)
    return folder


def _gone(private_dir: Path, seconds: float = 60) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = processes_of(private_dir)
        if not left and not private_dir.exists():
            return {}
        time.sleep(0.5)
    return processes_of(private_dir)


def test_the_private_directory_is_owner_only_and_a_killed_driver_leaves_nothing(
    tmp_path_factory,
):
    tmp = _short_tmp(tmp_path_factory)
    try:
        driver = subprocess.Popen(
            [sys.executable, "-c", START_AND_REPORT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, TMPDIR=str(tmp)),
        )
        report = json.loads(driver.stdout.readline())
        private_dir = Path(report["dir"])
        assert private_dir.parent == tmp
        assert processes_of(private_dir), "Ray's processes are not found by their directory"
        loose = {p: oct(m) for p, m in report["modes"].items() if m & 0o077}
        assert not loose, f"open to other users: {loose}"
        assert any("sockets" in p for p in report["modes"])
        driver.kill()  # SIGKILL: no clean-up of its own runs
        driver.wait()
        left = _gone(private_dir)
        assert not left, f"Ray processes left after SIGKILL of the driver: {left}"
        assert not private_dir.exists()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_sigkill_of_a_ray_run_or_sweep_leaves_no_process_behind(
    tmp_path, tmp_path_factory, command
):
    tmp = _short_tmp(tmp_path_factory)
    out = tmp_path / "out"
    if command == "train":
        argv = ["train", "--runtime", "ray", "--workers", "1", "--total-env-steps", "10000000",
                "--stop-when-solved=False", "--out", str(out)]  # fmt: skip
    else:
        spec = tmp_path / "s.yaml"
        spec.write_text(
            textwrap.dedent("""\
            method: grid
            parameters:
              seed: {values: [0, 1]}
              total_env_steps: {value: 10000000}
              stop_when_solved: {value: false}
            """)
        )
        argv = ["sweep", str(spec), "--backend", "ray", "--cpus-per-run", "1", "--out", str(out)]
    child = _cli(*argv, env={"TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 180
        metrics = out / "metrics.jsonl" if command == "train" else out / "seed=0" / "metrics.jsonl"
        while not (metrics.exists() and metrics.stat().st_size):  # the run is under way
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.5)
        dirs = [d for d in tmp.iterdir() if d.name.startswith("hybrid-ray-")]
        assert len(dirs) == 1
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        left = _gone(dirs[0])
        assert not left, f"processes left after SIGKILL of hybrid {command}: {left}"
        assert not dirs[0].exists()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
