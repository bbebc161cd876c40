"""Client traces: the file format, its checks, availability over time, and fedavg using them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hybrid
from hybrid.assembly import client_settings
from hybrid.clients import make_profiles
from hybrid.config import TrainConfig
from hybrid.errors import ConfigError
from hybrid.protocol import Payload, Update
from hybrid.scheduler_settings import FedAvgSettings
from hybrid.schedulers.fedavg import FedAvg
from hybrid.traces import ClientTrace, Trace, diurnal_trace, load_trace, write_trace

EXAMPLE = Path(__file__).parents[1] / "examples" / "traces" / "diurnal_20_clients.json"


def write(tmp_path: Path, rows: list[dict], period_s: float = 10.0, name="t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"period_s": period_s, "clients": rows}))
    return str(path)


def row(client: int, available, speed: float = 1.0) -> dict:
    return {
        "client": client,
        "compute_speed": speed,
        "uplink_mbps": 5.0,
        "downlink_mbps": 20.0,
        "available": available,
    }


def test_availability_repeats_with_the_period_and_wraps_past_its_end(tmp_path):
    trace = load_trace(write(tmp_path, [row(0, [[0, 1], [8, 10]]), row(1, [[3, 4]])]), 2)
    assert [trace.available(0, t) for t in (0.5, 1.0, 5.0, 9.0, 10.5, 11.0)] == [
        True, False, False, True, True, False,
    ]  # fmt: skip
    assert trace.online_until(0, 9.0) == 11.0  # [8, 10) runs on into the next day's [0, 1)
    assert trace.next_online(1, 4.5) == 13.0
    assert trace.next_online(1, 3.5) == 3.5


def test_csv_and_json_traces_read_the_same(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(
        "client,compute_speed,uplink_mbps,downlink_mbps,start_s,end_s\n"
        "0,1.0,5.0,20.0,0,1\n0,1.0,5.0,20.0,8,10\n1,1.0,5.0,20.0,3,4\n"
    )
    from_csv = load_trace(str(csv), 2)
    from_json = load_trace(write(tmp_path, [row(0, [[0, 1], [8, 10]]), row(1, [[3, 4]])], 0.0), 2)
    assert from_csv == from_json


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([row(0, [[0, 1]]), row(5, [[0, 1]])], "names client 5, not one of the run's 2"),
        ([row(0, [[0, 1]])], "has no row for client 1"),
        ([row(0, [[0, 5], [4, 6]]), row(1, [[0, 1]])], "overlap"),
        ([row(0, [[0, 1]]), row(1, [[2, 1]])], "is empty"),
        ([row(0, [[0, 1]]), row(1, [[0, 12]])], "outside the period"),
        ([row(0, [[0, 1]], speed=0), row(1, [[0, 1]])], "compute_speed must be > 0"),
    ],
)
def test_a_bad_trace_is_one_line_naming_the_problem(tmp_path, rows, message):
    path = write(tmp_path, rows)
    with pytest.raises(ConfigError, match=message) as caught:
        TrainConfig(scheduler="fedavg", clients=2, client_trace=path).validate()
    assert str(caught.value).startswith("client_trace: ") and "\n" not in str(caught.value)


def test_the_trace_sets_each_clients_speed_and_links():
    settings = client_settings(TrainConfig(clients=20, client_trace=str(EXAMPLE)))
    trace = load_trace(str(EXAMPLE), 20)
    for profile, traced in zip(make_profiles(settings), trace.clients, strict=True):
        assert profile.slowness == pytest.approx(1 / traced.compute_speed)
        assert (profile.uplink_mbps, profile.downlink_mbps) == (
            traced.uplink_mbps,
            traced.downlink_mbps,
        )


def test_the_generator_is_seeded_and_online_for_its_window(tmp_path):
    a, b = diurnal_trace(50, seed=1), diurnal_trace(50, seed=1)
    assert a == b and a != diurnal_trace(50, seed=2)
    write_trace(a, tmp_path / "d.json")
    trace = load_trace(str(tmp_path / "d.json"), 50)
    online = sum(e - s for c in trace.clients for s, e in c.available) / 50
    assert online == pytest.approx(8 * 3600, rel=1e-6)


def _delta(worker: int, cost_s: float) -> Update:
    return Update(worker, 0, torch.zeros(2), env_steps=10, kind=Payload.DELTA, cost_s=cost_s)


def test_fedavg_samples_only_online_clients_waits_for_them_and_drops_leavers():
    rows = [ClientTrace(c, 1.0, 5.0, 20.0, ((0.0, 1.0),)) for c in range(3)]
    rows += [ClientTrace(c, 1.0, 5.0, 20.0, ((5.0, 6.0),)) for c in range(3, 6)]
    trace = Trace(tuple(rows), period_s=10.0)
    s = FedAvg(6, FedAvgSettings(client_fraction=1.0, trace=trace))
    s.bind(None, np.random.default_rng(0))
    first = s.ready(list(range(6)), 0)
    assert first == [0, 1, 2]  # only those online at t = 0
    s.admit(_delta(0, 0.5), 0)  # finished within its interval
    assert s.admit(_delta(1, 1.5), 0).name == "DROP"  # went offline at t = 1 mid-round
    s.admit(_delta(2, 0.9), 0)
    assert s.full() and s.trace_left == 1
    s.combine()
    # The round closed at t = 1.5, when the leaver's task ended on the runtime's clock (the
    # server learns then that it is gone); nobody is online until t = 5.
    second = s.ready(list(range(6)), 1)
    assert second == [3, 4, 5]
    assert s.trace_wait_s == pytest.approx(5.0 - 1.5)
    assert s.metrics()["sched/trace_left"] == 1


def test_a_traced_run_shows_the_trace_in_its_spans(tiny_config):
    cfg = tiny_config(
        scheduler="fedavg",
        clients=20,
        client_fraction=0.5,
        local_steps=2,
        total_env_steps=800,
        client_eval_clients=2,
        client_trace=str(EXAMPLE),
    )
    result = hybrid.train(cfg)
    summary = result.summary
    spans = [json.loads(line) for line in (result.run_dir / "spans.jsonl").open()]
    trace = load_trace(str(EXAMPLE), 20)
    assert summary["sampled"] < summary["rounds"] * 10  # fewer than m: clients are offline
    dropped = [s for s in spans if s["verdict"] == "drop"]
    assert len(dropped) == summary["trace_left"]
    first_round = [s for s in spans if s["base_version"] == 0]
    assert first_round and all(trace.available(s["worker"], s["start"]) for s in first_round)


def test_fedbuff_starts_only_online_clients_and_drops_leavers(tmp_path):
    from hybrid.schedulers import make_settings, resolve_scheduler

    examples = Path(__file__).parents[1] / "examples" / "schedulers"
    fedbuff = resolve_scheduler(f"{examples / 'fedbuff.py'}:FedBuff").cls
    rows = [row(c, [[0, 1]]) for c in range(3)] + [row(c, [[5, 6]]) for c in range(3, 6)]
    path = write(tmp_path, rows)
    s = fedbuff(6, make_settings(fedbuff, {"buffer_size": "2", "client_trace": path}))
    s.bind(None, np.random.default_rng(0))  # type: ignore[arg-type]
    assert s.ready(list(range(6)), 0) == [0, 1, 2]
    assert s.admit(_delta(0, 0.5), 0).name == "BUFFER"
    assert s.admit(_delta(1, 1.5), 0).name == "DROP"  # offline at t = 1, before it finished
    assert s.ready([1, 3, 4, 5], 0) == []  # t = 1.5: nobody idle is online, client 2 trains
    assert s.admit(_delta(2, 0.9), 0).name == "BUFFER"
    assert s.full() and s.metrics() == {"sched/trace_left": 1}
    s.combine()
    assert s.ready(list(range(6)), 1) == [3, 4, 5]  # nobody trains: wait until t = 5
    assert s.clock_s == 5.0
