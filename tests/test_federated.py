"""Federated averaging across simulated edge clients.

Scheduler maths and policy on hand-made updates; client profiles and env variants;
equivalence with sync; the virtual clock's round time; per-client fairness; memory
that does not grow with the number of clients; learning on IID CartPole clients.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import math
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest
import torch
from conftest import crash_copy, make_update, metric_rows

import hybrid
from federated import fairness_settings
from federated.evaluation import client_returns, fairness
from hybrid.aggregation import AggregationSettings
from hybrid.assembly import (
    client_settings,
    make_task,
    runtime_settings,
    worker_pool,
    worker_settings,
)
from hybrid.cli import parse_train_args
from hybrid.clients import (
    CARTPOLE_RANGES,
    ClientCostModel,
    clients_per_round,
    make_profiles,
    set_physics,
)
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.global_model import GlobalModel, Step
from hybrid.core.worker import Worker
from hybrid.envs import describe
from hybrid.privacy import DpFedAvg, PrivacyAccountant, PrivacySettings
from hybrid.protocol import Payload, Snapshot, TrainLocally, Update
from hybrid.schedulers import SCHEDULERS, FedAvg, FedAvgSettings, Verdict
from hybrid.seeding import SCHEDULER, stream
from hybrid.traces import ClientTrace, Trace
from hybrid.trainer import initial_params


def fedavg(clients: int, seed: int = 0, **settings) -> FedAvg:
    """fedavg over ``clients`` clients, its draws from a generator seeded as the loop's
    ``bind`` seeds the scheduler's stream."""
    scheduler = FedAvg(clients, FedAvgSettings(**settings))
    scheduler.bind(None, np.random.default_rng(seed))
    return scheduler


def built_and_bound(cfg: TrainConfig) -> FedAvg:
    """The scheduler the registry builds for ``cfg``, bound to the run's scheduler stream as
    the trainer binds it."""
    from hybrid.assembly import scheduler_settings
    from hybrid.schedulers import make_scheduler

    scheduler = make_scheduler(scheduler_settings(cfg))
    scheduler.bind(None, np.random.default_rng(stream(cfg.seed, SCHEDULER)))
    return scheduler


def delta(worker_id: int, values, env_steps: int = 10, base_version: int = 0, **kw):
    return make_update(worker_id, base_version, values, env_steps=env_steps, kind="delta", **kw)


def report_all(s: FedAvg, survivors: list[int], values: dict[int, list[float]], steps=None):
    for w in survivors:
        s.admit(delta(w, values[w], env_steps=(steps or {}).get(w, 10)), staleness=0)


# --- aggregation maths ----------------------------------------------------------------------


def test_fedavg_is_registered_beside_the_others():
    assert "fedavg" in SCHEDULERS
    assert FedAvg.task_kind is TrainLocally  # workers send Δ


def test_combine_is_the_sample_weighted_mean_of_the_deltas():
    s = fedavg(3, client_fraction=1.0)
    assert s.ready([0, 1, 2], version=0) == [0, 1, 2]
    # n_k = 10, 30, 60: (10*[1,2] + 30*[4,-2] + 60*[0.5,1]) / 100 = [1.6, 0.2]
    report_all(s, [0, 1, 2], {0: [1.0, 2.0], 1: [4.0, -2.0], 2: [0.5, 1.0]}, {1: 30, 2: 60})
    assert s.full()
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([1.6, 0.2]))
    assert step.clip is False  # a model difference is not a gradient to clip
    assert step.lr_scale == 1.0


def test_server_sgd_lr1_applies_the_mean_delta_exactly():
    """FedAvg: θ ← θ − mean Δ = Σ (n_k/n) θ_k when Δ_k = θ − θ_k, even past max_grad_norm."""
    theta = torch.tensor([1.0, -1.0, 0.5])
    locals_ = [torch.tensor([3.0, 0.0, 0.5]), torch.tensor([-1.0, -5.0, 2.5])]
    weights = [1.0, 3.0]
    model = GlobalModel(theta, optimizer="sgd", lr=1.0, max_grad_norm=0.5)
    s = fedavg(2, client_fraction=1.0)
    s.ready([0, 1], 0)
    for k, (local, n) in enumerate(zip(locals_, weights, strict=True)):
        s.admit(delta(k, (theta - local).tolist(), env_steps=int(n)), 0)
    model.apply(s.combine())
    expected = (weights[0] * locals_[0] + weights[1] * locals_[1]) / sum(weights)
    torch.testing.assert_close(model.params, expected)


def test_server_momentum_is_fedavgm():
    model = GlobalModel(torch.zeros(2), optimizer="sgd", lr=1.0, momentum=0.9)
    d = torch.tensor([1.0, 2.0])
    model.apply(Step(d.clone(), clip=False))
    model.apply(Step(d.clone(), clip=False))
    # v1 = d, v2 = 0.9 d + d: θ = −d − 1.9 d
    torch.testing.assert_close(model.params, -2.9 * d)


def test_gradients_are_still_clipped():
    model = GlobalModel(torch.zeros(2), optimizer="sgd", lr=1.0, max_grad_norm=0.5)
    model.apply(Step(torch.tensor([3.0, 4.0])))
    torch.testing.assert_close(model.params.norm(), torch.tensor(0.5), atol=1e-5, rtol=0)


# --- sampling, rounds, dropout, availability ------------------------------------------------


def test_clients_per_round_is_max_one_floor_c_k():
    assert clients_per_round(0.1, 1000) == 100
    assert clients_per_round(0.1, 8) == 1
    assert clients_per_round(0.3, 10) == 3  # 0.3 * 10 is 3.0000000000000004 in floats
    assert clients_per_round(0.29, 100) == 29
    assert clients_per_round(1.0, 7) == 7


def test_sampling_is_seeded_and_draws_only_idle_clients():
    rounds = []
    for seed in (0, 0, 1):
        s = fedavg(100, seed=seed, client_fraction=0.1)
        picked = s.ready(list(range(100)), 0)
        assert len(picked) == 10 and picked == sorted(set(picked))
        rounds.append(picked)
    assert rounds[0] == rounds[1]
    assert rounds[0] != rounds[2]
    s = fedavg(100, seed=3, client_fraction=0.5)
    idle = list(range(0, 100, 3))
    assert set(s.ready(idle, 0)) <= set(idle)


def test_round_stays_open_until_every_sampled_client_reported():
    s = fedavg(6, seed=1, client_fraction=0.5)
    picked = s.ready(list(range(6)), version=4)
    assert len(picked) == 3
    others = [w for w in range(6) if w not in picked]
    assert s.ready(others, version=4) == []  # the round is open
    # a sampled client seen idle lost its task (a restarted worker): it starts again
    assert s.ready([*others, picked[0]], version=4) == [picked[0]]
    s.admit(delta(picked[0], [1.0], base_version=4), 0)
    assert s.reject(make_update(picked[1], 4, [float("nan")], kind="delta")) is Verdict.DROP
    assert not s.full()
    s.admit(delta(picked[2], [3.0], base_version=4), 0)
    assert s.full()
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert len(s.ready(list(range(6)), version=5)) == 3  # the next round opens
    assert s.metrics()["sched/rounds"] == 2


def test_state_dict_round_trip_continues_the_same_draws():
    a = fedavg(50, seed=5, client_fraction=0.2, client_dropout=0.3)
    first = a.ready(list(range(50)), 0)
    report_all(a, first, {w: [1.0] for w in first})
    a.combine()
    b = fedavg(50, seed=5, client_fraction=0.2, client_dropout=0.3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    b.rng.bit_generator.state = a.rng.bit_generator.state  # the loop checkpoints the stream
    assert a.ready(list(range(50)), 1) == b.ready(list(range(50)), 1)
    assert a.metrics() == b.metrics()


def test_dropped_out_clients_never_start_and_are_counted():
    s = fedavg(200, seed=2, client_fraction=0.5, client_dropout=0.25)
    started = s.ready(list(range(200)), 0)
    m = s.metrics()
    assert m["sched/sampled"] == 100
    assert m["sched/dropouts"] + len(started) == 100
    assert 10 < m["sched/dropouts"] < 40  # ~25 of 100
    none = fedavg(200, seed=2, client_fraction=0.5)
    assert len(none.ready(list(range(200)), 0)) == 100


def test_a_round_without_survivors_is_skipped_not_stalled():
    s = fedavg(1, seed=0, client_fraction=1.0, client_dropout=0.9)
    assert s.ready([0], 0) == [0]  # eventually someone stays
    assert s.metrics()["sched/empty_rounds"] > 0


def test_only_available_clients_are_sampled():
    availability = [1.0] * 10 + [1e-12] * 10
    s = fedavg(20, seed=0, client_fraction=0.5, client_availability=availability)
    for version in range(5):
        picked = s.ready(list(range(20)), version)
        assert picked and max(picked) < 10
        report_all(s, picked, {w: [0.0] for w in picked})
        s.combine()


def test_a_gradient_update_is_refused_loudly():
    s = fedavg(2, client_fraction=1.0)
    s.ready([0, 1], 0)
    with pytest.raises(RuntimeError, match="delta"):
        s.admit(make_update(0, 0, [1.0]), 0)


# --- stragglers: deadline and late policy ---------------------------------------------------


def test_deadline_drops_late_deltas_and_counts_them():
    s = fedavg(3, client_fraction=1.0, round_deadline_s=1.0)
    s.ready([0, 1, 2], 0)
    assert s.admit(delta(0, [1.0], cost_s=0.5), 0) is Verdict.BUFFER
    assert s.admit(delta(1, [3.0], cost_s=0.9), 0) is Verdict.BUFFER
    assert s.admit(delta(2, [100.0], cost_s=4.0), 0) is Verdict.DROP
    assert s.full()
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_dropped"] == 1


def test_late_deltas_can_be_admitted_later_with_their_staleness():
    s = fedavg(3, client_fraction=1.0, round_deadline_s=1.0, late_policy="admit")
    s.ready([0, 1, 2], 0)
    s.admit(delta(0, [1.0], cost_s=0.5), 0)
    s.admit(delta(1, [1.0], cost_s=0.5), 0)
    # client 2 runs until t=2.5; the server gives up on it at t=1 and closes the round
    assert s.admit(delta(2, [10.0], cost_s=2.5), 0) is Verdict.BUFFER
    assert s.full()
    torch.testing.assert_close(s.combine().direction, torch.tensor([1.0]))
    # round 2 (version 1), clients 0 and 1 only (2 is still busy); closes at t=1.8 < 2.5
    assert s.ready([0, 1], 1) == [0, 1]
    s.admit(delta(0, [2.0], base_version=1, started_s=1.0, cost_s=0.8), 0)
    s.admit(delta(1, [2.0], base_version=1, started_s=1.0, cost_s=0.8), 0)
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_held"] == 1
    # round 3 (version 2) closes at t=3.0: the late Δ has arrived, two versions stale
    assert s.ready([0, 1, 2], 2) == [0, 1, 2]
    for w in range(3):
        s.admit(delta(w, [4.0], base_version=2, started_s=2.0, cost_s=1.0), 0)
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([(3 * 4.0 + 10.0) / 4]))
    m = s.metrics()
    assert m["sched/late_admitted"] == 1 and m["sched/late_staleness_mean"] == 2.0


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"client_fraction": 0.0}, "client_fraction"),
        ({"client_fraction": 1.5}, "client_fraction"),
        ({"client_fraction": float("nan")}, "client_fraction"),
        ({"local_steps": 0}, "local_steps"),
        ({"clients": 0}, "clients"),
        ({"clients": -3}, "clients"),
        ({"client_dropout": 1.0}, "client_dropout"),
        ({"client_dropout": -0.1}, "client_dropout"),
        ({"client_availability": 0.0}, "client_availability"),
        ({"client_dynamics": "lognormal_wind"}, "client_dynamics"),
        ({"client_dynamics": "pole_length", "env": "Pendulum-v1"}, "client_dynamics"),
        ({"late_policy": "maybe"}, "late_policy"),
        ({"server_momentum": 1.0}, "server_momentum"),
        ({"local_optimizer": "lion"}, "local_optimizer"),
        ({"round_deadline_s": 1.0, "scheduler": "sync"}, "round_deadline_s"),
    ],
)
def test_bad_settings_are_one_clear_error(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=10).replace(**changes)
    with pytest.raises(ConfigError, match=f"^{field}: ") as info:
        cfg.validate()
    assert "\n" not in str(info.value)


def test_edge_clients_run_on_every_runtime():
    """Once refused on processes (one process per client); now K clients share the pool."""
    for runtime in ("serial", "processes", "ray"):
        TrainConfig(scheduler="fedavg", clients=10_000, runtime=runtime, workers=2).validate()


def test_the_command_line_reads_naturally():
    cfg = parse_train_args(
        [
            "--scheduler",
            "fedavg",
            "--clients",
            "1000",
            "--client-fraction",
            "0.1",
            "--local-steps",
            "5",
        ]
    )
    assert (cfg.scheduler, cfg.clients, cfg.client_fraction, cfg.local_steps) == (
        "fedavg",
        1000,
        0.1,
        5,
    )
    cfg.validate()


# --- client profiles and env variants ---------------------------------------------------------


def test_profiles_are_seeded_and_iid_clients_are_identical():
    cfg = TrainConfig(scheduler="fedavg", clients=40, client_dynamics="pole_length")
    a, b = make_profiles(client_settings(cfg)), make_profiles(client_settings(cfg.replace(seed=0)))
    assert a == b
    lengths = [p.physics["length"] for p in a]
    lo, hi = CARTPOLE_RANGES["length"]
    assert all(lo <= x <= hi for x in lengths) and np.std(lengths) > 0.1
    assert make_profiles(client_settings(cfg.replace(seed=1))) != a
    iid = make_profiles(client_settings(cfg.replace(client_dynamics="iid")))
    assert {(p.dynamics, p.slowness, p.uplink_mbps, p.dropout) for p in iid} == {
        ((), 1.0, 10.0, 0.0)
    }


def test_straggler_profiles_have_the_exact_fraction():
    cfg = TrainConfig(clients=50, cluster="stragglers", straggler_fraction=0.2)
    slow = [p for p in make_profiles(client_settings(cfg)) if p.slowness == cfg.straggler_slowdown]
    assert len(slow) == 10


def test_env_variants_change_the_physics():
    import gymnasium as gym

    def first_step(physics):
        env = gym.make("CartPole-v1").unwrapped
        set_physics(env, physics)
        env.reset(seed=0)
        return env.step(1)[0]

    default, long_pole = first_step({}), first_step({"length": 1.0})
    assert not np.allclose(default, long_pole)
    env = gym.make("CartPole-v1").unwrapped
    set_physics(env, {"length": 0.8, "masscart": 2.0})
    assert env.polemass_length == pytest.approx(env.masspole * 0.8)
    assert env.total_mass == pytest.approx(env.masspole + 2.0)
    pendulum = gym.make("Pendulum-v1").unwrapped
    set_physics(pendulum, {"m": 1.4, "l": 0.6, "g": 12.0})
    assert (pendulum.m, pendulum.l, pendulum.g) == (1.4, 0.6, 12.0)
    with pytest.raises(ValueError, match="no physical attribute"):
        set_physics(pendulum, {"length": 1.0})


def test_a_client_worker_runs_its_own_variant():
    cfg = TrainConfig(scheduler="fedavg", clients=5, client_dynamics="all")
    worker = Worker(3, worker_settings(cfg), describe(cfg.env))
    env = worker.runner.envs.envs[1].unwrapped
    physics = make_profiles(client_settings(cfg))[3].physics
    assert (env.length, env.masscart, env.gravity) == (
        physics["length"],
        physics["masscart"],
        physics["gravity"],
    )
    worker.close()


# --- the client's local training --------------------------------------------------------------


def _local_delta(cfg: TrainConfig, theta: torch.Tensor) -> torch.Tensor:
    worker = Worker(0, worker_settings(cfg), describe(cfg.env))
    update = worker.run_task(Snapshot(theta.clone(), 7, task=make_task(TrainLocally, cfg)))
    assert update.kind == "delta" and update.base_version == 7
    assert update.env_steps == cfg.local_steps * cfg.rollout_steps * cfg.envs_per_worker
    assert ("losses/prox_drift" in update.stats) == (cfg.prox_mu > 0)
    torch.testing.assert_close(theta - update.payload, worker.flat.flat)  # Δ = θ_g − θ_local
    worker.close()
    return update.payload


@pytest.mark.parametrize("max_grad_norm", [0.0, 0.05], ids=["unclipped", "clipped"])
def test_fedprox_local_sgd_step_is_li_et_al(max_grad_norm):
    """Li et al. 2020 with SGD: θ ← θ − η(∇F_k(θ) + μ(θ − θ_g)), ∇F_k the (clipped) RL
    gradient. Step 1 starts at θ_g, where the proximal gradient is 0, so θ1 = θ_g − η c(g1)
    whatever μ (c: clipping). Step 2 adds μ(θ1 − θ_g) = −μ η c(g1) to the same c(g2) (same
    θ1, same seeds), so Δ_μ = Δ_0 − η μ Δ(E=1). Clipping the sum instead would shrink the
    proximal pull with the loss gradient whenever their sum exceeds max_grad_norm."""
    eta, mu = 0.05, 5.0
    cfg = TrainConfig(
        scheduler="fedavg", local_optimizer="sgd", local_lr=eta, max_grad_norm=max_grad_norm
    )
    theta = initial_params(cfg, describe(cfg.env))
    one_step = _local_delta(cfg.replace(local_steps=1), theta)
    plain = _local_delta(cfg.replace(local_steps=2), theta)
    prox = _local_delta(cfg.replace(local_steps=2, prox_mu=mu), theta)
    assert float(one_step.norm()) > 0
    if max_grad_norm:  # both loss gradients were clipped: the case the order decides
        assert float(one_step.norm()) == pytest.approx(eta * max_grad_norm, rel=1e-4)
        assert float((plain - one_step).norm()) == pytest.approx(eta * max_grad_norm, rel=1e-4)
    torch.testing.assert_close(prox, plain - eta * mu * one_step, rtol=0, atol=1e-7)
    assert float(prox.norm()) < float(plain.norm())  # pulled back toward θ_global


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_flat_local_clip_has_clip_grad_norms_bits(optimizer):
    """Without FedProx a client clips its flat gradient with clip_grad_norm_'s ops (one scale
    of the whole vector); with FedProx it calls clip_grad_norm_ on each parameter. A single
    local step starts at θ_g, where the proximal gradient is exactly 0, so the two must give
    the same Δ bit for bit, here with the clip active."""
    cfg = TrainConfig(
        scheduler="fedavg", local_steps=1, local_optimizer=optimizer, max_grad_norm=0.01
    )
    theta = initial_params(cfg, describe(cfg.env))
    flat = _local_delta(cfg, theta)
    per_parameter = _local_delta(cfg.replace(prox_mu=1.0), theta)
    assert torch.equal(flat, per_parameter)
    assert not torch.equal(flat, _local_delta(cfg.replace(max_grad_norm=0.0), theta))


def _sgd_pair(tiny_config, tmp_path, eta: float, **changes):
    common = dict(
        max_grad_norm=0.0,
        cluster="heterogeneous",
        eval_every=10**6,
        stop_when_solved=False,
        **changes,
    )
    sync = hybrid.train(
        tiny_config(out=str(tmp_path / "sync"), scheduler="sync", optimizer="sgd", lr=eta, **common)
    )
    fed = hybrid.train(
        tiny_config(
            out=str(tmp_path / "fedavg"),
            scheduler="fedavg",
            client_fraction=1.0,
            local_steps=1,
            local_optimizer="sgd",
            local_lr=eta,
            optimizer="sgd",
            lr=1.0,
            **common,
        )
    )
    return sync, fed


def test_fedavg_one_local_sgd_step_equals_sync_sgd(tiny_config, tmp_path):
    """E=1, C=1, local SGD η, server SGD lr 1: θ − mean(θ − (θ − η g_k)) = θ − η mean(g_k).

    Worker k is client k with the same seeds and the same env stream, so the clients see
    exactly the data sync's workers see; only float rounding in θ − θ_local differs.
    """
    sync, fed = _sgd_pair(tiny_config, tmp_path, eta=0.05, total_env_steps=600)
    assert sync.summary["updates"] == fed.summary["updates"] == 20
    start = initial_params(sync.config, describe(sync.config.env))
    assert not torch.allclose(sync.params, start, atol=1e-3)  # the runs moved
    torch.testing.assert_close(fed.params, sync.params, rtol=0, atol=2e-6)


def test_on_demand_clients_see_sync_workers_data_in_the_first_round(tiny_config, tmp_path):
    """A client's first-round env and sampling seeds are those of worker k's first task."""
    sync, fed = _sgd_pair(tiny_config, tmp_path, eta=0.05, total_env_steps=30, clients=3)
    assert sync.summary["updates"] == fed.summary["updates"] == 1
    torch.testing.assert_close(fed.params, sync.params, rtol=0, atol=1e-6)


# --- the virtual clock --------------------------------------------------------------------------


def _one_round(tiny_config, tmp_path, name: str, **changes):
    cfg = tiny_config(
        out=str(tmp_path / name),
        scheduler="fedavg",
        clients=4,
        client_fraction=1.0,
        local_steps=2,
        eval_every=10**6,
        cluster="heterogeneous",
        speed_sigma=1.0,
        client_link_sigma=0.5,
        client_eval_clients=4,
        **({"total_env_steps": 4 * 2 * 2 * 5} | changes),  # one round: 4 clients x E=2 x 2 x 5
    )
    return cfg, hybrid.train(cfg).summary


def test_round_time_is_the_slowest_surviving_client_with_its_links(tiny_config, tmp_path):
    cfg, summary = _one_round(tiny_config, tmp_path, "round")
    numel = initial_params(cfg, describe(cfg.env)).numel()
    cost = ClientCostModel(client_settings(cfg))
    times = [sum(cost.duration(k, 20, 4 * numel, 4 * numel, 2, 0)) for k in range(4)]
    assert len(set(times)) == 4  # heterogeneous devices and links
    assert summary["rounds"] == 1
    assert summary["virtual_time_s"] == pytest.approx(max(times), rel=1e-12)

    # A deadline between the two slowest: the round ends at the deadline, one Δ is late.
    ordered = sorted(times)
    deadline = (ordered[-2] + ordered[-1]) / 2
    _, cut = _one_round(tiny_config, tmp_path, "deadline", round_deadline_s=deadline)
    assert cut["virtual_time_s"] == pytest.approx(deadline, rel=1e-12)
    assert cut["late_dropped"] == cut["dropped"] == 1
    assert cut["bytes_up"] == summary["bytes_up"]  # the late Δ was sent all the same

    # A second round starts at the deadline, without the straggler (still busy): it ends
    # when its slowest client does, or at its own deadline.
    late = times.index(ordered[-1])
    others = [k for k in range(4) if k != late]
    second = max(sum(cost.duration(k, 20, 4 * numel, 4 * numel, 2, 1)) for k in others)
    _, two = _one_round(
        tiny_config, tmp_path, "two", round_deadline_s=deadline, total_env_steps=80 + 60
    )
    assert two["rounds"] == 2 and two["tasks"] == 7
    assert two["virtual_time_s"] == pytest.approx(deadline + min(second, deadline), rel=1e-12)


def test_stragglers_admitted_late_carry_staleness(tiny_config, tmp_path):
    cfg = tiny_config(
        scheduler="fedavg",
        clients=10,
        client_fraction=0.5,
        local_steps=2,
        total_env_steps=4_000,
        eval_every=10**6,
        cluster="stragglers",
        straggler_fraction=0.3,
        straggler_slowdown=10.0,
        round_deadline_s=0.05,
        late_policy="admit",
        client_eval_clients=4,
    )
    summary = hybrid.train(cfg).summary
    assert summary["late_admitted"] > 0
    assert summary["late_staleness_mean"] >= 1.0
    assert summary["dropped"] == 0
    # The histogram takes τ when a Δ is applied, not when it arrives: every on-time Δ has
    # τ = 0, every late one τ >= 1, and they add up to the scheduler's own count.
    histogram, late = summary["staleness_histogram"], summary["late_admitted"]
    assert sum(histogram[1:]) == late
    stale_total = sum(k * n for k, n in enumerate(histogram))
    assert stale_total == pytest.approx(summary["late_staleness_mean"] * late)
    assert summary["staleness_unit"] == "rounds"


# Every source of federated randomness at once: sampling, dropout, availability, physics,
# straggling devices and late Δs admitted with their staleness.
EVERYTHING_RANDOM = dict(
    scheduler="fedavg",
    clients=12,
    client_fraction=0.5,
    local_steps=2,
    client_dynamics="all",
    client_dropout=0.2,
    client_availability=0.8,
    cluster="stragglers",
    late_policy="admit",
    client_eval_clients=3,
)


def test_federated_runs_are_reproducible(tiny_config, tmp_path):
    common = dict(EVERYTHING_RANDOM, round_deadline_s=0.05, total_env_steps=1_000)
    hashes = [
        hybrid.train(tiny_config(out=str(tmp_path / name), seed=seed, **common)).summary
        for name, seed in (("a", 0), ("b", 0), ("c", 1))
    ]
    assert hashes[0]["final_params_sha256"] == hashes[1]["final_params_sha256"]
    assert hashes[0]["virtual_time_s"] == hashes[1]["virtual_time_s"]
    assert hashes[0]["final_params_sha256"] != hashes[2]["final_params_sha256"]
    assert hashes[0]["dropouts"] > 0


def test_resume_is_bit_exact_with_late_deltas_in_flight(tiny_config, tmp_path):
    """Held late Δs live in the scheduler's buffer and late devices in the runtime's
    state, so a checkpoint taken mid-run resumes to the same parameters and rows."""
    cfg = tiny_config(
        **EVERYTHING_RANDOM,
        round_deadline_s=0.03,
        total_env_steps=2_000,
        checkpoint_every=3,
        keep_checkpoints=100,
        stop_when_solved=False,
        eval_every=700,
    )
    full = hybrid.train(cfg)
    assert full.summary["late_admitted"] > 0
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    for key in ("virtual_time_s", "rounds", "late_admitted", "dropouts", "client_eval_mean"):
        assert resumed.summary[key] == full.summary[key], key
    assert metric_rows(crashed) == metric_rows(full.run_dir)


# --- per-client evaluation ---------------------------------------------------------------------


def test_fairness_figures_by_hand():
    per_client = np.array([10.0, 50.0, 20.0, 40.0, 30.0, 60.0, 70.0, 80.0, 90.0, 100.0, 5.0])
    figures = fairness(per_client)
    assert figures["client_eval_mean"] == pytest.approx(per_client.mean())
    # 10% of 11 clients rounds up to 2: the worst two are 5 and 10
    assert figures["client_eval_worst10"] == pytest.approx(7.5)
    assert figures["client_eval_std"] == pytest.approx(per_client.std())
    assert fairness(np.array([3.0]))["client_eval_worst10"] == 3.0
    assert figures["client_eval_returns"] == per_client.tolist()  # in client order


def test_clients_differ_only_by_their_dynamics():
    cfg = TrainConfig(scheduler="fedavg", clients=6, client_eval_episodes=2)
    info = describe(cfg.env)
    theta = initial_params(cfg, info)
    iid = client_returns(fairness_settings(cfg), info, theta, list(range(6)))
    assert (iid == iid[0]).all()  # same episode seeds, same env: the same returns
    varied_cfg = cfg.replace(client_dynamics="pole_length")
    varied = client_returns(fairness_settings(varied_cfg), info, theta, range(6))
    assert len({tuple(r) for r in varied}) > 1


def test_summary_reports_fairness_across_clients(tiny_config):
    cfg = tiny_config(
        scheduler="fedavg", clients=30, client_dynamics="pole_length", client_eval_clients=7
    )
    summary = hybrid.train(cfg).summary
    assert summary["client_eval_clients"] == 7
    assert summary["client_eval_worst10"] <= summary["client_eval_mean"]
    assert summary["client_eval_std"] >= 0
    assert "final_eval_return" in summary  # the default env, as for every run


# --- scale: memory grows with the clients per round, not with K ----------------------------


def test_on_demand_clients_hold_no_worker_between_tasks(monkeypatch):
    from hybrid.runtimes.serial import SerialRuntime

    built: list[int] = []
    alive: weakref.WeakSet[Worker] = weakref.WeakSet()

    class Tracked(Worker):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            built.append(self.worker_id)
            alive.add(self)

    monkeypatch.setattr("hybrid.runtimes.pool.Worker", Tracked)
    cfg = TrainConfig(scheduler="fedavg", clients=200, local_steps=1, client_dynamics="gravity")
    info = describe(cfg.env)
    runtime = SerialRuntime(runtime_settings(cfg), info, worker_pool(cfg, info))
    theta = initial_params(cfg, info)
    for client in range(0, 200, 10):
        runtime.dispatch(client, Snapshot(theta, 0, task=make_task(TrainLocally, cfg)))
    gc.collect()
    assert built == list(range(0, 200, 10))  # one build per task, none up front
    assert len(alive) == 0 and runtime.workers == []
    assert len(runtime.idle_workers()) == 180
    runtime.close()


RSS_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, tempfile
    import hybrid
    from hybrid import TrainConfig
    from hybrid.clients import clients_per_round
    k = int(sys.argv[1])
    m = clients_per_round(0.1, k)
    cfg = TrainConfig(
        scheduler="fedavg", clients=k, client_fraction=0.1, local_steps=1,
        client_dynamics="pole_length", total_env_steps=3 * m * 10, eval_every=10**9,
        eval_episodes=2, client_eval_clients=10, progress=False,
        out=tempfile.mkdtemp() + "/run", env_defaults=False,  # 2 envs a client: 3 rounds
    )
    summary = hybrid.train(cfg).summary
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rounds": summary["rounds"], "tasks": summary["tasks"], "rss_mb": rss_mb}))
    """
)


def _peak_rss(clients: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(clients)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_thousand_clients_cost_no_more_memory_than_ten():
    """1,000 clients x 3 rounds (100 per round) against the same run with 10 clients.

    The bound is 200 MB; 1,000 persistent workers alone would take ~100 MB
    (measured), so the tighter 50 MB bound is what catches clients kept between rounds.
    """
    small, large = _peak_rss(10), _peak_rss(1000)
    assert small["rounds"] == large["rounds"] == 3
    assert large["tasks"] == 300
    growth = large["rss_mb"] - small["rss_mb"]
    assert growth < 200
    assert growth < 50, f"peak RSS grew by {growth:.0f} MB"


# --- learning ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_fedavg_on_iid_clients_solves_cartpole(tmp_path):
    cfg = TrainConfig(
        scheduler="fedavg",
        clients=10,
        client_fraction=0.5,
        local_steps=50,
        rollout_steps=10,  # 500 steps per env and round: whole episodes on a fresh env
        local_optimizer="adam",
        local_lr=1e-3,
        optimizer="sgd",
        lr=1.0,
        total_env_steps=100_000,
        seed=0,
        client_eval_clients=10,
        progress=False,
        out=str(tmp_path / "run"),
    )
    summary = hybrid.train(cfg).summary
    assert summary["solved"] is True
    assert summary["final_eval_return"] >= 475
    assert summary["client_eval_worst10"] >= 475  # IID: every client is served
    assert math.isfinite(summary["virtual_time_s"])


# --- ray ---------------------------------------------------------------------------------------


def test_fedavg_on_ray_matches_serial(tmp_path):
    pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")
    cfg = TrainConfig(
        scheduler="fedavg",
        clients=2,  # one actor per client: no more than this machine's 2 cores
        client_fraction=1.0,
        local_steps=2,
        optimizer="sgd",
        lr=1.0,
        client_dynamics="pole_length",
        total_env_steps=2 * 2 * 2 * 5 * 3,  # three rounds
        env_defaults=False,  # ... of TrainConfig's 2 envs a client, not the family's 4
        eval_every=10**6,
        eval_episodes=2,
        client_eval_clients=2,
        stop_when_solved=False,
        progress=False,
    )
    serial = hybrid.train(cfg.replace(out=str(tmp_path / "serial")))
    on_ray = hybrid.train(cfg.replace(runtime="ray", out=str(tmp_path / "ray")))
    assert on_ray.summary["updates"] == serial.summary["updates"] == 3
    # Same seeds, same Δs; only the arrival order (so the summation order) may differ.
    torch.testing.assert_close(on_ray.params, serial.params, rtol=0, atol=1e-6)


# --- counters, settings and checkpoints over several rounds ---------------------------------------


def test_from_settings_keeps_the_clients_availability_and_dropout():
    """A config's client_availability and client_dropout reach the scheduler the registry
    builds: with C = 1 a round samples only the available clients, and some drop out."""

    def first_round(**changes):
        cfg = TrainConfig(scheduler="fedavg", clients=200, client_fraction=1.0, **changes)
        s = built_and_bound(cfg)
        started = s.ready(list(range(200)), 0)
        return len(started), s.metrics()

    assert first_round() == (200, first_round()[1])  # everyone, the baseline
    started, m = first_round(client_availability=0.3)
    assert m["sched/sampled"] == started and 30 < started < 100  # ~60 of 200
    started, m = first_round(client_dropout=0.5)
    assert m["sched/sampled"] == 200 and 60 < m["sched/dropouts"] < 140
    assert started == 200 - m["sched/dropouts"]


def test_round_counters_accumulate_over_rounds():
    """Every counter is a running total: after several rounds it is the sum of what each
    round added, not the last round's."""
    s = fedavg(10, seed=0, client_fraction=0.5, round_deadline_s=1.0)
    for version in range(4):
        started = s.ready(list(range(10)), version)
        assert len(started) == 5
        for w in started:  # the first sampled client of each round misses the deadline
            s.admit(
                delta(w, [1.0], base_version=version, cost_s=2.0 if w == started[0] else 0.5), 0
            )
        s.combine()
    m = s.metrics()
    assert (m["sched/rounds"], m["sched/sampled"], m["sched/late_dropped"]) == (4, 20, 4)
    assert m["sched/dropouts"] == 0 and m["sched/empty_rounds"] == 0

    # one client that drops out 90% of the time: every draw samples it once, every empty
    # round is one dropout, and the draws are the rounds plus the empty rounds
    lonely = fedavg(1, seed=3, client_fraction=1.0, client_dropout=0.9)
    for version in range(3):
        assert lonely.ready([0], version) == [0]
        lonely.admit(delta(0, [1.0], base_version=version), 0)
        lonely.combine()
    m = lonely.metrics()
    assert m["sched/rounds"] == 3 and m["sched/empty_rounds"] > 3
    assert m["sched/dropouts"] == m["sched/empty_rounds"]
    assert m["sched/sampled"] == m["sched/rounds"] + m["sched/empty_rounds"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"client_dropout": 1.0}, "client_dropout"),
        ({"client_dropout": -0.1}, "client_dropout"),
        ({"client_dropout": float("nan")}, "client_dropout"),
        ({"client_dropout": [0.1, 0.2, 1.0]}, "client_dropout"),
        ({"client_dropout": [0.1, 0.2]}, "client_dropout"),
        ({"client_availability": 0.0}, "client_availability"),
        ({"client_availability": 1.5}, "client_availability"),
        ({"client_availability": float("nan")}, "client_availability"),
        ({"client_availability": [1.0, 0.5, -0.5]}, "client_availability"),
        ({"client_availability": [1.0] * 4}, "client_availability"),
        ({"round_deadline_s": -1.0}, "round_deadline_s"),
        ({"late_policy": "maybe"}, "late_policy"),
    ],
)
def test_bad_probabilities_are_refused_by_fedavg_itself(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        fedavg(3, client_fraction=1.0, **kwargs)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.01, float("nan")])
def test_a_bad_fraction_is_refused_by_fedavg_itself(fraction):
    with pytest.raises(ValueError, match=r"^client_fraction: "):
        fedavg(3, client_fraction=fraction)


def test_a_checkpoint_taken_mid_round_resumes_to_the_same_result():
    """state_dict, the buffer and the bound stream (what the loop checkpoints), taken while
    a round waits for a client and a late Δ is held, then restored into a fresh scheduler:
    the round closes with the same step, and the next rounds draw the same clients with the
    same counters."""

    def play_first_round(s):
        s.ready(list(range(6)), 0)  # C = 1: all six, of which some drop out
        started = sorted(s.pending)
        s.admit(delta(started[0], [1.0], cost_s=3.0), 0)  # late: held for a later round
        s.admit(delta(started[1], [2.0], cost_s=0.5), 0)
        return started

    def finish(s, started):
        for w in started[2:]:
            s.admit(delta(w, [float(w)], cost_s=0.7), 0)
        steps = [s.combine()]
        for version in (1, 2):
            picked = s.ready(list(range(6)), version)
            for w in picked:
                s.admit(delta(w, [0.5], base_version=version, started_s=2.0 * version), 0)
            steps.append(s.combine())
        return steps, s.metrics()

    settings = {"client_fraction": 1.0, "seed": 4, "client_dropout": 0.2, "round_deadline_s": 1.0}
    uninterrupted = fedavg(6, late_policy="admit", **settings)
    started = play_first_round(uninterrupted)
    assert len(started) >= 3 and uninterrupted.round_open
    saved = json.loads(json.dumps(uninterrupted.state_dict()))
    buffer = list(uninterrupted.buffer)
    rng_state = uninterrupted.rng.bit_generator.state  # the loop checkpoints the bound stream
    expected_steps, expected_metrics = finish(uninterrupted, started)

    resumed = fedavg(6, late_policy="admit", **settings)
    resumed.load_state_dict(saved)
    resumed.buffer = buffer
    resumed.rng.bit_generator.state = rng_state
    assert resumed.round_open and not resumed.full()  # still waiting for its clients
    steps, metrics = finish(resumed, started)
    assert metrics == expected_metrics and metrics["sched/late_admitted"] == 1
    for got, want in zip(steps, expected_steps, strict=True):
        assert [u.worker_id for u in got.updates] == [u.worker_id for u in want.updates]
        assert torch.equal(got.direction, want.direction)


def test_from_settings_keeps_the_seed_and_the_deadline():
    def built(**changes):
        cfg = TrainConfig(scheduler="fedavg", clients=100, client_fraction=0.1, **changes)
        return built_and_bound(cfg)

    def first_round(scheduler):
        return scheduler.ready(list(range(100)), 0)

    by_hand = FedAvg(100, FedAvgSettings(client_fraction=0.1))
    by_hand.bind(None, np.random.default_rng(stream(7, SCHEDULER)))
    assert first_round(built(seed=7)) == first_round(by_hand)
    assert first_round(built(seed=7)) != first_round(built(seed=8))
    s = built(round_deadline_s=1.0)
    started = first_round(s)
    assert s.admit(delta(started[0], [1.0], cost_s=2.0), 0) is Verdict.DROP  # late


def test_without_a_deadline_no_delta_is_late():
    s = fedavg(2, client_fraction=1.0)
    s.ready([0, 1], 0)
    assert s.admit(delta(0, [1.0], cost_s=1e6), 0) is Verdict.BUFFER
    assert s.admit(delta(1, [3.0], cost_s=5.0), 0) is Verdict.BUFFER
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([2.0]))
    assert step.clip is False  # a model difference is never clipped as a gradient
    assert s.metrics()["sched/late_dropped"] == 0


def test_late_deltas_count_their_staleness_from_the_round_they_missed():
    """Two late Δs admitted rounds later: the counters add up, and each Δ's staleness is the
    admitting round's version minus its own base version."""
    s = fedavg(2, client_fraction=1.0, round_deadline_s=1.0, late_policy="admit")
    base = 3  # the first round starts at version 3
    s.ready([0, 1], base)
    s.admit(delta(0, [1.0], base_version=base, cost_s=0.5), 0)
    s.admit(delta(1, [9.0], base_version=base, cost_s=2.5), 0)  # late: arrives at t = 2.5
    s.combine()
    s.ready([0], base + 1)  # client 1 is still busy
    s.admit(delta(0, [1.0], base_version=base + 1, started_s=1.0, cost_s=0.5), 0)
    s.combine()  # closes at 1.5: the late Δ has not arrived yet
    s.ready([0, 1], base + 2)
    s.admit(delta(0, [1.0], base_version=base + 2, started_s=2.0, cost_s=0.9), 0)
    s.admit(delta(1, [9.0], base_version=base + 2, started_s=2.0, cost_s=3.0), 0)  # late again
    s.combine()  # closes at 2.9: the first late Δ (2.5) is admitted, two versions stale
    s.ready([0], base + 3)
    s.admit(delta(0, [1.0], base_version=base + 3, started_s=5.0, cost_s=0.5), 0)
    s.combine()  # closes at 5.5: the second late Δ (5.0) is admitted, one version stale
    m = s.metrics()
    assert m["sched/late_admitted"] == 2
    assert m["sched/late_staleness_mean"] == (2 + 1) / 2


# --- the round's draw, fresh state, deadlines at their boundaries ---------------------------------


def test_a_fresh_scheduler_checkpoints_and_reports_an_empty_history():
    """A checkpoint written before the first round must restore a scheduler that has done
    nothing yet; a plain scheduler's state and metrics carry no trace, Byzantine or DP entry."""
    s = fedavg(4, client_fraction=0.5)
    zeros = dict.fromkeys(
        ("rounds", "empty_rounds", "sampled", "dropouts", "late_dropped", "late_admitted"), 0
    )
    assert s.state_dict() == {
        "round_open": False,
        "pending": [],
        "round_version": 0,
        "round_closes_s": 0.0,
        "counts": zeros,
        "late_staleness": 0,
    }
    assert s.metrics() == {f"sched/{k}": 0 for k in zeros} | {"sched/late_held": 0}
    assert s.full() is False
    assert s.ready([], 0) == []  # nobody idle: no round, no draw
    assert s.state_dict()["counts"] == zeros
    traced = fedavg(2, client_fraction=1.0, trace=_trace([[(0.0, 1.0)], [(0.0, 1.0)]]))
    assert traced.state_dict()["trace"] == [0.0, 0.0, 0]
    assert (traced.metrics()["sched/trace_wait_s"], traced.metrics()["sched/trace_left"]) == (0, 0)


def test_a_round_is_exactly_the_documented_seeded_draw():
    """The draw consumes the scheduler's stream in a fixed order (availability, the sample,
    dropout), and only for what is configured: serial runs' hashes depend on it."""
    idle = [7, 3, 0, 9, 4, 1, 8]  # any order: the draw is over the sorted ids
    plain = fedavg(10, seed=11, client_fraction=0.3)
    by_hand = np.random.default_rng(11)
    for version in range(3):
        expected = sorted(by_hand.choice(np.array(sorted(idle)), size=3, replace=False).tolist())
        picked = plain.ready(idle, version)
        assert picked == expected
        report_all(plain, picked, {w: [1.0] for w in picked})
        plain.combine()

    availability = [0.5] * 5 + [0.9] * 5
    dropout = [0.3] * 10
    s = fedavg(
        10, seed=2, client_fraction=0.3, client_availability=availability, client_dropout=dropout
    )
    by_hand = np.random.default_rng(2)
    candidates = np.arange(10)
    reachable = candidates[by_hand.random(10) < np.array(availability)]
    chosen = np.sort(by_hand.choice(reachable, size=min(3, len(reachable)), replace=False))
    stays = chosen[by_hand.random(len(chosen)) >= 0.3]
    assert s.ready(list(range(10)), 0) == stays.tolist()
    m = s.metrics()
    assert (m["sched/sampled"], m["sched/dropouts"]) == (len(chosen), len(chosen) - len(stays))


def test_a_delta_that_takes_exactly_the_deadline_is_on_time():
    s = fedavg(2, client_fraction=1.0, round_deadline_s=1.0)
    s.ready([0, 1], 0)
    assert s.admit(delta(0, [1.0], cost_s=1.0), 0) is Verdict.BUFFER
    assert s.admit(delta(1, [3.0], cost_s=0.25), 0) is Verdict.BUFFER
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_dropped"] == 0 and s.metrics()["sched/late_held"] == 0


def test_a_late_delta_arriving_exactly_at_a_rounds_close_is_admitted_in_it():
    s = fedavg(2, client_fraction=1.0, round_deadline_s=1.0, late_policy="admit")
    s.ready([0, 1], 0)
    s.admit(delta(0, [1.0], cost_s=0.5), 0)
    s.admit(delta(1, [7.0], cost_s=2.0), 0)  # late: arrives at t = 2.0
    torch.testing.assert_close(s.combine().direction, torch.tensor([1.0]))
    s.ready([0], 1)
    s.admit(delta(0, [1.0], base_version=1, started_s=1.0, cost_s=1.0), 0)  # closes at 2.0
    step = s.combine()
    assert sorted(u.worker_id for u in step.updates) == [0, 1]
    torch.testing.assert_close(step.direction, torch.tensor([4.0]))
    m = s.metrics()
    assert (m["sched/late_admitted"], m["sched/late_held"], m["sched/late_staleness_mean"]) == (
        1,
        0,
        1.0,
    )


def test_each_round_closes_at_its_own_latest_arrival():
    """The close time starts afresh each round: a late Δ still in flight when an early-closing
    round ends waits for a later one."""
    s = fedavg(2, client_fraction=1.0, round_deadline_s=0.2, late_policy="admit")
    s.ready([0, 1], 0)
    s.admit(delta(0, [1.0], cost_s=0.1), 0)
    s.admit(delta(1, [5.0], cost_s=0.5), 0)  # late: given up on at 0.2, arrives at 0.5
    assert s.state_dict()["round_closes_s"] == pytest.approx(0.2)
    torch.testing.assert_close(s.combine().direction, torch.tensor([1.0]))
    s.ready([0], 1)
    s.admit(delta(0, [2.0], base_version=1, started_s=0.2, cost_s=0.1), 0)
    assert s.state_dict()["round_closes_s"] == pytest.approx(0.3)
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_held"] == 1


def test_a_round_whose_every_delta_was_late_combines_to_nothing():
    s = fedavg(2, client_fraction=1.0, round_deadline_s=1.0)
    s.ready([0, 1], 0)
    for w in (0, 1):
        assert s.admit(delta(w, [1.0], cost_s=3.0), 0) is Verdict.DROP
    assert s.full() and s.combine() is None
    assert s.metrics()["sched/late_dropped"] == 2
    # closed: the checkpoint says so with a bool, as it did before the first round
    assert s.full() is False and s.state_dict()["round_open"] is False
    assert s.ready([0, 1], 0) == [0, 1]  # the next round opens


def test_a_gradient_update_names_what_the_runtime_must_do():
    s = fedavg(2, client_fraction=1.0)
    s.ready([0, 1], 0)
    with pytest.raises(RuntimeError) as info:
        s.admit(make_update(1, 0, [1.0]), 0)
    assert str(info.value).startswith("fedavg got a <Payload.GRADIENT: ")
    assert str(info.value).endswith(
        "update from worker 1: the runtime must pass the snapshot's task ('delta') on to its "
        "workers"
    )


def test_a_plain_round_is_combined_bit_for_bit_as_the_sample_weighted_mean():
    """With no robust rule and no DP, the round's Δs go through the schedulers' own weighted
    mean, summed in arrival order (the module docstring: "exactly as before")."""
    from hybrid.schedulers.aggregate import weighted_mean

    gen = torch.Generator().manual_seed(0)
    payloads = [torch.randn(64, generator=gen) for _ in range(3)]
    steps = [7, 13, 29]
    s = fedavg(3, client_fraction=1.0)
    s.ready([0, 1, 2], 0)
    for w in (2, 0, 1):  # arrival order, not id order
        s.admit(delta(w, payloads[w].tolist(), env_steps=steps[w]), 0)
    got = s.combine().direction
    expected = weighted_mean([payloads[w] for w in (2, 0, 1)], [float(steps[w]) for w in (2, 0, 1)])
    assert torch.equal(got, expected)
    one = fedavg(1, client_fraction=1.0)
    one.ready([0], 0)
    update = delta(0, payloads[0].tolist(), env_steps=3)
    one.admit(update, 0)
    assert torch.equal(one.combine().direction, update.payload)  # one Δ is its own mean


# --- a real runtime's word at the deadline (Update.overdue) ---------------------------------------


def overdue(worker_id: int, waited_s: float, base_version: int = 0) -> Update:
    """The stand-in a real runtime hands over at the deadline: no payload, the seconds waited."""
    return Update(
        worker_id=worker_id,
        base_version=base_version,
        payload=None,
        env_steps=0,
        kind=Payload.DELTA,
        cost_s=waited_s,
        overdue=True,
    )


def test_an_overdue_stand_in_closes_the_round_and_its_late_delta_is_dropped_once():
    s = fedavg(4, client_fraction=1.0, round_deadline_s=1.0)
    s.ready([0, 1, 2, 3], 0)
    s.admit(delta(0, [1.0], cost_s=0.5), 0)
    s.admit(delta(1, [3.0], cost_s=0.5), 0)
    assert s.admit(overdue(2, 1.2), 0) is Verdict.DROP
    assert s.admit(overdue(3, 1.1), 0) is Verdict.DROP
    assert s.full()
    assert s.state_dict()["round_closes_s"] == pytest.approx(1.0)  # it stopped waiting then
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.metrics()["sched/late_dropped"] == 2
    # the Δs themselves come later: dropped, not counted again
    assert s.admit(delta(2, [100.0], cost_s=2.5), 0) is Verdict.DROP
    assert s.admit(delta(3, [100.0], cost_s=1.5), 0) is Verdict.DROP
    assert s.metrics()["sched/late_dropped"] == 2 and s.buffer == []
    # and those clients are no longer awaited: their next on-time Δ counts
    assert s.ready([0, 1, 2, 3], 1) == [0, 1, 2, 3]
    for w in range(4):
        assert s.admit(delta(w, [float(w)], base_version=1, cost_s=0.5), 0) is Verdict.BUFFER
    torch.testing.assert_close(s.combine().direction, torch.tensor([1.5]))


def test_under_admit_an_overdue_deltas_real_result_is_held_for_a_later_round():
    s = fedavg(2, client_fraction=1.0, round_deadline_s=1.0, late_policy="admit")
    s.ready([0, 1], 0)
    s.admit(delta(0, [1.0], cost_s=0.5), 0)
    assert s.admit(overdue(1, 1.3), 0) is Verdict.DROP  # nothing to hold yet
    torch.testing.assert_close(s.combine().direction, torch.tensor([1.0]))
    assert s.metrics()["sched/late_dropped"] == 0
    assert s.admit(delta(1, [5.0], cost_s=1.8), 0) is Verdict.BUFFER  # arrives at t = 1.8
    assert s.metrics()["sched/late_held"] == 1
    s.ready([0], 1)
    s.admit(delta(0, [1.0], base_version=1, started_s=1.0, cost_s=1.0), 0)  # closes at 2.0
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([3.0]))
    assert s.metrics()["sched/late_admitted"] == 1
    # client 1 is no longer an overdue one: an on-time Δ of it is taken as any
    s.ready([0, 1], 2)
    s.admit(delta(0, [2.0], base_version=2, started_s=2.0, cost_s=0.5), 0)
    assert s.admit(delta(1, [4.0], base_version=2, started_s=2.0, cost_s=0.5), 0) is Verdict.BUFFER
    torch.testing.assert_close(s.combine().direction, torch.tensor([3.0]))
    assert s.metrics()["sched/late_admitted"] == 1


# --- trace-driven availability --------------------------------------------------------------------


def _trace(windows: list[list[tuple[float, float]]], period_s: float = 0.0) -> Trace:
    rows = [ClientTrace(c, 1.0, 5.0, 20.0, tuple(w)) for c, w in enumerate(windows)]
    return Trace(tuple(rows), period_s=period_s)


def _traced(seed: int = 0) -> FedAvg:
    """Clients 0 and 1 online in [0, 1) and [4, 5), client 2 in [2, 3) and [8, 9)."""
    windows = [[(0.0, 1.0), (4.0, 5.0)]] * 2 + [[(2.0, 3.0), (8.0, 9.0)]]
    return fedavg(3, seed=seed, client_fraction=1.0, trace=_trace(windows))


def _two_traced_rounds(s: FedAvg) -> None:
    # round 1 at t = 0: 0 and 1 are online; 1 finishes at 1.5, after it went offline at 1
    assert s.ready([0, 1, 2], 0) == [0, 1]
    assert s.admit(delta(0, [1.0], cost_s=0.5), 0) is Verdict.BUFFER
    assert s.admit(delta(1, [9.0], cost_s=1.5), 0) is Verdict.DROP
    s.combine()
    # round 2 opens at 1.5 with nobody online: it waits 0.5 for client 2, which leaves too
    assert s.ready([0, 1, 2], 1) == [2]
    assert s.admit(delta(2, [9.0], base_version=1, started_s=1.5, cost_s=1.2), 0) is Verdict.DROP
    assert s.combine() is None


def test_traced_rounds_wait_for_clients_and_drop_the_ones_that_leave():
    s = _traced()
    _two_traced_rounds(s)
    assert (s.trace_wait_s, s.trace_left) == (pytest.approx(0.5), 2)
    # round 3 opens at 2.7 on the runtime's clock, 3.2 on the trace's (the waits so far):
    # client 2 is gone, and 0 and 1 come back at 4
    assert s.ready([0, 1, 2], 2) == [0, 1]
    assert s.trace_wait_s == pytest.approx(0.5 + 0.8)
    m = s.metrics()
    assert (m["sched/trace_wait_s"], m["sched/trace_left"]) == (pytest.approx(1.3), 2)
    assert s.state_dict()["trace"] == [pytest.approx(1.3), 4.0, 2]


def test_an_upload_that_ends_with_the_clients_window_is_kept():
    s = fedavg(1, client_fraction=1.0, trace=_trace([[(0.0, 1.0)]]))
    s.ready([0], 0)
    assert s.admit(delta(0, [1.0], cost_s=1.0), 0) is Verdict.BUFFER
    assert s.trace_left == 0


def test_a_traced_checkpoint_resumes_the_same_rounds():
    s = _traced(seed=3)
    _two_traced_rounds(s)
    saved = json.loads(json.dumps(s.state_dict()))
    resumed = _traced(seed=3)
    resumed.load_state_dict(saved)
    resumed.rng.bit_generator.state = s.rng.bit_generator.state
    assert (resumed.trace_wait_s, resumed.trace_round_start_s, resumed.trace_left) == (
        s.trace_wait_s,
        s.trace_round_start_s,
        2,
    )
    assert resumed.ready([0, 1, 2], 2) == s.ready([0, 1, 2], 2) == [0, 1]
    assert resumed.metrics() == s.metrics()
    assert resumed.state_dict() == s.state_dict()


def test_clients_that_never_come_online_stop_the_run_with_a_clear_error():
    s = fedavg(2, client_fraction=1.0, trace=_trace([[], [(0.0, 1.0)]]))
    with pytest.raises(RuntimeError) as info:
        s.ready([0], 0)  # client 0 has no window at all
    assert str(info.value) == (
        "fedavg: no client took part in 10000 rounds in a row; "
        "client_dropout is too high or client_availability too low"
    )
    assert s.metrics()["sched/empty_rounds"] == 10_000 and s.metrics()["sched/rounds"] == 0


# --- hostile and private rounds -------------------------------------------------------------------


def test_byzantine_clients_are_counted_when_sampled_and_when_received():
    """Clients 1 and 3 are Byzantine; 3 misses the deadline every round, so it is sampled but
    never received. The median ignores the outlier a mean would follow."""
    median = AggregationSettings(aggregator="median")

    def build() -> FedAvg:
        return fedavg(
            5,
            client_fraction=1.0,
            round_deadline_s=1.0,
            byzantine_clients=(1, 3),
            aggregation=median,
        )

    s = build()
    on_time = {0: [1.0], 1: [100.0], 2: [2.0], 4: [3.0]}
    for version in range(2):
        assert s.ready(list(range(5)), version) == [0, 1, 2, 3, 4]
        for w in range(5):
            cost = 3.0 if w == 3 else 0.5
            s.admit(delta(w, on_time.get(w, [50.0]), base_version=version, cost_s=cost), 0)
        step = s.combine()
        torch.testing.assert_close(step.direction, torch.tensor([2.5]))  # (2 + 3) / 2
        assert step.clip is False and [u.worker_id for u in step.updates] == [0, 1, 2, 4]
    m = s.metrics()
    names = ("byzantine_clients", "byzantine_sampled", "byzantine_received")
    assert tuple(m[f"sched/{name}"] for name in names) == (2, 4, 2)
    assert s.state_dict()["byzantine"] == [4, 2]
    resumed = build()
    resumed.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert resumed.metrics() == m
    # a robust round in which every Δ was late has nothing to combine
    s.ready(list(range(5)), 2)
    for w in range(5):
        s.admit(delta(w, [1.0], base_version=2, cost_s=2.0), 0)
    assert s.combine() is None
    assert s.metrics()["sched/byzantine_received"] == 2


def test_a_norm_bound_keeps_the_sample_weighted_mean():
    s = fedavg(2, client_fraction=1.0, aggregation=AggregationSettings(norm_bound=1.0))
    s.ready([0, 1], 0)
    s.admit(delta(0, [3.0, 4.0], env_steps=10), 0)  # norm 5: scaled to [0.6, 0.8]
    s.admit(delta(1, [0.3, 0.4], env_steps=30), 0)  # norm 0.5: kept
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([0.375, 0.5]))  # (6+9, 8+12) / 40
    assert step.clip is False


def test_robust_rules_that_cannot_hold_and_dp_with_a_robust_rule_are_refused():
    with pytest.raises(ConfigError, match=r"^krum_f: 1 needs more than 2\*f\+2 = 4"):
        fedavg(6, client_fraction=0.5, aggregation=AggregationSettings(aggregator="krum"))
    fedavg(10, client_fraction=0.5, aggregation=AggregationSettings(aggregator="krum"))  # m = 5
    dp = PrivacySettings(clip=1.0, noise_multiplier=1.0)
    for robust in (AggregationSettings(aggregator="median"), AggregationSettings(norm_bound=2.0)):
        with pytest.raises(ValueError) as info:
            fedavg(4, client_fraction=0.5, privacy=dp, aggregation=robust)
        assert str(info.value) == (
            "dp_clip: DP-FedAvg aggregates with the mean; leave aggregator mean"
        )
    with pytest.raises(ConfigError, match=r"^dp_target_epsilon: "):  # the round's check runs
        fedavg(4, client_fraction=0.5, privacy=dataclasses.replace(dp, target_epsilon=1e-3))


DP = PrivacySettings(clip=1.0, noise_multiplier=1.0)


def _dp_round(s: FedAvg, version: int, payloads: list[list[float]]) -> tuple[list[int], Step]:
    picked = s.ready(list(range(s.workers)), version)
    for w, values in zip(picked, payloads, strict=False):
        s.admit(delta(w, values, base_version=version), 0)
    return picked, s.combine()


def test_dp_fedavg_rounds_are_clipped_noised_and_accounted():
    """Each round is DpFedAvg's noised mean from the run's own noise stream, its ε is the
    accountant's after that many rounds, and a checkpoint continues the same noise."""

    def build() -> FedAvg:
        return fedavg(
            4, seed=1, client_fraction=0.5, privacy=DP, dp_noise_seed=5, byzantine_clients=(0,)
        )

    reference = DpFedAvg(DP, 4, 2, torch.Generator().manual_seed(5))
    s = build()
    by_hand = np.random.default_rng(1)
    payloads = [[3.0, 4.0], [0.3, 0.4]]  # norms 5 (clipped to 1) and 0.5
    for version in range(2):
        expected = sorted(by_hand.choice(np.arange(4), size=2, replace=False).tolist())
        if version == 1:
            saved = copy.deepcopy(s.state_dict())  # the generator state is a tensor
            rng_state = s.rng.bit_generator.state
        picked, step = _dp_round(s, version, payloads)
        assert picked == expected
        assert torch.equal(step.direction, reference.aggregate(torch.tensor(payloads)))
        assert step.clip is False and [u.worker_id for u in step.updates] == picked
    m = s.metrics()
    epsilon = PrivacyAccountant(DP, 4, 2).epsilon_after(2)
    assert m["sched/dp_rounds"] == 2 and m["sched/dp_epsilon"] == pytest.approx(epsilon)
    assert (m["sched/dp_clip"], m["sched/dp_delta"], m["sched/dp_unclipped_fraction"]) == (
        1.0,
        1e-5,
        0.5,
    )
    assert "sched/dp_target_epsilon" not in m and m["sched/byzantine_clients"] == 1
    assert s.state_dict()["dp"]["rounds"] == 2

    resumed = build()
    resumed.load_state_dict(saved)
    resumed.rng.bit_generator.state = rng_state
    _, resumed_step = _dp_round(resumed, 1, payloads)
    assert torch.equal(resumed_step.direction, step.direction)  # the same noise draw
    assert resumed.metrics() == m


def test_poisson_sampled_dp_rounds_draw_each_client_alone_and_charge_every_draw():
    """q = m / K = 1/4: a draw may take nobody (an empty round, still charged by the
    accountant) or more than m clients."""
    privacy = dataclasses.replace(DP, sampling="poisson")
    s = fedavg(4, seed=1, client_fraction=0.25, privacy=privacy)
    by_hand = np.random.default_rng(1)
    draws = 0
    for version in range(3):
        while True:
            draws += 1
            taken = np.arange(4)[by_hand.random(4) < 0.25]
            if len(taken):
                break
        picked, _ = _dp_round(s, version, [[0.5]] * 4)
        assert picked == taken.tolist()
    m = s.metrics()
    assert (m["sched/rounds"], m["sched/empty_rounds"], m["sched/dp_rounds"]) == (3, 2, draws)
    assert draws == 5 and m["sched/sampled"] == 4  # [2], [1], [0, 2]


def test_a_dp_run_stops_drawing_before_a_round_would_pass_its_target_epsilon():
    epsilons = [PrivacyAccountant(DP, 4, 2).epsilon_after(r) for r in (1, 2, 3)]
    target = (epsilons[1] + epsilons[2]) / 2  # two rounds fit, a third would not
    s = fedavg(4, client_fraction=0.5, privacy=dataclasses.replace(DP, target_epsilon=target))
    for version in range(2):
        assert not s.finished()
        assert s.metrics()["sched/dp_target_reached"] == 0.0
        picked, step = _dp_round(s, version, [[0.5], [0.25]])
        assert len(picked) == 2 and step is not None
    assert s.finished()
    assert s.ready([0, 1, 2, 3], 2) == []
    m = s.metrics()
    assert (m["sched/dp_target_epsilon"], m["sched/dp_target_reached"]) == (target, 1.0)
    assert m["sched/dp_rounds"] == 2
