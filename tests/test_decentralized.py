"""Decentralized training: topologies, the replicas' mixing against references written from
the papers (D-PSGD's Θ ← WΘ, AD-PSGD's pairwise average, SGP's push-sum de-biasing), and
whole runs (complete graph == sync, reproducibility, one-line errors)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import crash_copy, metric_rows

import hybrid
import hybrid.assembly
import hybrid.schedulers
from hybrid.config import TrainConfig
from hybrid.core.global_model import GlobalModel
from hybrid.errors import ConfigError
from hybrid.protocol import Update
from hybrid.replicas import ReplicaApplier, consensus_distance
from hybrid.schedulers import AdPsgd, AdPsgdSettings, Gossip, GossipSettings, Sgp, SgpSettings
from hybrid.schedulers.ad_psgd import pair_matrix
from hybrid.schedulers.decentralized import MixingStep
from hybrid.topology import (
    TOPOLOGIES,
    build_graph,
    exponential_hops,
    exponential_push_matrix,
    mixing_matrix,
    spectral_gap,
    torus_shape,
)


def applier_with_rows(rows: torch.Tensor, optimizer: str = "sgd") -> ReplicaApplier:
    model = GlobalModel(torch.zeros(rows.shape[1]), optimizer=optimizer, lr=0.1)
    applier = ReplicaApplier(model, rows.shape[0])
    applier.rows.copy_(rows)
    return applier


# --- topologies --------------------------------------------------------------------------------


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("nodes", [4, 8, 9, 16])
def test_mixing_matrices_are_symmetric_doubly_stochastic_with_a_gap(topology, nodes):
    w = mixing_matrix(build_graph(topology, nodes, degree=3 if nodes % 2 == 0 else 4))
    np.testing.assert_allclose(w, w.T)
    np.testing.assert_allclose(w.sum(axis=0), 1.0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    assert (w >= 0).all()
    assert 0.0 < spectral_gap(w) <= 1.0 + 1e-12


def test_spectral_gaps_of_ring_and_complete_match_their_closed_forms():
    # ring, Metropolis–Hastings: W = I/3 + (shift + shift⁻¹)/3, eigenvalues 1/3 + 2/3 cos(2πk/N)
    for nodes in (4, 8, 16):
        expected = 1.0 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / nodes))
        assert spectral_gap(mixing_matrix(build_graph("ring", nodes))) == pytest.approx(expected)
    complete = mixing_matrix(build_graph("complete", 8))
    np.testing.assert_allclose(complete, np.full((8, 8), 1 / 8))
    assert spectral_gap(complete) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("topology", "nodes", "degree", "field"),
    [
        ("torus", 7, 3, "topology"),  # a prime: no rows x cols layout
        ("random-regular", 8, 1, "topology"),  # a perfect matching: not connected
        ("random-regular", 5, 3, "degree"),  # 5 x 3 is odd: no such graph
        ("ring", 1, 3, "workers"),  # nothing to mix with
    ],
)
def test_graphs_that_cannot_be_built_are_one_line_config_errors(topology, nodes, degree, field):
    with pytest.raises(ConfigError) as err:
        build_graph(topology, nodes, degree=degree)
    assert str(err.value).startswith(f"{field}:")
    assert "\n" not in str(err.value)


# --- the mixing steps, against references from the papers --------------------------------------


def test_one_gossip_step_is_w_times_theta():
    """D-PSGD (Lian et al. 2017, Alg. 1): x_i ← Σ_j W_ij x_j, with a hand-written W."""
    rows = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    applier = applier_with_rows(rows)
    w = mixing_matrix(build_graph("ring", 4))
    third = 1.0 / 3.0
    expected_w = np.array(
        [
            [third, third, 0, third],
            [third, third, third, 0],
            [0, third, third, third],
            [third, 0, third, third],
        ]
    )
    np.testing.assert_allclose(w, expected_w)
    applier.mix(w)
    reference = torch.tensor(
        [
            [sum(expected_w[i, j] * rows[j, c].item() for j in range(4)) for c in range(3)]
            for i in range(4)
        ]
    )
    torch.testing.assert_close(applier.rows, reference.float())


def test_a_gossip_step_steps_each_replica_with_its_own_direction_then_mixes():
    rows = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    applier = applier_with_rows(rows)
    model = GlobalModel(torch.zeros(5), optimizer="sgd", lr=0.1)
    grads = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    updates = [Update(k, 0, grads[k].clone(), env_steps=8) for k in range(4)]
    w = mixing_matrix(build_graph("ring", 4))
    applier.apply(model, MixingStep(updates=updates, mixing=w), progress=0.0)
    expected = torch.as_tensor(w, dtype=torch.float32) @ (rows - 0.1 * grads)
    torch.testing.assert_close(applier.rows, expected)
    torch.testing.assert_close(model.params, expected.mean(dim=0))  # θ̄ is what is evaluated
    assert model.version == 1
    assert applier.metrics()["decentral/consensus_distance"] == pytest.approx(
        consensus_distance(expected)
    )


def test_ad_psgd_pairwise_average_conserves_the_mean_and_leaves_the_others():
    """AD-PSGD (Lian et al. 2018, Alg. 1): x_i, x_j ← (x_i + x_j) / 2, atomically."""
    rows = torch.randn(6, 7, generator=torch.Generator().manual_seed(2))
    applier = applier_with_rows(rows)
    applier.mix(pair_matrix(6, 1, 4))
    torch.testing.assert_close(applier.rows.mean(dim=0), rows.mean(dim=0))
    torch.testing.assert_close(applier.rows[1], (rows[1] + rows[4]) / 2)
    assert torch.equal(applier.rows[1], applier.rows[4])
    for k in (0, 2, 3, 5):
        assert torch.equal(applier.rows[k], rows[k])  # untouched, bit for bit
    assert applier.bytes_sent == 2 * 7 * 4  # one θ each way
    assert applier.messages[1, 4] == applier.messages[4, 1] == 1
    assert applier.messages.sum() == 2


def test_ad_psgd_picks_a_neighbour_and_counts_gossip_staleness():
    scheduler = AdPsgd(4, AdPsgdSettings(topology="ring"))
    scheduler.bind(None, np.random.default_rng(0))  # type: ignore[arg-type]
    assert scheduler.ready([0, 1, 2, 3], 0) == [0, 1, 2, 3]
    scheduler.admit(Update(0, 0, torch.zeros(3), env_steps=1), 0)
    assert scheduler.full()
    step = scheduler.combine()
    assert isinstance(step, MixingStep) and step.mixing is not None
    partner = [k for k in (1, 3) if step.mixing[0, k] == 0.5]
    assert len(partner) == 1  # a ring neighbour of 0, never 2
    # the partner's replica changed while its worker computed: gossip staleness 1
    scheduler.admit(Update(partner[0], 0, torch.zeros(3), env_steps=1), 1)
    scheduler.combine()
    assert scheduler.gossip_staleness == [0, 1]


def test_push_sum_de_biases_a_column_stochastic_matrix():
    """Push-sum (Kempe et al. 2003; SGP, Assran et al. 2019, Alg. 1): with P column- but not
    row-stochastic, x alone drifts to a biased point; z = x / w converges to the average."""
    p = np.array(  # node 0 pushes to everyone, the others only to the next node
        [
            [0.25, 0.0, 0.0, 0.5],
            [0.25, 0.5, 0.0, 0.0],
            [0.25, 0.5, 0.5, 0.0],
            [0.25, 0.0, 0.5, 0.5],
        ]
    )
    np.testing.assert_allclose(p.sum(axis=0), 1.0)
    assert not np.allclose(p.sum(axis=1), 1.0)
    rows = torch.randn(4, 3, dtype=torch.float32, generator=torch.Generator().manual_seed(3))
    applier = applier_with_rows(rows)
    for _ in range(200):
        applier.mix(p, push_sum=True)
    target = rows.mean(dim=0)
    for k in range(4):
        torch.testing.assert_close(applier.debiased(k), target, rtol=0, atol=1e-5)
    assert (applier.rows - target).abs().max() > 1e-2  # without de-biasing: off
    torch.testing.assert_close(applier.rows.sum(dim=0), rows.sum(dim=0), rtol=0, atol=1e-5)


def test_push_sum_under_a_delay_conserves_mass_and_reaches_the_average():
    rows = torch.randn(8, 3, generator=torch.Generator().manual_seed(4))
    applier = applier_with_rows(rows)
    for t in range(3):
        applier.mix(exponential_push_matrix(8, t), push_sum=True, delay=2)
        in_flight = sum(r.sum(dim=0) for _, r, _ in applier.in_flight)
        torch.testing.assert_close(applier.rows.sum(dim=0) + in_flight, rows.sum(dim=0))
    assert not torch.allclose(applier.weights, torch.ones(8, dtype=torch.float64))
    for t in range(3, 200):
        applier.mix(exponential_push_matrix(8, t), push_sum=True, delay=2)
    for k in range(8):
        torch.testing.assert_close(applier.debiased(k), rows.mean(dim=0), rtol=0, atol=1e-4)


def test_sgp_exponential_graph_averages_exactly_in_log2_rounds():
    scheduler = Sgp(8, SgpSettings())
    assert scheduler.spectral_gap == pytest.approx(1.0)
    product = np.eye(8)
    for t in range(3):
        product = exponential_push_matrix(8, t) @ product
    np.testing.assert_allclose(product, np.full((8, 8), 1 / 8))


# --- whole runs --------------------------------------------------------------------------------


def small_run(**overrides) -> TrainConfig:
    return TrainConfig(
        env="CartPole-v1",
        workers=4,
        total_env_steps=2_560,  # 5 rounds of 4 workers x 128 steps
        rollout_steps=16,
        envs_per_worker=8,
        eval_every=10**6,
        eval_episodes=2,
        stop_when_solved=False,
        progress=False,
        env_defaults=False,
    ).replace(**overrides)


def test_complete_graph_equals_sync_with_sgd(tmp_path):
    """All-reduce is one gossip step on the complete graph: with SGD (linear in the
    direction) and no clipping, gossip's replicas stay one θ, equal to sync's up to
    rounding (sync computes the round's gradients batched together, in another order)."""
    cfg = small_run(optimizer="sgd", lr=0.05, max_grad_norm=0.0)
    sync = hybrid.train(cfg.replace(scheduler="sync", out=str(tmp_path / "sync")))
    gossip = hybrid.train(
        cfg.replace(
            scheduler="gossip",
            scheduler_args={"topology": "complete"},
            out=str(tmp_path / "gossip"),
        )
    )
    assert gossip.summary["updates"] == sync.summary["updates"] == 5
    torch.testing.assert_close(gossip.params, sync.params, rtol=0, atol=1e-5)
    assert gossip.summary["consensus_distance"] < 1e-6
    assert gossip.summary["evaluated_model"] == "mean of the replicas"
    assert sync.summary["evaluated_model"] == "global"
    ring = hybrid.train(
        cfg.replace(
            scheduler="gossip", scheduler_args={"topology": "ring"}, out=str(tmp_path / "ring")
        )
    )
    assert (ring.params - sync.params).abs().max() > 1e-4  # a sparse graph is not all-reduce


@pytest.mark.parametrize(
    ("scheduler", "args"),
    [
        ("gossip", {"topology": "ring", "evaluate_replicas": True}),
        ("ad-psgd", {"topology": "exponential"}),
        ("sgp", {"delay": 1}),
    ],
)
def test_decentralized_serial_runs_are_bit_reproducible(scheduler, args, tmp_path):
    cfg = small_run(scheduler=scheduler, scheduler_args=args, cluster="heterogeneous")
    first = hybrid.train(cfg.replace(out=str(tmp_path / "a")))
    again = hybrid.train(cfg.replace(out=str(tmp_path / "b")))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    summary = first.summary
    assert summary["evaluated_model"] == "mean of the replicas"
    assert summary["consensus_distance"] > 0  # a sparse graph after local steps: not one θ
    assert summary["mixes"] == summary["updates"] > 0
    assert 0 < summary["spectral_gap"] <= 1
    assert summary["bytes_per_worker_per_mix"] > 0
    assert summary["parameter_server_bytes_per_worker"] == 2 * 4 * first.params.numel()
    rows = first.metrics("train")
    assert rows and "decentral/consensus_distance" in rows[-1]
    messages = np.array(summary["messages_sent"])  # who sent to whom
    assert messages.shape == (4, 4) and messages.sum() > 0 and np.trace(messages) == 0
    if scheduler == "gossip":  # a ring: neighbours only, every round both ways
        assert messages[0, 2] == 0 and messages[0, 1] == messages[1, 0] == summary["mixes"]
    if args.get("evaluate_replicas"):
        assert len(summary["replica_eval_returns"]) == 4
    else:
        assert "replica_eval_returns" not in summary
    if scheduler == "ad-psgd":
        assert summary["staleness_unit"] == "updates"
        assert "gossip_staleness_mean" in summary
    else:
        assert summary["staleness_unit"] == "rounds" and summary["staleness_max"] == 0


def test_gossip_settings_are_checked_in_one_line():
    with pytest.raises(ConfigError, match=r"^scheduler_args: Gossip: topology: unknown"):
        small_run(scheduler="gossip", scheduler_args={"topology": "hypercube"}).validate()
    with pytest.raises(ConfigError, match=r"^topology: a 2-D torus"):
        Gossip(7, GossipSettings(topology="torus"))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--workers", "7", "--scheduler-arg", "topology=torus"], "topology"),
        (
            [
                "--workers",
                "8",
                "--scheduler-arg",
                "topology=random-regular",
                "--scheduler-arg",
                "degree=1",
            ],
            "topology",
        ),
        (["--workers", "1"], "workers"),
    ],
)
def test_cli_refuses_bad_graphs_in_one_line_exit_2(args, field, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid.cli",
            "train",
            "--scheduler",
            "gossip",
            "--total-env-steps",
            "1000",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_replica_applier_refuses_a_plain_step():
    applier = applier_with_rows(torch.zeros(2, 3))
    model = GlobalModel(torch.zeros(3))
    with pytest.raises(TypeError):
        applier.apply(model, hybrid.Step(torch.zeros(3)), 0.0)


@pytest.mark.parametrize(
    ("scheduler", "args"),
    [("ad-psgd", {"topology": "ring"}), ("sgp", {"delay": 2})],
)
def test_decentralized_resume_is_bit_exact(tiny_config, scheduler, args):
    """Checkpoints hold the replicas, their optimizer states and SGP's mass in flight."""
    cfg = tiny_config(
        scheduler=scheduler,
        scheduler_args=args,
        cluster="heterogeneous",
        total_env_steps=1_500,
        checkpoint_every=7,
        keep_checkpoints=100,
        stop_when_solved=False,
        eval_every=700,
    )
    full = hybrid.train(cfg)
    crashed = crash_copy(full.run_dir, full.run_dir.parent / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)
    for key in ("consensus_distance", "mixes", "bytes_sent", "updates"):
        assert resumed.summary[key] == full.summary[key], key


def test_gossip_on_processes_is_all_reduce_on_the_complete_graph_and_reproducible(tmp_path):
    """Each worker process starts from its own replica, sent with its task. A round's maths
    does not depend on who arrives first (each replica steps alone, then one matrix product
    mixes them), so a gossip run on processes is bit-reproducible; on the complete graph it
    is sync's averaged step on processes, up to rounding."""
    cfg = small_run(
        workers=2,
        total_env_steps=1_280,
        runtime="processes",
        optimizer="sgd",
        lr=0.05,
        max_grad_norm=0.0,
    )
    ring = cfg.replace(scheduler="gossip", scheduler_args={"topology": "ring"})
    first = hybrid.train(ring.replace(out=str(tmp_path / "a")))
    again = hybrid.train(ring.replace(out=str(tmp_path / "b")))
    assert first.summary["final_params_sha256"] == again.summary["final_params_sha256"]
    assert first.summary["updates"] == 5
    sync = hybrid.train(cfg.replace(scheduler="sync", out=str(tmp_path / "sync")))
    complete = hybrid.train(
        cfg.replace(
            scheduler="gossip", scheduler_args={"topology": "complete"}, out=str(tmp_path / "c")
        )
    )
    torch.testing.assert_close(complete.params, sync.params, rtol=0, atol=1e-5)


@pytest.mark.parametrize("runtime", ["processes", "ray"])
def test_ad_psgd_runs_on_parallel_runtimes(runtime, tmp_path):
    if runtime == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")
    result = hybrid.train(
        small_run(scheduler="ad-psgd", workers=2, runtime=runtime, out=str(tmp_path / "p"))
    )
    summary = result.summary
    assert summary["consensus_distance"] > 0
    assert summary["mixes"] == summary["updates"] == summary["tasks"] > 0
    assert summary["evaluated_model"] == "mean of the replicas"
    assert np.array(summary["messages_sent"]).sum() == 2 * summary["mixes"]


def test_sgp_runs_on_ray(tmp_path):
    """Push-sum on ray: the driver keeps the replicas and their weights (mass in flight with
    a delay) and sends each worker its de-biased replica in the task."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    result = hybrid.train(
        small_run(
            scheduler="sgp",
            scheduler_args={"delay": 1},
            workers=2,
            runtime="ray",
            out=str(tmp_path / "r"),
        )
    )
    summary = result.summary
    assert summary["evaluated_model"] == "mean of the replicas"
    # a round: each of the 2 workers trains its replica, then one push-sum mix of them all
    assert summary["mixes"] == summary["updates"] > 0
    assert summary["tasks"] == 2 * summary["mixes"]
    assert summary["consensus_distance"] > 0  # local steps between pushes: not one θ
    sent = np.array(summary["messages_sent"])
    assert sent.sum() == 2 * summary["mixes"]  # each replica pushes to its one peer
    assert torch.isfinite(result.params).all()


def test_the_benchmark_runs_valid_configs_and_prints_its_table(monkeypatch):
    """Every scheduler the benchmark compares validates at every N it runs, and its table
    marks an unsolved run's steps as a lower bound."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "benchmarks" / "decentralized.py"
    spec = importlib.util.spec_from_file_location("bench_decentralized", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    for workers in (4, 8, 16):
        for scheduler, args in bench.SCHEDULERS.values():
            cfg = TrainConfig(scheduler=scheduler, scheduler_args=dict(args), workers=workers)
            cfg.validate()
            if scheduler in ("gossip", "ad-psgd", "sgp"):
                hybrid.schedulers.make_scheduler(hybrid.assembly.scheduler_settings(cfg))
    row = {
        "runtime": "serial",
        "workers": 4,
        "solved": False,
        "env_steps_to_solve": 80_000,
        "virtual_s_to_solve": 2.0,
        "wall_s_to_solve": 9.0,
        "final_eval_return": 100.0,
        "consensus_distance_mean": 0.01,
    }
    rows = [row | {"scheduler": "gossip-ring", "seed": s} for s in range(2)]
    text = bench.table(rows)
    assert "| CartPole-v1 | serial | 4 | gossip-ring | 0/2 | not reached [" in text
    acrobot = bench.table([r | {"env": "Acrobot-v1"} for r in rows])
    assert "| Acrobot-v1 | serial | 4 | gossip-ring | 0/2 |" in acrobot
    assert text.endswith("| — |")  # no sync runs in the cell: nothing to test against
    sync = [row | {"scheduler": "sync", "seed": s, "solved": True} for s in range(2)]
    against = bench.table(rows + [r | {"env_steps_to_solve": 10_000} for r in sync])
    ring = next(line for line in against.splitlines() if "gossip-ring" in line)
    # every sync run solved before any ring run stopped: the log-rank test sees a difference
    p_steps, p_time = (float(p) for p in ring.rstrip(" |").rsplit("| ", 1)[1].split(" / "))
    assert 0 < p_steps < 0.2 and 0 < p_time <= 1


# --- each scheduler's settings and wiring, as mutation testing pins them ------------------------


def test_gossip_settings_name_every_topology_and_take_a_degree_of_one_or_more():
    with pytest.raises(ValueError, match="choose one of " + ", ".join(TOPOLOGIES) + "$"):
        GossipSettings(topology="hypercube")
    with pytest.raises(ValueError, match=r"^degree: 0 must be >= 1$"):
        GossipSettings(topology="random-regular", degree=0)
    assert GossipSettings(topology="random-regular", degree=1).degree == 1


@pytest.mark.parametrize(("degree", "graph_seed"), [(4, 1), (5, 2)])
def test_gossip_mixes_with_the_graph_its_settings_draw(degree, graph_seed):
    settings = GossipSettings(
        topology="random-regular", degree=degree, graph_seed=graph_seed, evaluate_replicas=True
    )
    gossip = Gossip(8, settings)
    expected = mixing_matrix(build_graph("random-regular", 8, degree, graph_seed))
    np.testing.assert_array_equal(gossip.w, expected)
    assert gossip.spectral_gap == spectral_gap(expected)
    assert gossip.evaluate_replicas is True
    assert gossip.describe().startswith("gossip on a random-regular graph: 8 replicas")
    for mix_first in (False, True):
        gossip.settings.mix_first = mix_first
        step = gossip.mixing(round_index=3)
        assert step.mixing is gossip.w and step.mix_first is mix_first


def test_sgp_settings_take_one_peer_or_more_and_a_delay_of_0_to_64_rounds():
    with pytest.raises(ValueError, match=r"^peers: 0 must be >= 1$"):
        SgpSettings(peers=0)
    for delay in (-1, 65):
        with pytest.raises(ValueError, match=rf"^delay: {delay} must be in \[0, 64\] rounds$"):
            SgpSettings(delay=delay)
    assert SgpSettings(peers=1, delay=0).delay == 0
    assert SgpSettings(delay=64).delay == 64


@pytest.mark.parametrize(("workers", "peers"), [(6, 1), (6, 2), (12, 3)])
def test_sgp_spectral_gap_is_that_of_one_period_of_its_push_graph(workers, peers):
    period = np.eye(workers)
    for t in range(len(exponential_hops(workers))):
        period = exponential_push_matrix(workers, t, peers) @ period
    largest_first = sorted(np.abs(np.linalg.eigvals(period)), reverse=True)
    sgp = Sgp(workers, SgpSettings(peers=peers, delay=3, evaluate_replicas=True))
    assert sgp.spectral_gap == pytest.approx(1.0 - largest_first[1], abs=1e-12)
    assert 0.0 < sgp.spectral_gap < 1.0  # not a power of 2: one period does not average
    assert sgp.evaluate_replicas is True
    assert sgp.describe() == (
        f"sgp on the time-varying exponential graph ({peers} peer(s), delay 3): "
        f"{workers} replicas, spectral gap {sgp.spectral_gap:.4f} over one period"
    )
    for round_index in (0, 1, 5):
        step = sgp.mixing(round_index)
        expected = exponential_push_matrix(workers, round_index, peers)
        np.testing.assert_array_equal(step.mixing, expected)
        assert step.push_sum is True and step.delay == 3


@pytest.mark.parametrize(("degree", "graph_seed"), [(4, 1), (5, 2)])
def test_ad_psgd_picks_from_the_graph_its_settings_draw_and_reports_its_expected_gap(
    degree, graph_seed
):
    settings = AdPsgdSettings(
        topology="random-regular", degree=degree, graph_seed=graph_seed, evaluate_replicas=True
    )
    scheduler = AdPsgd(8, settings)
    graph = build_graph("random-regular", 8, degree, graph_seed)
    assert scheduler.neighbours == [sorted(graph.neighbors(k)) for k in range(8)]
    # E[P]: a worker drawn uniformly, then one of its neighbours uniformly
    expected = sum(
        pair_matrix(8, i, j) / (8 * len(peers))
        for i, peers in enumerate(scheduler.neighbours)
        for j in peers
    )
    assert scheduler.spectral_gap == pytest.approx(spectral_gap(expected), abs=1e-12)
    assert scheduler.evaluate_replicas is True
    assert scheduler.describe().startswith("ad-psgd on a random-regular graph: 8 replicas")
    assert scheduler.describe().endswith("(expected mixing matrix)")


def test_ad_psgd_counts_writes_per_replica_and_its_state_round_trips():
    scheduler = AdPsgd(4, AdPsgdSettings(topology="ring"))
    scheduler.bind(None, np.random.default_rng(0))  # type: ignore[arg-type]
    assert scheduler.state_dict() == {
        "changes": [0] * 4,
        "read_at": [0] * 4,
        "gossip_staleness": [],
    }
    assert scheduler.metrics()["sched/gossip_staleness_mean"] == 0.0
    assert scheduler.metrics()["sched/gossip_staleness_max"] == 0.0
    scheduler.ready([0, 1, 2, 3], 0)
    scheduler.admit(Update(0, 0, torch.zeros(3), env_steps=1), 0)
    step = scheduler.combine()
    assert isinstance(step, MixingStep) and step.mix_first is True
    assert [u.worker_id for u in step.updates] == [0] and not scheduler.buffer
    partner = next(k for k in (1, 3) if step.mixing[0, k] == 0.5)
    np.testing.assert_array_equal(step.mixing, pair_matrix(4, 0, partner))
    changes = [0] * 4
    changes[0], changes[partner] = 2, 1  # its average and own step; the partner's average
    assert scheduler.state_dict()["changes"] == changes
    # the partner's worker read before the average: gossip staleness 1; worker 0 then reads
    # again and finishes with no write in between: 0
    scheduler.admit(Update(partner, 0, torch.zeros(3), env_steps=1), 1)
    second = scheduler.combine()
    changes[partner] += 2
    changes[next(k for k in range(4) if k != partner and second.mixing[partner, k] == 0.5)] += 1
    scheduler.ready([0], 2)
    assert scheduler.state_dict()["read_at"] == [changes[0], 0, 0, 0]
    scheduler.admit(Update(0, 2, torch.zeros(3), env_steps=1), 0)
    third = scheduler.combine()
    changes[0] += 2
    changes[next(k for k in range(4) if k != 0 and third.mixing[0, k] == 0.5)] += 1
    state = scheduler.state_dict()
    assert state["gossip_staleness"] == [0, 1, 0]
    assert state["changes"] == changes
    seen = state["gossip_staleness"]
    metrics = scheduler.metrics()
    assert metrics["sched/gossip_staleness_mean"] == pytest.approx(np.mean(seen))
    assert metrics["sched/gossip_staleness_max"] == float(max(seen))
    assert metrics["sched/spectral_gap"] == scheduler.spectral_gap
    restored = AdPsgd(4, AdPsgdSettings(topology="ring"))
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    assert restored.metrics() == metrics


def test_graphs_are_built_from_their_defaults_and_refuse_in_one_line():
    default = build_graph("random-regular", 8)
    assert sorted(default.edges) == sorted(build_graph("random-regular", 8, 3, 0).edges)
    assert {d for _, d in default.degree} == {3}
    assert sorted(build_graph("ring", 2).edges) == [(0, 1)]  # 2 replicas is the fewest
    with pytest.raises(ConfigError, match=r"^workers: .* at least 2 replicas to mix; got 1$"):
        build_graph("ring", 1)
    with pytest.raises(ConfigError, match=r"^degree: no 8-regular graph on 8 workers exists"):
        build_graph("random-regular", 8, degree=8)
    with pytest.raises(ConfigError, match="choose one of " + ", ".join(TOPOLOGIES) + "$"):
        build_graph("hypercube", 4)
    with pytest.raises(
        ConfigError,
        match=r"^topology: the random-regular graph on 8 workers \(degree 1, seed 0\) is not "
        r"connected, so the replicas would never agree; raise degree or choose another$",
    ):
        build_graph("random-regular", 8, degree=1)


def test_a_torus_links_each_node_to_its_four_grid_neighbours():
    assert torus_shape(12) == (3, 4)
    assert torus_shape(10) == (2, 5)  # √10 → 3 does not divide 10; 2 does
    with pytest.raises(
        ConfigError, match=r"7 workers cannot be laid out so \(use ring or exponential\)$"
    ):
        torus_shape(7)
    rows, cols = 3, 4
    expected = set()
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0)):
                a, b = r * cols + c, ((r + dr) % rows) * cols + (c + dc) % cols
                expected.add((min(a, b), max(a, b)))
    assert {(min(e), max(e)) for e in build_graph("torus", 12).edges} == expected


def test_exponential_hops_and_push_matrices_are_the_papers():
    assert exponential_hops(2) == [1]
    assert exponential_hops(5) == exponential_hops(8) == [1, 2, 4]
    third = 1.0 / 3.0
    for round_index, hops in ((0, (1, 2)), (1, (4, 1)), (2, (2, 4))):
        expected = np.eye(8) * third
        for sender in range(8):
            for hop in hops:
                expected[(sender + hop) % 8, sender] += third
        push = exponential_push_matrix(8, round_index, peers=2)
        np.testing.assert_allclose(push, expected)
    # more peers than hops: a receiver gets its share once per slot; columns still sum to 1
    np.testing.assert_allclose(
        exponential_push_matrix(2, 0, peers=2), [[third, 2 * third], [2 * third, third]]
    )


def test_the_spectral_gap_is_one_minus_the_second_largest_eigenvalue_magnitude():
    assert spectral_gap(np.diag([1.0, -0.6, 0.3])) == pytest.approx(0.4)
    assert spectral_gap(np.diag([0.2, 1.0, 0.5, -0.1])) == pytest.approx(0.5)
