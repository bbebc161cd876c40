"""Round deadlines and client traces on the real runtimes (processes, ray).

The scheduler's rule for a late Δ is one for every runtime (cost_s > deadline_s); a real
runtime hands it a stand-in at the deadline (``Update.overdue``) and the Δ when the worker
finishes. A traced client's speed and links are emulated by holding its result.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import hybrid
from hybrid.assembly import env_settings
from hybrid.config import ConfigError, TrainConfig
from hybrid.envs import describe
from hybrid.protocol import Payload, Snapshot, TrainLocally, Update
from hybrid.runtimes._parallel import Executor, Supervisor
from hybrid.scheduler_settings import FedAvgSettings
from hybrid.schedulers import Verdict
from hybrid.schedulers.fedavg import FedAvg
from hybrid.trainer import initial_params

# --- the scheduler: a stand-in at the deadline, the Δ later -------------------------------------


def fedavg(clients: int, **settings) -> FedAvg:
    scheduler = FedAvg(clients, FedAvgSettings(client_fraction=1.0, **settings))
    scheduler.bind(None, np.random.default_rng(0))
    return scheduler


def delta(worker: int, value: float, started_s: float, cost_s: float, base: int = 0) -> Update:
    return Update(
        worker,
        base,
        torch.tensor([value]),
        env_steps=10,
        kind=Payload.DELTA,
        started_s=started_s,
        cost_s=cost_s,
    )


def overdue(worker: int, started_s: float, waited_s: float, base: int = 0) -> Update:
    return Update(
        worker,
        base,
        None,
        env_steps=0,
        kind=Payload.DELTA,
        started_s=started_s,
        cost_s=waited_s,
        overdue=True,
    )


def test_a_stand_in_at_the_deadline_closes_the_round_and_drops_the_late_delta_once():
    s = fedavg(2, round_deadline_s=1.0)
    assert s.ready([0, 1], 0) == [0, 1]
    assert s.admit(delta(0, 2.0, 0.0, 0.5), 0) is Verdict.BUFFER
    assert not s.full()
    assert s.admit(overdue(1, 0.0, 1.01), 0) is Verdict.DROP
    assert s.full()  # the round closes at the deadline, without client 1
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_dropped"] == 1
    assert s.ready([0], 1) == [0]  # client 1 is still computing: not idle
    # its Δ comes during round 2: dropped, and not counted a second time
    assert s.admit(delta(1, 50.0, 0.0, 1.7), 0) is Verdict.DROP
    assert s.metrics()["sched/late_dropped"] == 1
    assert not s.full()  # round 2 still waits for client 0


def test_under_admit_the_late_delta_is_held_on_arrival_and_applied_in_a_later_round():
    s = fedavg(2, round_deadline_s=1.0, late_policy="admit")
    s.ready([0, 1], 0)
    s.admit(delta(0, 2.0, 0.0, 0.5), 0)
    assert s.admit(overdue(1, 0.0, 1.02), 0) is Verdict.DROP  # nothing to hold yet
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    s.ready([0], 1)
    assert s.admit(delta(1, 10.0, 0.0, 1.5), 0) is Verdict.BUFFER  # arrived at t = 1.5
    assert s.admit(delta(0, 4.0, 1.1, 0.6, base=1), 0) is Verdict.BUFFER  # round 2 closes 1.7
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([7.0]))
    m = s.metrics()
    assert m["sched/late_admitted"] == 1 and m["sched/late_dropped"] == 0
    assert m["sched/late_staleness_mean"] == 1.0


# --- the real runtimes' receive: a blocking wait up to the earliest deadline ------------------


class FakeClockRuntime(Supervisor):
    """A Supervisor whose transport is a script: ``_poll`` records its timeout and lets that
    much time pass on a fake clock, delivering what ``results`` holds for then."""

    def __init__(self, workers: int) -> None:
        self.now = 0.0
        self.timeouts: list[float | None] = []
        self.results: dict[float, Update] = {}
        settings = SimpleNamespace(inject_worker_faults=0.0, seed=0)
        pool = SimpleNamespace(persistent=True, size=workers)
        super().__init__(settings, pool, lambda: self.now)  # type: ignore[arg-type]
        self.executors = [Executor(worker_id=w) for w in range(workers)]

    def _poll(self, timeout=None):
        self.timeouts.append(timeout)
        due = min(self.results, default=float("inf"))
        if timeout is None or self.now + timeout >= due:
            self.now = due
            update = self.results.pop(due)
            update.started_s = 0.0
            self._deliver(self.executors[update.worker_id], update, due)
        else:
            self.now += timeout
        return []

    # the transport's other duties: nothing to do on a script
    def _prepare(self, snapshot):
        return snapshot

    def _task_for(self, prepared, client):
        return prepared

    def _free(self, executor):
        return True

    def _lost(self, executor):
        return False

    def _died(self, executor):
        return ""

    def _send(self, executor): ...
    def _spawn(self, executor): ...
    def _stop(self, executor): ...
    def _kill(self, executor): ...
    def _await_startup(self): ...


def test_the_receive_blocks_until_the_deadline_then_hands_over_a_stand_in():
    runtime = FakeClockRuntime(2)
    task = TrainLocally(deadline_s=2.0)
    for w in (0, 1):
        runtime.dispatch(w, Snapshot(torch.zeros(3), 5, task=task))
    runtime.results = {1.0: delta(0, 1.0, 0.0, 1.0), 7.0: delta(1, 9.0, 0.0, 7.0)}
    first = runtime.next_update()
    assert first.worker_id == 0 and not first.overdue and first.cost_s == 1.0
    notice = runtime.next_update()  # one wait of the second left to the deadline, no spin
    assert runtime.timeouts == [2.0, 1.0] and runtime.now == 2.0
    assert notice.overdue and notice.worker_id == 1 and notice.payload is None
    assert notice.base_version == 5 and notice.kind == Payload.DELTA
    assert notice.cost_s > task.deadline_s  # late by the scheduler's one rule
    assert runtime.idle_workers() == [0]  # worker 1 computes on
    late = runtime.next_update()  # no deadline left: it waits for the result itself
    assert runtime.timeouts[-1] is None
    assert late.worker_id == 1 and not late.overdue and late.cost_s == 7.0
    assert runtime.idle_workers() == [0, 1]


def test_a_resumed_real_runtime_goes_on_with_the_runs_clock():
    """A trace is read on the run's clock: after a resume it continues, not restarts at 0."""
    stopped = FakeClockRuntime(1)
    stopped.now = 10.0
    state = stopped.state_dict()
    resumed = FakeClockRuntime(1)
    resumed.now = 500.0  # another process, another clock
    resumed.load_state_dict(state)
    resumed.dispatch(0, Snapshot(torch.zeros(3), 0, task=TrainLocally(deadline_s=1.0)))
    resumed.now = 501.5
    assert resumed.next_update().started_s == 10.0


# --- the config: what a real runtime now accepts, and what it still refuses -------------------


def test_deadlines_and_traces_are_accepted_on_the_real_runtimes(tmp_path):
    trace = write_trace(tmp_path, fast=(1.0, 10.0), slow=(1.0, 10.0))
    for runtime in ("processes", "ray"):
        TrainConfig(
            scheduler="fedavg",
            clients=2,
            workers=1,
            runtime=runtime,
            round_deadline_s=2.0,
            client_trace=trace,
        ).validate()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"client_uplink_mbps": 5.0}, "client_uplink_mbps"),  # drawn links: the clock's only
        ({"cluster": "stragglers"}, "cluster"),
    ],
)
def test_the_modelled_machine_is_still_refused_off_the_clock(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=4, workers=1, runtime="processes", **changes)
    with pytest.raises(ConfigError, match=rf"^{field}: ") as info:
        cfg.validate()
    assert "\n" not in str(info.value)


def test_dp_with_fedbuff_is_refused_saying_why():
    fedbuff = str(Path(__file__).parents[1] / "examples" / "schedulers" / "fedbuff.py")
    cfg = TrainConfig(
        scheduler=f"{fedbuff}:FedBuff", clients=10, dp_clip=1.0, dp_noise_multiplier=1.0
    )
    with pytest.raises(
        ConfigError, match=r"^dp_clip: DP-FedAvg is offered with --scheduler fedavg only"
    ) as info:
        cfg.validate()
    assert "accountant" in str(info.value) and "\n" not in str(info.value)


# --- on the processes and ray runtimes --------------------------------------------------------


def params_bytes() -> int:
    """θ's (and a Δ's) bytes: the default CartPole actor-critic's, float32."""
    cfg = TrainConfig(env="CartPole-v1", env_defaults=False)
    return 4 * initial_params(cfg, describe(cfg.env, env_settings(cfg))).numel()


def write_trace(tmp_path: Path, fast: tuple[float, float], slow: tuple[float, float]) -> str:
    """Two clients online all run long; (compute speed, traced seconds of their links) each:
    the links are set so that θ's download and the Δ's upload take that long together."""
    rows, nbytes = [], params_bytes()
    for client, (speed, link_s) in enumerate((fast, slow)):
        mbps = 2 * nbytes * 8 / (link_s * 1e6)
        rows.append(
            {
                "client": client,
                "compute_speed": speed,
                "uplink_mbps": mbps,
                "downlink_mbps": mbps,
                "available": [[0.0, 1e9]],
            }
        )
    return write_rows(tmp_path, rows)


def write_rows(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"period_s": 0, "clients": rows}))
    return str(path)


def straggler_run(tmp_path: Path, runtime: str, late_policy: str) -> hybrid.Result:
    """Client 0's traced task takes ~1 s, client 1's ~6 s, the deadline is 3 s: client 1
    misses its first round; its Δ arrives while later rounds run."""
    trace = write_trace(tmp_path, fast=(100.0, 1.0), slow=(100.0, 6.0))
    cfg = TrainConfig(
        env="CartPole-v1",
        scheduler="fedavg",
        clients=2,
        workers=1,
        client_fraction=1.0,
        local_steps=1,
        envs_per_worker=2,
        rollout_steps=5,
        env_defaults=False,
        runtime=runtime,
        round_deadline_s=3.0,
        late_policy=late_policy,
        client_trace=trace,
        total_env_steps=10 * 9,  # nine client tasks of 10 env steps: about eight rounds
        eval_every=10**6,
        eval_episodes=1,
        log_every=10,
        client_eval_clients=1,
        stop_when_solved=False,
        progress=False,
        out=str(tmp_path / f"{runtime}-{late_policy}"),
    )
    return hybrid.train(cfg)


def spans(result: hybrid.Result) -> list[dict]:
    return [json.loads(line) for line in (result.run_dir / "spans.jsonl").open()]


def test_a_straggler_misses_the_deadline_on_processes_and_is_dropped(tmp_path):
    result = straggler_run(tmp_path, "processes", "drop")
    summary = result.summary
    assert summary["late_dropped"] >= 1 and summary["late_admitted"] == 0
    lines = spans(result)
    late = [s for s in lines if s["worker"] == 1 and s["verdict"] == "drop"]
    # the Δ that came after its deadline, held until its traced duration had passed
    assert late and all(s["end"] - s["start"] > 3.0 and s["held"] > 0 for s in late)
    assert summary["dropped"] == len([s for s in lines if s["verdict"] == "drop"])
    applied = [s for s in lines if s["verdict"] == "buffer"]
    assert applied and all(s["worker"] == 0 for s in applied)
    # the server did not wait for it: the next round started while it computed
    assert any(s["base_version"] == 1 and s["start"] < late[0]["end"] for s in applied)
    # the worker process was not killed: no restart, no lost update
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").open()]
    train_rows = [r for r in rows if "sched/worker_restarts" in r]
    assert train_rows and train_rows[-1]["sched/worker_restarts"] == 0
    assert train_rows[-1]["sched/lost_updates"] == 0
    assert train_rows[-1]["sched/late_dropped"] == summary["late_dropped"]


def test_a_straggler_admitted_late_arrives_in_a_later_round_on_processes(tmp_path):
    result = straggler_run(tmp_path, "processes", "admit")
    summary = result.summary
    assert summary["late_admitted"] >= 1 and summary["late_dropped"] == 0
    lines = spans(result)
    late = [s for s in lines if s["worker"] == 1 and s["end"] - s["start"] > 3.0]
    assert late and all(s["verdict"] == "buffer" and s["staleness"] >= 1 for s in late)
    # the round it missed closed at its deadline: the next one started while it computed
    assert any(s["base_version"] == 1 and s["start"] < late[0]["end"] for s in lines)


def test_a_straggler_misses_the_deadline_on_ray(tmp_path):
    pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")
    result = straggler_run(tmp_path, "ray", "drop")
    assert result.summary["late_dropped"] >= 1 and result.summary["late_admitted"] == 0
    assert any(s["worker"] == 1 and s["verdict"] == "drop" for s in spans(result))


def test_only_clients_online_on_the_runs_clock_are_sampled_on_processes(tmp_path):
    online = {"compute_speed": 1.0, "uplink_mbps": 1e4, "downlink_mbps": 1e4}
    trace = write_rows(
        tmp_path,
        [
            {"client": 0, **online, "available": [[0.0, 1e9]]},
            {"client": 1, **online, "available": [[1e6, 1e9]]},  # online from day 12 on
            {"client": 2, **online, "available": [[0.0, 1e9]]},
        ],
    )
    cfg = TrainConfig(
        env="CartPole-v1",
        scheduler="fedavg",
        clients=3,
        workers=1,
        client_fraction=1.0,
        local_steps=1,
        envs_per_worker=2,
        rollout_steps=5,
        env_defaults=False,
        runtime="processes",
        client_trace=trace,
        total_env_steps=10 * 6,
        eval_every=10**6,
        eval_episodes=1,
        client_eval_clients=1,
        stop_when_solved=False,
        progress=False,
        out=str(tmp_path / "run"),
    )
    result = hybrid.train(cfg)
    workers = {s["worker"] for s in spans(result)}
    assert workers == {0, 2}
    assert result.summary["sampled"] == 2 * result.summary["rounds"]
