"""Worker pools (hybrid/runtimes/pool.py): edge clients on every runtime.

fedavg with K = 1,000 clients and a small C runs on serial, processes and ray; the
parallel runtimes run the clients on their fixed ``workers`` processes or actors and
sample the same clients per round as serial; K = 10,000 clients on Ray create no more
than ``workers`` actors.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import hybrid
from hybrid.assembly import client_settings, env_settings, make_task, worker_pool, worker_settings
from hybrid.config import TrainConfig
from hybrid.envs import describe, make_vector_env
from hybrid.protocol import Snapshot, TrainLocally
from hybrid.runtimes.pool import EdgeClients, LentParts, PersistentWorkers, resets_completely
from hybrid.trainer import initial_params


def _fedavg(clients: int, out: Path, **changes) -> TrainConfig:
    return TrainConfig(
        scheduler="fedavg",
        clients=clients,
        client_fraction=3 / clients,  # three clients per round
        local_steps=1,
        rollout_steps=5,
        workers=2,  # processes or actors that the clients share
        optimizer="sgd",
        lr=1.0,
        client_dynamics="pole_length",
        total_env_steps=150,  # a few rounds
        log_every=50,
        eval_every=10**9,
        eval_episodes=1,
        client_eval_clients=2,
        stop_when_solved=False,
        progress=False,
        out=str(out),
        env_defaults=False,  # the rounds counted here assume TrainConfig's 2 envs a client
    ).replace(**changes)


def _clients_per_round(result: hybrid.Result) -> dict[int, set[int]]:
    """The clients whose Δ was applied, by the version their round started from."""
    rounds: dict[int, set[int]] = collections.defaultdict(set)
    for line in (result.run_dir / "spans.jsonl").read_text().splitlines():
        span = json.loads(line)
        rounds[span["base_version"]].add(span["worker"])
    return dict(rounds)


def test_the_pool_follows_clients():
    cfg = TrainConfig(workers=3)
    info = describe(cfg.env)
    persistent = worker_pool(cfg, info)
    assert isinstance(persistent, PersistentWorkers) and persistent.persistent
    assert persistent.size == 3 and persistent.cost_model() is None
    edge = worker_pool(cfg.replace(scheduler="fedavg", clients=1000), info)
    assert isinstance(edge, EdgeClients) and not edge.persistent and edge.size == 1000
    assert edge.cost_model() is not None  # the clients' links and device speeds


def test_an_edge_client_gives_the_same_delta_wherever_it_is_built():
    """Seeds come from (client, version), not from the executor or its history: the same
    task gives the same Δ on a fresh pool, after other clients, or twice in a row."""
    cfg = TrainConfig(scheduler="fedavg", clients=50, local_steps=2, client_dynamics="gravity")
    info = describe(cfg.env)
    theta = initial_params(cfg, info)
    snapshot = Snapshot(theta, 4, task=make_task(TrainLocally, cfg))
    first = EdgeClients(worker_settings(cfg), info, client_settings(cfg)).run(17, snapshot)
    other_pool = EdgeClients(worker_settings(cfg), info, client_settings(cfg))
    other_pool.run(3, snapshot)
    again = other_pool.run(17, snapshot)
    assert first.worker_id == again.worker_id == 17
    assert torch.equal(first.payload, again.payload)
    later = other_pool.run(17, Snapshot(theta, 5, task=snapshot.task))
    assert not torch.equal(first.payload, later.payload)  # a later round draws afresh


@pytest.mark.parametrize(("env", "dynamics"), [("CartPole-v1", "gravity"), ("Pendulum-v1", "mass")])
def test_clients_that_borrow_one_network_and_env_give_the_same_deltas(env, dynamics, monkeypatch):
    """A runtime running one task at a time lends the first client's network and vector env
    to the next ones (``lent``): each loads the snapshot into the network, sets its own env
    variant and resets the env from its own seed, so the Δs, statistics and episodes are
    those of clients that built their own, bit for bit. CartPole's clients end episodes in
    their task (an env lent after an episode ended and restarted mid-task)."""
    cfg = TrainConfig(
        scheduler="fedavg",
        env=env,
        clients=50,
        local_steps=3,
        rollout_steps=16,
        client_dynamics=dynamics,
    )
    info = describe(cfg.env)
    theta = initial_params(cfg, info)
    snapshot = Snapshot(theta, 4, task=make_task(TrainLocally, cfg))
    own = EdgeClients(worker_settings(cfg), info, client_settings(cfg))
    lending, lent = EdgeClients(worker_settings(cfg), info, client_settings(cfg)), []
    episodes = 0
    for client in (17, 3, 17, 40):
        expected = own.run(client, snapshot)
        borrowed = lending.run(client, snapshot, lent)
        assert torch.equal(borrowed.payload, expected.payload)
        assert borrowed.stats == expected.stats
        assert borrowed.episode_returns == expected.episode_returns
        assert len(lent) == 1  # built once, by the first client
        episodes += len(borrowed.episode_returns)
    if env == "CartPole-v1":  # Pendulum's episodes last 200 steps
        assert episodes > 0
    parts = lent[0]
    assert isinstance(parts, LentParts) and parts.model is not None and parts.envs is not None

    built: list[int] = []
    monkeypatch.setattr(
        "hybrid.core.worker.make_vector_env",
        lambda *args: built.append(1) or make_vector_env(*args),
    )
    lending.run(5, snapshot, lent)
    assert built == []  # the lent env, not a new one
    own.run(5, snapshot)
    assert built == [1]


def test_only_envs_that_a_seeded_reset_restores_are_lent():
    """Classic control behind reset-cleared wrappers only: a stateful wrapper (running
    observation statistics) or an env outside classic control is never lent."""
    plain = make_vector_env("CartPole-v1", 2)
    assert resets_completely(plain)
    plain.close()
    normalized = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))]
    )
    assert not resets_completely(normalized)
    normalized.close()
    toy = gym.make_vec("FrozenLake-v1", num_envs=1, vectorization_mode="sync")
    assert not resets_completely(toy)
    toy.close()


def test_an_env_that_is_not_lent_is_built_per_task():
    """Without lending (a stateful wrapper), each client builds and closes its own env and
    the Δs are unchanged."""
    cfg = TrainConfig(
        scheduler="fedavg", clients=20, local_steps=2, wrappers="NormalizeObservation"
    )
    info = describe(cfg.env, env_settings(cfg))
    snapshot = Snapshot(initial_params(cfg, info), 2, task=make_task(TrainLocally, cfg))
    own = EdgeClients(worker_settings(cfg), info, client_settings(cfg))
    lending, lent = EdgeClients(worker_settings(cfg), info, client_settings(cfg)), []
    for client in (4, 9, 4):
        assert torch.equal(
            lending.run(client, snapshot, lent).payload, own.run(client, snapshot).payload
        )
    assert lent[0].envs is None and lent[0].model is not None


@pytest.fixture(scope="module")
def serial_thousand(tmp_path_factory):
    """The reference: 1,000 clients on the serial runtime's virtual clock."""
    return hybrid.train(_fedavg(1000, tmp_path_factory.mktemp("serial") / "run"))


@pytest.mark.parametrize("runtime", ["processes", "ray"])
def test_a_thousand_clients_sample_like_serial(serial_thousand, runtime, tmp_path):
    if runtime == "ray":
        pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")
    result = hybrid.train(_fedavg(1000, tmp_path / "run", runtime=runtime))
    expected = _clients_per_round(serial_thousand)
    assert len(expected) == serial_thousand.summary["updates"] >= 3
    assert all(len(clients) == 3 for clients in expected.values())
    assert _clients_per_round(result) == expected  # same seed, same clients, every round
    assert result.summary["updates"] == serial_thousand.summary["updates"]
    # Same seeds (client, version), same Δs; only the summation order may differ.
    torch.testing.assert_close(result.params, serial_thousand.params, rtol=0, atol=1e-5)
    assert result.metrics("train")[-1]["sched/worker_restarts"] == 0


def test_ten_thousand_clients_on_ray_make_at_most_workers_actors(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")
    from hybrid.runtimes.ray import RayRuntime

    created: list[int] = []
    spawn = RayRuntime._spawn

    def counted(self, actor):
        created.append(actor.worker_id)
        spawn(self, actor)

    monkeypatch.setattr(RayRuntime, "_spawn", counted)
    result = hybrid.train(_fedavg(10_000, tmp_path / "run", runtime="ray", total_env_steps=100))
    rounds = _clients_per_round(result)
    assert result.summary["updates"] >= 2 and len(rounds) == result.summary["updates"]
    assert len(set().union(*rounds.values())) > 2  # more clients took part than actors exist
    assert 0 < len(created) <= 2  # the workers' actors, not one per client


def test_killed_processes_rerun_their_clients_tasks_unchanged(serial_thousand, tmp_path):
    """A process killed with a client's task under way is replaced and the task re-runs
    from the same (client, version) seeds: the run ends where the fault-free one does."""
    result = hybrid.train(
        _fedavg(1000, tmp_path / "run", runtime="processes", inject_worker_faults=0.3)
    )
    assert result.metrics("train")[-1]["sched/worker_restarts"] > 0
    assert _clients_per_round(result) == _clients_per_round(serial_thousand)
    torch.testing.assert_close(result.params, serial_thousand.params, rtol=0, atol=1e-5)
