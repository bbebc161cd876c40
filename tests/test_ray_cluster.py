"""The ray runtime and ``hybrid sweep --backend ray`` on a multi-node Ray cluster.

``ray.cluster_utils.Cluster`` starts several raylets on this machine, each a node of its own
(1 CPU each here), joined to one head: a real cluster as far as scheduling, actors, node
loss and the driver's connections are concerned. The module starts it once (~10-30 s) and
stops it at the end, checking that nothing it started is left: no process, no /dev/shm
segment, no listening GCS port.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")

from test_runtimes import _descendants, _eventually_empty, _shm  # noqa: E402

import hybrid  # noqa: E402
from hybrid import sweep  # noqa: E402
from hybrid.config import TrainConfig  # noqa: E402
from hybrid.runtimes import ray as ray_runtime  # noqa: E402

NODES = 3


@pytest.fixture(scope="module")
def cluster():
    """A head and two more nodes of 1 CPU each; everything it started ends with the module."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        pytest.skip("a Ray instance from elsewhere is running in this process")
    before_procs, before_shm = set(_descendants()), _shm()
    env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("RAY_AUTH")}
    c = Cluster(
        initialize_head=True,
        connect=False,
        # Notice a lost node in ~2 s, not Ray's default ~30 s, so a test run outlasts it.
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "_system_config": {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 500,
                "health_check_timeout_ms": 500,
                "health_check_failure_threshold": 3,
            },
        },
    )
    try:
        for _ in range(NODES - 1):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        host, port = c.address.rsplit(":", 1)
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
        os.environ.update(env)
    left = _eventually_empty(
        lambda: {p: cmd for p, cmd in _descendants().items() if p not in before_procs}, 30
    )
    assert not left, f"processes left behind by the cluster: {left}"
    assert not (_shm() - before_shm), "shared-memory segments left in /dev/shm"
    with pytest.raises(OSError):  # the GCS port is closed
        socket.create_connection((host, int(port)), timeout=2).close()


def _config(tmp_path: Path, address: str, **changes) -> TrainConfig:
    base = TrainConfig(
        env="CartPole-v1",
        runtime="ray",
        ray_address=address,
        scheduler="async",
        workers=2,
        envs_per_worker=2,
        rollout_steps=5,
        total_env_steps=1_500,
        eval_every=1_500,
        eval_episodes=2,
        log_every=100,
        stop_when_solved=False,
        progress=False,
        out=str(tmp_path / "run"),
    )
    return base.replace(**changes)


def _placement(runtime) -> list[tuple[str, str]]:
    """(node id, node address) of each worker's actor, from Ray's GCS."""
    actors = ray._private.state.actors()
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    placed = []
    for actor in runtime._actors:
        node = actors[actor.handle._actor_id.hex()]["Address"]["NodeID"]
        placed.append((node, nodes[node]))
    return placed


def _spy(monkeypatch, after: int = 0, then=None) -> dict:
    """Record where the actors are (every 5 updates, when all are connected) and which worker
    sent each update; call ``then`` once after ``after`` updates. While an actor restarts,
    the driver takes updates slowly (50 ms each), so that a replacement's start-up (seconds
    on a busy machine) fits in a small budget."""
    seen: dict = {"placements": [], "updates": 0, "senders": []}
    original = ray_runtime.RayRuntime.next_update

    def next_update(self):
        seen["updates"] += 1
        connected = all(a.starting is None for a in self._actors)
        incarnations = [a.incarnation for a in self._actors]
        # every 5 updates, and at once when a replacement has connected (a run may end soon)
        renewed = incarnations != seen.get("incarnations")
        if connected and (seen["updates"] % 5 == 1 or renewed):
            seen["incarnations"] = incarnations
            seen["placements"].append(_placement(self))
            seen["peers"] = [_peer(a.conn) if a.conn else None for a in self._actors]
        if then is not None and seen["updates"] == after:
            then(self)
        if not connected:
            time.sleep(0.05)
        update = original(self)
        seen["senders"].append((update.worker_id, self._actors[update.worker_id].incarnation))
        return update

    monkeypatch.setattr(ray_runtime.RayRuntime, "next_update", next_update)
    return seen


def _peer(conn) -> str | None:
    """The address a task connection goes to; None once its peer is gone (a node just
    killed, before the runtime notices: the spy records, it does not judge)."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        return sock.getpeername()[0]
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            return None
        raise
    finally:
        sock.close()


def _alive_actors() -> list[str]:
    return [a for a, info in ray._private.state.actors().items() if info["State"] != "DEAD"]


def _cpus_held(total: int) -> dict[str, float]:
    """CPUs the cluster does not report free (empty when all `total` are)."""
    free = ray.available_resources().get("CPU", 0.0)
    return {} if free == total else {"CPU held": total - free}


def test_workers_spread_over_the_nodes_on_direct_connections(cluster, tmp_path, monkeypatch):
    seen = _spy(monkeypatch)
    result = hybrid.train(_config(tmp_path, cluster.address))
    assert result.summary["env_steps"] >= 1_500
    first = seen["placements"][0]
    assert len({node for node, _ in first}) == 2, "SPREAD puts the 2 actors on 2 nodes"
    # Each task connection goes to its actor's node address (not through Ray's object store).
    assert seen["peers"] == [address for _, address in seen["placements"][-1]]
    assert not ray.is_initialized(), "the run disconnects from a cluster it joined"
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        assert _eventually_empty(lambda: dict.fromkeys(_alive_actors(), ""), 15) == {}
        # The resource view reaches the driver a moment after an actor is marked dead, so
        # CPUs held by a task still running show here, but so do CPUs just freed: wait.
        held = _eventually_empty(lambda: _cpus_held(NODES), 15)
        assert held == {}, f"the run left tasks running: {held}"
    finally:
        ray.shutdown()


def test_ray_address_auto_joins_the_running_cluster(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)  # what `ray start` leaves for `auto`
    seen = _spy(monkeypatch)
    result = hybrid.train(_config(tmp_path, "auto", workers=3, total_env_steps=600))
    assert result.summary["env_steps"] >= 600
    cluster_nodes = {n.node_id for n in cluster.list_all_nodes()}
    assert {node for node, _ in seen["placements"][0]} == cluster_nodes  # one per node


def test_a_lost_node_is_survived(cluster, tmp_path, monkeypatch):
    """SIGKILL a node that holds a worker mid-run: its actor is restarted on another node,
    its task re-runs, the counters say so, and the run spends its whole budget."""
    removed = {}

    def lose_a_node(runtime):
        head = cluster.head_node.node_id
        for node, _ in _placement(runtime):
            if node != head:
                victim = next(n for n in cluster.list_all_nodes() if n.node_id == node)
                cluster.remove_node(victim, allow_graceful=False)
                removed["node"] = node
                # Until Ray's heartbeat check marks the node dead (seconds, longer on a
                # loaded machine), Ray may place the replacement actor on it again; that
                # one dies too and is restarted once more, so the run survives either way,
                # but the placement checked below would be a race. Wait for Ray to know.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and any(
                    n["NodeID"] == node and n["Alive"] for n in ray.nodes()
                ):
                    time.sleep(0.2)
                return

    seen = _spy(monkeypatch, after=10, then=lose_a_node)
    try:
        result = hybrid.train(_config(tmp_path, cluster.address, total_env_steps=6_000))
        assert removed, "no worker was on a node other than the head"
        assert result.summary["env_steps"] >= 6_000
        last = result.metrics("train")[-1]
        assert last["sched/worker_restarts"] >= 1
        assert last["sched/lost_updates"] <= last["sched/worker_restarts"]
        after = seen["placements"][-1]
        assert removed["node"] not in {node for node, _ in after}, "an actor on the lost node"
        assert len({node for node, _ in after}) == 2
        # The replacement (a later incarnation) did tasks on its new node.
        assert any(incarnation >= 1 for _, incarnation in seen["senders"])
    finally:
        if removed:  # the next tests get their 3 nodes back
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()


@pytest.mark.parametrize("scheduler", ["gossip", "ad-psgd"])
def test_a_lost_node_is_survived_by_actor_held_replicas(cluster, tmp_path, monkeypatch, scheduler):
    """Replicas in the actors: a node SIGKILLed mid-run takes one replica with it. The gloo
    group is re-formed (a new generation) once the replacement actor has started; the
    replacement starts from the survivors' average; the run spends its whole budget and its
    metrics say so. Meanwhile AD-PSGD's pairs with the lost replica are left out; every gloo
    op has a deadline, so a mix already sent to the lost peer cannot hang its partner."""
    from hybrid.runtimes import _gloo

    monkeypatch.setattr(_gloo, "GLOO_TIMEOUT_S", 20.0)  # handed to the actors at each join
    removed = {}

    def lose_a_node(runtime):
        head = cluster.head_node.node_id
        for node, _ in _placement(runtime):
            if node != head:
                victim = next(n for n in cluster.list_all_nodes() if n.node_id == node)
                cluster.remove_node(victim, allow_graceful=False)
                removed["node"] = node
                deadline = time.monotonic() + 60  # as above: let Ray mark the node dead
                while time.monotonic() < deadline and any(
                    n["NodeID"] == node and n["Alive"] for n in ray.nodes()
                ):
                    time.sleep(0.2)
                return

    seen = _spy(monkeypatch, after=4, then=lose_a_node)
    try:
        config = _config(
            tmp_path,
            cluster.address,
            scheduler=scheduler,
            scheduler_args={"topology": "ring"},
            total_env_steps=3_000,  # AD-PSGD goes on without the replacement: leave it time
            log_every=20,
        )
        result = hybrid.train(config)
        assert removed, "no worker was on a node other than the head"
        assert result.summary["env_steps"] >= 3_000
        last = result.metrics("train")[-1]
        assert last["sched/worker_restarts"] >= 1
        # the group was re-formed (by the end at the latest: AD-PSGD need not wait for the
        # replacement, but the final gather does)
        assert result.summary["regroups"] >= 1
        assert last["decentral/gloo_bytes"] > 0
        assert result.summary["mixes"] == result.summary["updates"] > 0
        assert any(incarnation >= 1 for _, incarnation in seen["senders"])
        assert torch.isfinite(result.params).all()
    finally:
        if removed:  # the next tests get their 3 nodes back
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()


FAKE_TRAIN = """\
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
os.makedirs(args["out"])
with open(os.path.join(args["out"], "config.json"), "w") as f:
    json.dump({"seed": int(args["seed"]), "pid": os.getpid(), "ppid": os.getppid()}, f)
with open(os.path.join(args["out"], "summary.json"), "w") as f:
    json.dump({"final_eval_return": float(args["seed"])}, f)
"""


def test_sweep_runs_each_run_as_a_ray_task_and_resumes(cluster, tmp_path, monkeypatch, capsys):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    monkeypatch.setattr(sweep, "TRAIN_COMMAND", [sys.executable, str(fake)])
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        textwrap.dedent(
            """\
            method: grid
            metric: {name: final_eval_return, goal: maximize}
            parameters:
              seed: {values: [0, 1, 2, 3, 4, 5]}
            """
        )
    )
    out = tmp_path / "out"
    (out / "seed=5").mkdir(parents=True)  # a run that died half-way: rerun
    args = [str(spec), "--out", str(out), "--backend", "ray", "--ray-address", cluster.address]
    assert sweep.sweep_command([*args, "--max-runs", "4"]) == 0
    printed = capsys.readouterr().out
    assert "as many at once as it holds on Ray" in printed
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == [
        f"seed={i}" for i in range(4)
    ]
    # Each run was a process of a Ray worker (a task), not of this test.
    parents = {
        json.loads((out / f"seed={i}" / "config.json").read_text())["ppid"] for i in range(4)
    }
    assert os.getpid() not in parents
    assert not ray.is_initialized()

    assert sweep.sweep_command(args) == 0  # resume: the first four are skipped
    counts = {
        r[0]: int(r[1])
        for r in (line.split() for line in capsys.readouterr().out.splitlines())
        if len(r) >= 2 and r[0] in ("done", "skipped", "failed")
    }
    assert counts == {"done": 2, "skipped": 4, "failed": 0}
    summary = json.loads((out / "sweep_summary.json").read_text())
    assert summary["best"] == "seed=5"
