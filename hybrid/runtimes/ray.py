"""The ray runtime: Ray places and supervises the workers; tasks travel on a direct connection.

Install with ``pip install 'hybrid-rl[ray]'``. Each worker is a Ray actor that wraps a
``Worker`` (its own envs and local model, one CPU, ``torch_threads`` threads), warmed
up before the run's clock starts. With edge clients (``clients``) the ``workers`` actors
are a pool: client k's task runs on whichever actor is free, which builds the client
for that task and releases it (``hybrid.runtimes.pool``), so K = 10,000 clients need
no more actors, CPUs or memory than ``workers`` do.

Why not one Ray call per task
-----------------------------
A Ray actor call costs about a millisecond on a small machine (Ray's own figure for
a task launch): on 2 vCPUs ~0.7 ms from submission to result and ~1 ms of CPU split
between the driver and the actor, as much as a default 10-step CartPole task, and
the actor idles while the result and the next task travel. Ray's compiled graphs
halve the round trip, but their reader spins while it waits, which on few cores
takes the actors' CPU. So Ray does what it is good at (placing the actors on the
cluster's resources, starting, killing and restarting them) and each actor, once
warm, opens one connection for its tasks: the driver sends a task (θ as a numpy
array, 36 KB for the CartPole model, with the snapshot's version, task kind and
extras) and the actor sends back the update's record with its payload as numpy
arrays. A task then costs about what a pipe costs the processes runtime.

The connection is ``multiprocessing.connection`` over TCP: the actor listens on its
node's address (127.0.0.1 when Ray is local) on a free port, and the driver connects
with a 32-byte key drawn for the run and handed to the actors through Ray: the HMAC
challenge comes before anything is unpickled, so nobody without the key can send
the actor a task. Anyone on the node can still connect to the port: a peer that fails
the handshake, or stays silent past ``HANDSHAKE_TIMEOUT_S``, is dropped and the actor
keeps listening for its driver, whose own connect has a deadline (``CONNECT_TIMEOUT_S``)
past which the actor counts as failed and is replaced. On a cluster the driver must
reach the actors' nodes on ephemeral ports, as Ray's own worker ports already require.

Ordering is the earliest finished first: every result that has arrived when the loop
asks is ordered by the time its task finished (wall clock, roughly comparable across
nodes).

Local by default (``ray_address`` empty): Ray starts here, bound to 127.0.0.1 only
(Ray 2.x resolves ``127.0.0.1`` to the machine's routable address unless it is told
that this is not a cluster, which we tell it for the length of ``ray.init``), no
dashboard, warnings only, worker logs not forwarded, usage statistics off. Loopback is
not enough on a shared machine: any local user could ``ray.init(address=...)`` to the
run's GCS port and run code in its workers. So the local instance requires Ray's own
token authentication (``RAY_AUTH_MODE=token``, Ray >= 2.52) with a fresh token kept in
a private directory of the run (0700, under the temp dir, never ``~/.ray``), which also
holds Ray's session files and is removed, token included, when the runtime closes. A
token the user configured (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``) is used instead,
and ``RAY_AUTH_MODE=disabled`` is obeyed with a warning. ``ray_address`` joins an existing
cluster instead (first probed with a 5 s TCP connect, so a wrong address is one line,
not minutes of retries); its security is the cluster's, and every node needs hybrid-rl
installed. Ray is shut down on ``close`` only if this runtime started it, so a
notebook's own ``ray.init`` survives a run. SIGINT or SIGTERM while Ray or the actors
start shuts the local Ray down whole (no agent left behind) and raises
``StartupInterrupted`` (exit code 130 / 143 in the CLI).

Decentralized runs (``gossip``, ``ad-psgd``): each actor holds its own replica and its
optimizer state, and the replicas mix between actors through a ``torch.distributed`` gloo
group (``hybrid.runtimes._gloo``); the driver sends small commands on the task connection
and gathers the rows only when the loop needs their average. ``sgp`` and runs with a codec
send each replica in its task's message instead (``per_worker_snapshots``).

Faults are handled as in the processes runtime: an actor that dies (``ray.kill``, a
SIGKILL, its node lost) closes its connection, and one whose task raised reports the
error and stops serving; either is counted, logged and replaced by a new actor with
a fresh seed stream. A lost task re-runs on the new actor, from the freshest θ
dispatched, once it is warm and connected; meanwhile the other workers carry on, so
a ``sync`` round or a ``bounded`` wait never waits on a dead worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch

from hybrid.core.worker import Worker
from hybrid.envs import EnvInfo
from hybrid.errors import ConfigError
from hybrid.protocol import ComputeGradient, Snapshot, Task, Update
from hybrid.runtimes import _gloo
from hybrid.runtimes._gloo import ActorReplica, ActorReplicas, Rendezvous
from hybrid.runtimes._parallel import (
    Executor,
    Supervisor,
    dumps_message,
    pack,
    payload_tensor,
    physical_cores,
    unpack,
    update_record,
    warm_up,
    warn_if_oversubscribed,
)
from hybrid.runtimes._ray_watchdog import kill_processes as _kill_processes
from hybrid.runtimes._ray_watchdog import processes_of as _processes_of
from hybrid.runtimes._ray_watchdog import start_time
from hybrid.runtimes.pool import WorkerPool

if TYPE_CHECKING:
    from hybrid.core.global_model import GlobalModel
    from hybrid.runtimes.settings import RuntimeSettings

STARTUP_TIMEOUT_S = 300.0
"""How long an actor may take to start, warm up and connect (many at once on a busy node)."""
RESTART_POLL_S = 0.05
"""While an actor is being replaced, the driver looks this often whether it is ready."""
HANDSHAKE_TIMEOUT_S = 5.0
"""How long an actor waits for each message of a connecting peer's HMAC handshake: a local
process that connects to its port and says nothing (or the wrong thing) is dropped after
this, and the actor goes on waiting for the driver."""
CONNECT_TIMEOUT_S = 30.0
"""How long the driver waits to reach an actor and for each message of the handshake (longer
than HANDSHAKE_TIMEOUT_S: an actor may first have to drop an intruder). Past it the actor
counts as failed and is replaced."""

log = logging.getLogger("hybrid.runtimes")

QUIET_DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0"}
PROBE_TIMEOUT_S = 5.0
"""How long ``--ray-address`` may take to accept a TCP connection before the run gives up:
ray.init would retry an unreachable address for minutes, printing a log line a second."""


@contextlib.contextmanager
def _deadline(conn: Connection, seconds: float) -> Iterator[None]:
    """Make each blocking read and write on ``conn`` fail (OSError) after ``seconds``.

    SO_RCVTIMEO/SO_SNDTIMEO on the socket itself: ``Connection`` reads its file descriptor
    directly, so a Python socket timeout (a non-blocking fd) would break it instead.
    """
    with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:  # a dup
        whole = int(seconds)
        limit = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        none = struct.pack("ll", 0, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
        try:
            yield
        finally:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, none)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, none)


HANDSHAKE_ERRORS = (AuthenticationError, EOFError, OSError, ValueError, AssertionError)
"""What a failed HMAC handshake raises: a wrong key, a peer that hung up or went silent
(OSError: the deadline), or a peer that sent something else (multiprocessing checks the
challenge's prefix with ``assert``)."""


def open_connection(
    address: tuple[str, int], authkey: bytes, timeout: float = CONNECT_TIMEOUT_S
) -> Connection:
    """The driver's end: ``multiprocessing.connection.Client`` with a deadline on every step."""
    sock = socket.create_connection(address, timeout=timeout)
    sock.settimeout(None)  # Connection needs a blocking fd; _deadline bounds the handshake
    conn = Connection(sock.detach())
    try:
        with _deadline(conn, timeout):
            answer_challenge(conn, authkey)
            deliver_challenge(conn, authkey)
    except BaseException:
        conn.close()
        raise
    return _no_delay(conn)


def _no_delay(conn: Connection) -> Connection:
    """Send each message at once: a message larger than a few KB goes out as a header and a
    body, and Nagle's algorithm would hold the body until the header's delayed ACK (40 ms)."""
    with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:  # a dup
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


class ActorWorker:
    """The body of one Ray actor: a warmed-up ``Worker`` that runs tasks sent on its connection."""

    def __init__(
        self,
        worker_id: int,
        incarnation: int,
        settings: RuntimeSettings,
        info: EnvInfo,
        pool: WorkerPool,
    ) -> None:
        torch.set_num_threads(settings.torch_threads)  # 1 by default: tiny MLPs gain nothing more
        self.worker_id, self.settings, self.info = worker_id, settings, info
        self.pool = pool
        self.worker: Worker | None = None
        if self.pool.persistent:
            self.worker = self.pool.build(worker_id, incarnation)
            warm_up(self.worker)
        else:  # edge clients, built per task: pay the lazy start-up on a throw-away one
            client = self.pool.build(0)
            warm_up(client)
            client.close()
        self._listener: Listener | None = None
        self.replica: ActorReplica | None = None
        """A decentralized run's replica, when this actor holds it (``hybrid.runtimes._gloo``)."""

    def listen(self, authkey: bytes) -> tuple[Any, int]:
        """Open this actor's end of the connection; returns its address and the actor's pid."""
        self._authkey = authkey
        # No authkey here: _accept_driver runs the same HMAC handshake, with a deadline.
        self._listener = Listener((ray.util.get_node_ip_address(), 0))
        return self._listener.address, os.getpid()

    def _accept_driver(self) -> Connection:
        """The first connection that passes the HMAC handshake (before anything is unpickled).

        Anyone on the node can connect to the port: a peer with the wrong key, or one that
        stays silent past HANDSHAKE_TIMEOUT_S, is dropped and the actor keeps listening, so
        an intruder can neither stop the actor nor hold it from its driver.
        """
        assert self._listener is not None, "listen() first"
        while True:
            conn = self._listener.accept()
            try:
                with _deadline(conn, HANDSHAKE_TIMEOUT_S):
                    deliver_challenge(conn, self._authkey)
                    answer_challenge(conn, self._authkey)
            except HANDSHAKE_ERRORS:
                conn.close()
                continue
            return _no_delay(conn)

    def serve(self) -> None:
        """Run the tasks that come on the connection until the driver closes it.

        This call holds the actor for the rest of its life: Ray runs one call at a time.
        A task that raises is reported on the connection, and the actor stops serving.
        """
        with self._accept_driver() as conn:
            self._listener.close()
            try:
                while (task := conn.recv()) is not None:
                    try:
                        if isinstance(task[0], str):  # a command on this actor's replica
                            reply = self.replica_command(*task)
                            if reply is not None:
                                conn.send_bytes(dumps_message(("reply", reply)))
                            continue
                        record = self.run(*task)
                    except Exception:
                        conn.send_bytes(dumps_message(("error", traceback.format_exc())))
                        return
                    conn.send_bytes(dumps_message(("result", record)))
            except (EOFError, OSError):
                return  # the driver has gone: nobody is left to report to
            finally:
                if self.replica is not None:
                    self.replica.close()

    def replica_command(self, kind: str, name: str, body: dict[str, Any]) -> Any:
        """Load, join the gloo group, step and mix, or report this actor's replica."""
        del kind
        if self.replica is None:
            self.replica = ActorReplica(body.pop("step_settings"))
        body.pop("step_settings", None)
        if name == "load":
            self.replica.load(**body)
        elif name == "join":
            self.replica.join(**body, node_ip=ray.util.get_node_ip_address())
        elif name == "apply":
            self.replica.apply(body)
        elif name == "report":
            return self.replica.report()
        else:
            raise ValueError(f"unknown replica command {name!r}")
        return None

    def run(
        self,
        params: np.ndarray,
        version: int,
        task: Task | None = None,
        extras: Any = None,
        client: int | None = None,
    ) -> dict[str, Any]:
        """One task: on this actor's own worker, or (``client``) on that edge client, built
        for the task and released after it, as on every runtime."""
        started_at = time.time()  # wall clock: roughly comparable across the nodes
        task = task if task is not None else ComputeGradient()
        if params is None:  # a decentralized run's task, on this actor's own replica
            assert self.replica is not None, "the driver seeds the replica before any task"
            start = self.replica.row.detach().clone()
        else:
            start = payload_tensor(params)
        snapshot = Snapshot(start, version, extras=unpack(extras or {}), task=task)
        if client is not None:
            update = self.pool.run(client, snapshot)
        else:
            assert self.worker is not None, "edge-client actors run a client's task"
            update = self.worker.run_task(snapshot)
            if self.replica is not None:
                self.replica.keep(update)  # stepped when the loop's step lists it
        record = update_record(update)
        record.update(wire=pack(update.payload), started_at=started_at, finished_at=time.time())
        return record


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Make ``ray.init`` bind every service to 127.0.0.1, then put the settings back.

    Ray decides "this is a cluster node, advertise the routable IP" from a constant read at
    import; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is the documented switch, the constant is
    where it lands once ray is imported. Both are restored so that a later run in this
    process can still join a cluster.
    """
    try:  # private: guard against a Ray that moved it; the env variable still applies
        from ray._private import ray_constants
    except ImportError:
        ray_constants = None
    name = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    old_env, old_flag = os.environ.get(name), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[name] = "0"
    if old_flag is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if old_flag is not None:
            ray_constants.ENABLE_RAY_CLUSTER = old_flag
        if old_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old_env


class StartupInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while Ray or the actors were starting; all was shut down."""

    def __init__(self, signum: int) -> None:
        super().__init__(
            f"stopped by {signal.Signals(signum).name} while the ray runtime was starting"
        )
        self.signum = signum
        self.exit_code = 128 + signum  # what a shell reports for a process the signal ended


class _StartupSignals:
    """SIGINT and SIGTERM raise StartupInterrupted while the runtime starts (then restored).

    ray.init installs its own SIGTERM handler (``sys.exit(15)``) as it starts: ``rearm``
    puts ours back afterwards and keeps Ray's to restore. After the first signal, later
    ones are ignored until the clean-up is done: a second Ctrl-C must not cut it short.
    """

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.fired = False

    def __enter__(self) -> _StartupSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if not self.fired:
            self.fired = True
            raise StartupInterrupted(signum)

    def rearm(self) -> None:
        if signal.SIGTERM in self.previous:
            self.previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handler)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _parse_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port``, ``ray://host:port`` or ``[v6]:port``; None for ``auto``."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe_address(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise ConfigError (one line) unless ``address`` is an address whose server answers,
    within ``timeout``, as Ray's GCS (or Ray Client) does: over gRPC, whose HTTP/2 server
    sends a SETTINGS frame first. Something else that accepts TCP (a web server) would make
    ``ray.init`` retry for minutes, deaf to SIGTERM."""
    where = _parse_address(address)
    if where is None:
        if address.strip().lower() == "auto":
            return  # Ray finds the cluster this machine belongs to itself
        raise ConfigError(
            f"ray_address: {address!r} is not an address; give host:port (the head's GCS "
            "port, 6379 unless ray start --head said otherwise), ray://host:port or auto, or "
            "leave it empty for a local Ray"
        )
    host, port = where
    if not host or not 0 < port < 65536:
        raise ConfigError(
            f"ray_address: {address!r} needs a host and a port in 1..65535 (host:port)"
        )
    try:
        sock = socket.create_connection(where, timeout=timeout)
    except (OSError, ValueError, UnicodeError) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else getattr(exc, "strerror", "")
        raise ConfigError(
            f"ray_address: nothing answers at {address} ({reason or exc} within "
            f"{timeout:.0f} s); start the cluster's head there (ray start --head), or leave "
            "--ray-address empty for a local Ray"
        ) from None
    with sock:
        if not _answers_http2(sock, timeout):
            raise ConfigError(
                f"ray_address: {address} accepts connections but does not answer as Ray "
                f"(no gRPC reply within {timeout:.0f} s); give the head's GCS port (6379 "
                "unless ray start --head said otherwise) or its Ray Client port (ray://)"
            )


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113, 3.4)."""
_SETTINGS = 4
"""The type of a SETTINGS frame: an HTTP/2 server's first frame."""


def _answers_http2(sock: socket.socket, timeout: float) -> bool:
    """Whether the peer answers the HTTP/2 preface with a frame header of a SETTINGS frame
    within ``timeout`` (overall, however the reply is cut into packets)."""
    deadline = time.monotonic() + timeout
    header = b""
    try:
        sock.sendall(_HTTP2_PREFACE)
        while len(header) < 9:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            sock.settimeout(left)
            chunk = sock.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except OSError:
        return False
    return header[3] == _SETTINGS


@dataclass
class RaySession:
    """The Ray this runtime started or joined: what ``close`` must undo.

    A local instance keeps everything in a private directory (0700) of its own: the token
    that admits clients to its GCS, and Ray's session directory, so that its processes can
    be found and ended even when ``ray.init`` was interrupted half-way.
    """

    private_dir: Path | None = None
    saved_env: dict[str, str | None] = field(default_factory=dict)
    watchdog: subprocess.Popen[bytes] | None = None
    """Ends this Ray and removes ``private_dir`` if this process dies without ``close``."""

    def set_env(self, name: str, value: str) -> None:
        self.saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def close(self) -> None:
        """Stop Ray (and, for a local instance, every process of it), put the environment
        back and remove the private directory with its token."""
        # Listed before shutdown: once the raylet is gone its agents are no longer its
        # children, and ray.shutdown ends none of them when ray.init was interrupted.
        if self.watchdog is not None:  # this close does its work
            self.watchdog.terminate()
            self.watchdog.wait()
            self.watchdog = None
        leftovers = _processes_of(self.private_dir) if self.private_dir is not None else {}
        ray.shutdown()
        _kill_processes(leftovers)
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.saved_env = {}
        _reload_ray_auth_settings()
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = None


def _reload_ray_auth_settings() -> bool:
    """Make this process's Ray read RAY_AUTH_* again (it caches them); False if it has none.

    ``Config.initialize`` before the cache reset, as Ray's own test helpers do: a core
    worker thread still draining would otherwise reload a token that is being removed.
    """
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # a Ray before 2.52: no token authentication
        return False
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    return True


def _private_token(session: RaySession) -> None:
    """Turn on Ray's token authentication with a fresh token readable only by this user.

    Without it, any local user could ``ray.init(address="127.0.0.1:<port>")`` and run code
    in this run's workers. A token the user configured (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH)
    is used as it is; RAY_AUTH_MODE=disabled is obeyed, loudly.
    """
    assert session.private_dir is not None
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    if mode == "disabled":
        warnings.warn(
            "RAY_AUTH_MODE=disabled: any local user can connect to this run's Ray and run "
            "code as you in its workers; unset it to let the run use a private token",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    if not _reload_ray_auth_settings():
        warnings.warn(
            f"Ray {ray.__version__} has no token authentication (Ray >= 2.52 has): any local "
            "user can connect to this run's Ray and run code as you; upgrade Ray, or run on "
            "a machine you do not share",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    session.set_env("RAY_AUTH_MODE", "token")
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        token = session.private_dir / "auth_token"
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        session.set_env("RAY_AUTH_TOKEN_PATH", str(token))  # Ray's processes inherit it
    _reload_ray_auth_settings()


def connect(address: str, workers: int) -> RaySession | None:
    """Join the Ray cluster at ``address``, or (empty) start a local one with a CPU for each
    of ``workers``; the session to close, or None if Ray was already running in this process
    (then it is not ours to stop)."""
    if ray.is_initialized():
        return None
    session = RaySession()
    for key, value in QUIET_DEFAULTS.items():
        if key not in os.environ:
            session.set_env(key, value)
    quiet: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address:
            probe_address(address)
            try:
                ray.init(address=address, **quiet)
            except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
                lines = [line for line in str(exc).splitlines() if line.strip()]
                raise ConfigError(
                    f"ray_address: Ray at {address} could not be joined "
                    f"({(lines[0] if lines else type(exc).__name__)[:200]})"
                ) from None
            return session
        # Short: Ray's socket paths under it must fit in 107 bytes.
        session.private_dir = Path(tempfile.mkdtemp(prefix="hybrid-ray-", dir=_short_tmp()))
        session.watchdog = _start_watchdog(session.private_dir)
        _private_token(session)
        with _loopback_only():
            ray.init(
                num_cpus=max(workers, physical_cores()),  # one CPU per actor must fit
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                # Ray makes its temp dir and session folders 0777: inside our 0700 folder
                # nobody else can reach them (and they are narrowed below once made)
                _temp_dir=str(session.private_dir / RAY_TEMP_NAME),
                **quiet,
            )
        _owner_only(session.private_dir)
    except BaseException:
        session.close()
        raise
    bound = ray.util.get_node_ip_address()
    if bound != "127.0.0.1":
        warnings.warn(
            f"this Ray version bound the local instance to {bound}, not to loopback only; "
            "firewall it, or start Ray yourself and pass --ray-address",
            RuntimeWarning,
            stacklevel=2,
        )
    return session


RAY_TEMP_NAME = "r"
"""Ray's temp dir inside the private one (one letter: socket paths must stay short)."""


def _start_watchdog(private_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``_ray_watchdog`` for this process and ``private_dir``: if this process dies
    without closing its Ray (SIGKILL), the watchdog ends Ray's daemons and removes the
    directory. Run by its file path, in a session of its own, with no inherited files."""
    script = Path(__file__).with_name("_ray_watchdog.py")
    me = os.getpid()
    return subprocess.Popen(
        [sys.executable, "-S", "-I", str(script), str(me), str(start_time(me)), str(private_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _owner_only(private_dir: Path) -> None:
    """Narrow what Ray made under ``private_dir`` to its owner: folders 0700, files (the
    sockets among them) only their owner's bits. Ray creates them world-writable."""
    for root, _, files in os.walk(private_dir):
        with contextlib.suppress(OSError):
            os.chmod(root, 0o700)
        for name in files:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode & 0o700)  # group and others: none


def _short_tmp() -> str | None:
    default = tempfile.gettempdir()
    return default if len(default) <= 20 or not os.path.isdir("/tmp") else "/tmp"


@dataclass
class _Task:
    """A dispatched snapshot as it travels: θ as numpy, the version, the task, its extras;
    pickled once for persistent workers (a sync round's N tasks share it)."""

    version: int
    fields: tuple[Any, ...]
    message: bytes = b""


@dataclass(eq=False, kw_only=True)  # identity: one actor
class _Actor(Executor):
    """An actor: ``task`` is the pickled message of its assigned task."""

    handle: Any = None
    starting: Any = None
    """The ObjectRef of ``listen`` while the actor starts; None once connected."""
    serving: Any = None
    """The ObjectRef of ``serve``: kept so that Ray keeps the call's result."""
    conn: Connection | None = None
    pid: int = 0
    sent: bool = False
    """The assigned task went out on the current connection (else it goes once connected)."""
    started_at: float = 0.0
    joined: bool = False
    """Actor-held replicas: it holds one and is in the current gloo group (a task waits
    until then)."""
    reply: Any = None
    """Actor-held replicas: its answer to the last ``report``."""


class RayRuntime(Supervisor):
    """Workers as Ray actors; real wall-clock time; earliest completion first."""

    def __init__(
        self,
        settings: RuntimeSettings,
        info: EnvInfo,
        pool: WorkerPool,
        per_worker_snapshots: bool = False,
    ) -> None:
        """``pool``: who the workers are (``make_pool``); with edge clients, K
        clients share ``workers`` actors. ``per_worker_snapshots``: every task starts from
        parameters of its own (a decentralized run's replicas), so no task message is
        reused for the next task of the same version."""
        self.per_worker_snapshots = per_worker_snapshots
        if not settings.ray_address:
            warn_if_oversubscribed(settings.workers, "ray")
        super().__init__(settings, pool, time.time)
        self.info = info
        self._session: RaySession | None = None
        self._selector = selectors.DefaultSelector()
        self._latest: _Task | None = None
        self._closed = False
        self.executors: list[_Actor] = []
        self._actors = self.executors
        self._authkey = secrets.token_bytes(32)
        self._gloo: Rendezvous | None = None
        """Where the actors' gloo group meets, once they hold the replicas (replica_applier)."""
        self._actor_replicas: ActorReplicas | None = None
        self._seed: tuple[torch.Tensor, list[Any] | None] = (torch.empty(0), None)
        """What every actor loads when none holds a replica: θ₀, or a checkpoint's replicas."""
        self._step_settings: dict[str, Any] = {}
        self._started_replicas = False
        """The actors have held replicas since the last seed_replicas."""
        self._driver_bytes = 0
        """Bytes of replicas that went through the driver (seeding, gathering)."""
        # Until the actors are up, SIGINT/SIGTERM end the start-up here, with Ray shut down
        # whole (ray.init answers SIGTERM with sys.exit(15) and leaves its agents running).
        with _StartupSignals() as signals:
            try:
                try:
                    self._session = connect(settings.ray_address, settings.workers)
                except SystemExit as exc:  # Ray's SIGTERM handler, installed by ray.init
                    if exc.code != signal.SIGTERM:
                        raise
                    raise StartupInterrupted(signal.SIGTERM) from None
                signals.rearm()
                # SPREAD: one actor per node before a second on any (a lost node takes
                # the fewest workers; each node's cores and NIC serve its own actors).
                self._remote = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(
                    ActorWorker
                )
                for w in range(settings.workers):  # edge clients too: a pool of actors
                    self._actors.append(_Actor(worker_id=w))
                    self._spawn(self._actors[-1])
                self._await_startup()
            except BaseException:
                signals.fired = True  # a second signal must not cut the clean-up short
                self.close()
                raise
        self._origin = time.time()  # the workers are warm: the run begins

    # -- the Runtime protocol --

    def settle(self) -> None:
        # only the main process writes the global model; with actor-held replicas it is
        # their average, fetched now (the summary describes it)
        if self._actor_replicas is not None:
            self._actor_replicas.gather(self._actor_replicas.model)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            self._disconnect(actor)
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        self._selector.close()
        if self._gloo is not None:
            self._gloo.close()
        if self._session is not None:  # ours to stop (a notebook's own Ray is left running)
            self._session.close()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._started_replicas = False  # every actor is replaced: it loads the checkpoint's
        super().load_state_dict(state)

    def worker_pids(self) -> list[int]:
        """Each actor's process id, as it reported when it connected (0 while starting)."""
        return [a.pid for a in self._actors]

    # -- decentralized runs: the actors hold the replicas (hybrid.runtimes._gloo) --

    def replica_applier(self, model: GlobalModel, push_sum: bool) -> ActorReplicas | None:
        """The actors hold the replicas and mix them through gloo, for a decentralized
        scheduler that mixes without push-sum weights (gossip, ad-psgd) on persistent
        workers without a codec (an actor steps its replica along the update it computed,
        which must be what the loop accepted); None: the loop holds them (sgp)."""
        if (
            not self.per_worker_snapshots
            or not self.pool.persistent
            or self.settings.codec != "none"
            or push_sum
        ):
            return None
        self._gloo = Rendezvous(ray.util.get_node_ip_address())  # loopback for a local Ray
        self._step_settings = dict(model._step_settings)  # the twin GlobalModel.replica builds
        self._actor_replicas = ActorReplicas(model, len(self._actors), self)
        return self._actor_replicas

    def seed_replicas(self, rows: torch.Tensor, optimizers: list[Any] | None) -> None:
        """Every actor (now, and after a restart of all of them) starts from ``rows``."""
        self._seed = (rows.detach().cpu().clone(), optimizers)
        self._started_replicas = False  # a start or a resume: the actors load these
        for actor in self._actors:
            actor.joined = False
        if not any(a.starting is not None for a in self._actors):
            self._regroup()

    def absent(self) -> set[int]:
        """Workers whose actor holds no replica now (lost; its replacement not yet joined)."""
        return {a.worker_id for a in self._actors if not a.joined}

    def command(self, worker_id: int, name: str, body: Any) -> None:
        """Send a replica command to a joined actor, after what it was sent before."""
        actor = self._actors[worker_id]
        if actor.joined and actor.conn is not None:
            self._replica_command(actor, name, body)

    def gather_replicas(self) -> list[dict[str, Any]]:
        """Every actor's replica and optimizer state, through the driver: each answers once
        it has done what it was sent before (a busy one, after its task). An actor lost
        meanwhile is asked again once its replacement has joined."""
        for actor in self._actors:
            actor.reply = None
        asked: set[int] = set()
        while any(a.reply is None for a in self._actors):
            for actor in self._actors:
                if actor.worker_id not in asked and actor.joined and actor.conn is not None:
                    self._replica_command(actor, "report", {})
                    asked.add(actor.worker_id)
            if all(a.reply is not None for a in self._actors):
                break
            for actor in self._poll():
                self._restart(actor)
                asked.discard(actor.worker_id)
        replies = [a.reply for a in self._actors]
        self._driver_bytes += sum(r["row"].nbytes for r in replies)
        # should every actor be lost at once, the replicas restart from these
        rows = torch.stack([torch.from_numpy(r["row"]) for r in replies])
        self._seed = (rows, [r["optimizer"] for r in replies])
        return replies

    def replica_counters(self) -> dict[str, float]:
        assert self._gloo is not None
        return {
            "decentral/regroups": self._gloo.generation,
            "decentral/driver_bytes": self._driver_bytes,
            "decentral/gloo_bytes": self._actor_replicas.bytes_sent if self._actor_replicas else 0,
        }

    def _replica_command(self, actor: _Actor, name: str, body: dict[str, Any]) -> None:
        assert actor.conn is not None
        with contextlib.suppress(OSError):  # it died: its connection reads as closed next
            actor.conn.send_bytes(dumps_message(("replica", name, body)))

    def _regroup(self) -> None:
        """Form the next generation of the gloo group, every actor connected: at the start
        and after a resume every actor loads its replica from the driver; after a loss the
        replacement starts from the survivors' average (one all-reduce), with a fresh
        optimizer state. Tasks held for actors that were not in the group go out."""
        assert self._gloo is not None
        generation = self._gloo.next_generation()
        survivors = [a for a in self._actors if a.joined]
        rows, optimizers = self._seed
        if not survivors:
            if self._started_replicas:
                log.warning(
                    "every actor holding a replica was lost: the replicas start again from "
                    "the last ones gathered (at the last evaluation or checkpoint)"
                )
            for actor in self._actors:
                k = actor.worker_id
                state = optimizers[k] if optimizers else None
                load = {"row": rows[k].numpy(), "optimizer_state": state}
                self._replica_command(actor, "load", load | {"step_settings": self._step_settings})
                self._driver_bytes += rows[k].numel() * rows.element_size()
        for actor in self._actors:
            join = {
                "address": self._gloo.address,
                "generation": generation,
                "rank": actor.worker_id,
                "world": len(self._actors),
                "seed": bool(survivors) and len(survivors) < len(self._actors),
                "numel": rows.shape[1],
                "timeout_s": _gloo.GLOO_TIMEOUT_S,
                "step_settings": self._step_settings,
            }
            self._replica_command(actor, "join", join)
            actor.joined = True
        if survivors:
            log.warning(
                "the gloo group is re-formed (generation %d); %d replacement(s) start from "
                "the survivors' average",
                generation,
                len(self._actors) - len(survivors),
            )
        self._started_replicas = True
        for actor in self._actors:
            if actor.assigned and not actor.sent:
                self._send(actor)

    # -- the backend: spawn, send, poll --

    def _prepare(self, snapshot: Snapshot) -> _Task:
        if self._actor_replicas is not None:  # each actor trains its own replica: no θ travels
            extras = pack(snapshot.extras) if snapshot.extras else None
            return _Task(snapshot.version, (None, snapshot.version, snapshot.task, extras))
        if (
            self._latest is None
            or self._latest.version != snapshot.version
            or self.per_worker_snapshots
        ):
            extras = pack(snapshot.extras) if snapshot.extras else None
            fields = (snapshot.params.numpy(), snapshot.version, snapshot.task, extras)
            self._latest = _Task(snapshot.version, fields)
        return self._latest

    def _task_for(self, prepared: _Task, client: int | None) -> bytes:
        if client is not None:  # the edge client to build for it travels with the task
            return dumps_message((*prepared.fields, client))
        if not prepared.message:
            prepared.message = dumps_message(prepared.fields)
        return prepared.message

    def _free(self, actor: _Actor) -> bool:
        return actor.conn is not None

    def _lost(self, actor: _Actor) -> bool:
        return actor.assigned and actor.sent  # a task queued for a starting actor is no loss

    def _died(self, actor: _Actor) -> str:
        error = actor.last_error.strip()
        if error.startswith("Traceback"):
            return "raised: " + error.splitlines()[-1]
        return "died" + (f" ({error.splitlines()[-1]})" if error else "")

    def _kill(self, actor: _Actor) -> None:
        ray.kill(actor.handle, no_restart=True)

    def _poll(self, timeout: float | None = None) -> list[_Actor]:
        return self._handle_events(timeout)

    def _spawn(self, actor: _Actor) -> None:
        """Create the actor; it warms up, then opens its end of the connection (async)."""
        actor.handle = self._remote.remote(
            actor.worker_id, actor.incarnation, self.settings, self.info, self.pool
        )
        actor.starting = actor.handle.listen.remote(self._authkey)
        actor.started_at = time.monotonic()

    def _await_startup(self) -> None:
        """Wait until every actor is connected (at start and on resume).

        An actor that fails to start or to connect is replaced like one that dies later;
        one that fails MAX_CONSECUTIVE_FAILURES times in a row stops the run with its error.
        """
        while any(a.starting is not None for a in self._actors):
            for actor in self._poll_starting(timeout=RESTART_POLL_S):
                self._restart(actor)

    def _poll_starting(self, timeout: float) -> list[_Actor]:
        """Connect the actors whose ``listen`` has returned; return those that failed."""
        starting = {a.starting: a for a in self._actors if a.starting is not None}
        if not starting:
            return []
        ready, _ = ray.wait(list(starting), num_returns=len(starting), timeout=timeout)
        failed = []
        for ref in ready:
            actor = starting[ref]
            actor.starting = None
            try:
                address, actor.pid = ray.get(ref)
                actor.serving = actor.handle.serve.remote()
                actor.conn = open_connection(address, self._authkey)
            except ray.exceptions.RayError as exc:  # it died, or its constructor raised
                actor.last_error = str(exc)
                failed.append(actor)
                continue
            except HANDSHAKE_ERRORS as exc:  # unreachable, too slow, or not our actor
                actor.last_error = (
                    f"cannot connect to the actor at {address[0]}:{address[1]} within "
                    f"{CONNECT_TIMEOUT_S:.0f} s ({type(exc).__name__}: {exc}); the driver must "
                    "reach the actors' nodes on their ephemeral ports"
                )
                failed.append(actor)
                continue
            self._selector.register(actor.conn, selectors.EVENT_READ, actor)
            if actor.assigned:  # a task that was lost with the previous incarnation, or queued
                self._send(actor)
        if (
            self._gloo is not None
            and ready
            and all(a.starting is None for a in self._actors)
            and any(not a.joined for a in self._actors)
        ):
            self._regroup()  # its replacement is in: re-form the group
        if ready and not self.pool.persistent:
            self._assign_waiting()
        for actor in starting.values():
            if actor.starting is not None and time.monotonic() - actor.started_at > (
                STARTUP_TIMEOUT_S
            ):
                raise RuntimeError(
                    f"worker {actor.worker_id} did not start within {STARTUP_TIMEOUT_S:.0f} s"
                )
        return failed

    def _send(self, actor: _Actor) -> None:
        actor.sent = False
        if actor.conn is None or (self._gloo is not None and not actor.joined):
            return  # starting (or not yet in the gloo group): the task goes out then
        try:
            actor.conn.send_bytes(actor.task)
            actor.sent = True
        except OSError:
            pass  # it died: its connection reads as closed at the next wait, which restarts it

    def _handle_events(self, timeout: float | None = None) -> list[_Actor]:
        """Wait for results (and for starting actors), at most ``timeout`` seconds (None:
        until one); return the actors that failed."""
        restarting = any(a.starting is not None for a in self._actors)
        failed = self._poll_starting(timeout=0) if restarting else []
        if restarting:
            timeout = RESTART_POLL_S if timeout is None else min(timeout, RESTART_POLL_S)
        for key, _ in self._selector.select(timeout):
            actor = key.data
            if actor in failed:
                continue
            try:
                kind, body = actor.conn.recv()
            except (EOFError, OSError):
                failed.append(actor)
                continue
            if kind == "error":
                actor.last_error = body
                failed.append(actor)
            elif kind == "reply":
                actor.reply = body
            else:
                self._collect(actor, body)
        return failed

    def _collect(self, actor: _Actor, record: dict[str, Any]) -> None:
        received_at = time.time()
        started_at, finished_at = record.pop("started_at"), record.pop("finished_at")
        update = Update(payload=unpack(record.pop("wire")), **record)
        update.started_s = started_at - self._origin
        update.cost_s = received_at - started_at
        update.upload_s = received_at - finished_at  # transfer, and waiting for the driver
        actor.sent = False
        self._deliver(actor, update, finished_at)

    def _disconnect(self, actor: _Actor) -> None:
        if actor.conn is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(actor.conn)
        with contextlib.suppress(OSError):
            actor.conn.send(None)  # a live actor leaves serve() and idles until killed
        actor.conn.close()
        actor.conn = None

    def _stop(self, actor: _Actor) -> None:
        actor.joined = False  # its replica, if it held one, is gone with it
        self._disconnect(actor)
        actor.starting = actor.serving = None
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)
