"""Edge clients on a measured profile: rounds, deadlines, executors and the server's costs
against their closed forms."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from conftest import metric_rows
from test_calibrate import write_profile

import hybrid
from hybrid import TrainConfig, assembly
from hybrid.checkpoint import list_checkpoints
from hybrid.clients import make_profiles
from hybrid.runtimes.virtual_cluster import ProfiledClientCost
from hybrid.traces import write_trace

CLIENTS = 4
STEPS_PER_TASK = 2 * 2 * 5  # local_steps × envs_per_worker × rollout_steps
WORK_S = STEPS_PER_TASK * 1e-4 + 2 * 1e-3  # the profile's step cost and overhead per step


def _config(
    tmp_path: Path, rounds: int = 1, costs: dict | None = None, **changes: object
) -> TrainConfig:
    """fedavg over every one of 4 clients per round on a profile with round numbers."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    profile = write_profile(tmp_path / "profile.json", task_overhead_s=1e-3, **(costs or {}))
    fields = dict(
        env="CartPole-v1",
        scheduler="fedavg",
        clients=CLIENTS,
        workers=CLIENTS,
        client_fraction=1.0,
        local_steps=2,
        envs_per_worker=2,
        rollout_steps=5,
        total_env_steps=rounds * int(changes.get("clients", CLIENTS)) * STEPS_PER_TASK,
        eval_every=2**62,
        eval_episodes=1,
        progress=False,
        env_defaults=False,
        cluster=profile,
        client_link_sigma=1.0,  # each client its own links: known, and far apart
        out=str(tmp_path / "run"),
    )
    return TrainConfig(**(fields | changes))


def _run(cfg: TrainConfig) -> dict:
    summary = hybrid.train(cfg).summary
    assert summary is not None
    return summary


def _client_seconds(cfg: TrainConfig, summary: dict) -> list[float]:
    """Each client's task: θ's download, the profile's work at its slowness, Δ's upload."""
    theta_bytes = summary["bytes_down"] / summary["tasks"]
    delta_bytes = summary["bytes_up"] / summary["tasks"]
    return [
        theta_bytes * 8 / (c.downlink_mbps * 1e6)
        + WORK_S * c.slowness
        + delta_bytes * 8 / (c.uplink_mbps * 1e6)
        for c in make_profiles(assembly.client_settings(cfg))
    ]


def test_a_round_lasts_as_long_as_its_slowest_client(tmp_path: Path) -> None:
    cfg = _config(tmp_path, rounds=3)
    summary = _run(cfg)
    seconds = _client_seconds(cfg, summary)
    assert max(seconds) > 1.5 * min(seconds)  # the links differ: the max is a real choice
    assert summary["rounds"] == 3
    assert summary["virtual_time_s"] == pytest.approx(3 * max(seconds), rel=1e-9)


def test_a_deadline_drops_exactly_the_clients_slower_than_it(tmp_path: Path) -> None:
    probe = _config(tmp_path / "probe")
    seconds = sorted(_client_seconds(probe, _run(probe)))
    deadline = (seconds[1] + seconds[2]) / 2  # two clients make it, two do not
    summary = _run(_config(tmp_path / "deadline", round_deadline_s=deadline))
    assert summary["late_dropped"] == 2
    assert summary["virtual_time_s"] == pytest.approx(deadline, rel=1e-9)  # closed at it


def test_clients_take_turns_on_the_executors(tmp_path: Path) -> None:
    # equal clients on fast links: four tasks on two executors are two waves
    fast = dict(client_link_sigma=0.0, client_uplink_mbps=1e6, client_downlink_mbps=1e6)
    summary = _run(_config(tmp_path, workers=2, **fast))
    (one,) = set(_client_seconds(_config(tmp_path / "alone", **fast), summary))
    assert summary["virtual_time_s"] == pytest.approx(2 * one, rel=1e-9)


def test_the_server_serves_each_round_in_turn(tmp_path: Path) -> None:
    # one client, one executor: a round is snapshot + dispatch + task + receive, and the
    # optimizer step between rounds (the last one's is after the clock stops)
    costs = dict(snapshot_s=1e-3, dispatch_s=2e-3, receive_s=3e-3, apply_s=4e-3)
    rounds = 3
    cfg = _config(tmp_path, rounds=rounds, costs=costs, clients=1, workers=1)
    summary = _run(cfg)
    (task,) = _client_seconds(cfg, summary)
    per_round = costs["snapshot_s"] + costs["dispatch_s"] + task + costs["receive_s"]
    expected = rounds * per_round + (rounds - 1) * costs["apply_s"]
    assert summary["virtual_time_s"] == pytest.approx(expected, rel=1e-9)


def test_a_clients_cost_is_the_profiles_at_its_speed(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    speeds = [1.0, 0.5, 0.25, 2.0]
    rows = [
        {"client": c, "compute_speed": s, "uplink_mbps": 8.0, "downlink_mbps": 16.0}
        for c, s in enumerate(speeds)
    ]
    write_trace({"period_s": 0.0, "clients": [r | {"available": [[0, 1]]} for r in rows]}, trace)
    cfg = _config(tmp_path)
    settings = dataclasses.replace(assembly.client_settings(cfg), client_trace=str(trace))
    # every task costs twice the mean (a degenerate measured distribution)
    from hybrid.cluster_profile import ClusterProfile

    profile = dataclasses.replace(
        ClusterProfile.load(cfg.cluster), task_cost_quantiles=(2.0, 2.0, 2.0)
    )
    cost = ProfiledClientCost(settings, profile)
    for client, speed in enumerate(speeds):
        compute, upload = cost.duration(client, STEPS_PER_TASK, 1_000, 2_000, 2, version=0)
        assert compute == pytest.approx(2_000 * 8 / 16e6 + 2 * WORK_S / speed, rel=1e-12)
        assert upload == pytest.approx(1_000 * 8 / 8e6, rel=1e-12)


def test_a_profiled_client_run_is_reproducible(tmp_path: Path) -> None:
    drawn = {"task_cost_quantiles": (0.5, 1.0, 1.5), "wake_s_quantiles": (0.0, 1e-3)}
    first = _run(_config(tmp_path / "a", rounds=2, costs=drawn))
    second = _run(_config(tmp_path / "b", rounds=2, costs=drawn))
    assert first["final_params_sha256"] == second["final_params_sha256"]
    assert first["virtual_time_s"] == second["virtual_time_s"]


def test_a_profiled_client_run_resumes_bit_exact(tmp_path: Path) -> None:
    # server costs, drawn task costs, two executors for four clients and a deadline that
    # drops some: every piece of the clock's state crosses the checkpoint
    costs = {
        "task_cost_quantiles": (0.5, 1.0, 1.5),
        "receive_s": 1e-4,
        "apply_s": 2e-4,
        "snapshot_s": 1e-4,
        "dispatch_s": 1e-4,
    }
    cfg = _config(
        tmp_path, rounds=6, costs=costs, workers=2, round_deadline_s=0.03, checkpoint_every=1
    ).replace(keep_checkpoints=100)
    full = hybrid.train(cfg)
    assert full.summary is not None and full.summary["late_dropped"] > 0
    # from every checkpoint: at some, a late client still holds an executor
    for index in range(len(list_checkpoints(full.run_dir))):
        crashed = tmp_path / f"crashed-{index}"
        shutil.copytree(full.run_dir, crashed)
        (crashed / "summary.json").unlink()
        for later in list_checkpoints(crashed)[index + 1 :]:
            later.unlink()
        resumed = hybrid.train(resume=str(crashed))
        assert resumed.summary is not None
        assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
        assert resumed.summary["virtual_time_s"] == full.summary["virtual_time_s"], index
        assert metric_rows(crashed) == metric_rows(full.run_dir)


def test_a_trace_drives_clients_on_a_profile(tmp_path: Path) -> None:
    """The trace's speeds scale the profile's task cost end to end: a client at half speed
    takes twice the work, and only the clients the trace has online are sampled."""
    trace = tmp_path / "trace.json"
    clients = []
    for client, speed in enumerate([1.0, 0.5, 1.0, 1.0]):
        online = [[0.0, 1e6]] if client < 2 else []
        clients.append(
            {
                "client": client,
                "compute_speed": speed,
                "uplink_mbps": 1e4,
                "downlink_mbps": 1e4,
                "available": online,
            }
        )
    write_trace({"period_s": 0.0, "clients": clients}, trace)
    cfg = _config(tmp_path, client_link_sigma=0.0, client_trace=str(trace))
    cfg.validate()  # a trace on a measured profile is accepted
    _run(cfg)
    lines = (Path(cfg.out) / "spans.jsonl").read_text().splitlines()
    spans = [json.loads(line) for line in lines]
    assert sorted({span["worker"] for span in spans}) == [0, 1]  # only the online clients
    work = {span["worker"]: span["upload_start"] - span["start"] for span in spans}
    assert work[1] / work[0] == pytest.approx(2.0, rel=0.05)  # the wake-up aside
