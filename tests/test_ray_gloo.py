"""Decentralized runs on the ray runtime: the actors hold the replicas and mix them through a
gloo process group (``hybrid.runtimes._gloo``). A local Ray; the lost node is in
tests/test_ray_cluster.py."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch
from test_decentralized import small_run
from test_runtimes import _descendants, _eventually_empty

import hybrid
from hybrid.checkpoint import list_checkpoints, load

pytest.importorskip("ray", reason="the ray runtime is an extra: pip install hybrid-rl[ray]")

from hybrid.runtimes import _gloo
from hybrid.runtimes import ray as ray_runtime


@pytest.mark.filterwarnings("ignore:workers=4 on the ray runtime:RuntimeWarning")
def test_gossip_through_gloo_equals_the_loops_own_mixing(tmp_path, monkeypatch):
    """Same seeds, same actors: the replicas mixed by the actors over gloo give the run the
    loop gets when it holds the replicas and mixes X ← W X itself. (Not the serial runtime's
    run: a ray actor's warm-up task advances its envs, so its rollouts differ from serial's.)"""
    cfg = small_run(
        workers=4,
        total_env_steps=3 * 4 * 128,  # 3 rounds on a ring of 4 (a sparse W)
        runtime="ray",
        scheduler="gossip",
        scheduler_args={"topology": "ring", "evaluate_replicas": True},
    )
    before = set(_descendants())
    stores = []
    opened = _gloo.Rendezvous.__init__

    def spy(self, host):
        opened(self, host)
        stores.append(self.address)

    monkeypatch.setattr(_gloo.Rendezvous, "__init__", spy)
    gloo = hybrid.train(cfg.replace(out=str(tmp_path / "gloo")))
    # nothing left behind: no actor, no Ray daemon, no store listening
    left = _eventually_empty(lambda: {p: c for p, c in _descendants().items() if p not in before})
    assert not left, f"processes left behind: {left}"
    assert stores and stores[0][0] == "127.0.0.1"  # a local Ray: the store is on loopback
    with pytest.raises(OSError):
        socket.create_connection(stores[0], timeout=2).close()
    monkeypatch.setattr(ray_runtime.RayRuntime, "replica_applier", lambda *_: None)
    loop = hybrid.train(cfg.replace(out=str(tmp_path / "loop")))
    torch.testing.assert_close(gloo.params, loop.params, rtol=0, atol=1e-6)
    ours, theirs = gloo.summary, loop.summary
    assert ours["updates"] == ours["mixes"] == 3
    assert ours["consensus_distance"] == pytest.approx(theirs["consensus_distance"], abs=1e-6)
    assert ours["consensus_distance"] > 0  # a ring: the replicas still differ
    np.testing.assert_allclose(
        ours["replica_eval_returns"], theirs["replica_eval_returns"], rtol=0, atol=1e-6
    )
    assert ours["messages_sent"] == theirs["messages_sent"]
    # no replica rides on a task; the mixing bytes went through gloo, the gathers through
    # the driver (θ₀ out, the rows back for the evaluations and the end)
    assert ours["bytes_down"] == 0 < theirs["bytes_down"]
    assert ours["gloo_bytes"] == ours["bytes_sent"] == theirs["bytes_sent"] > 0
    assert ours["driver_bytes"] > 0 and ours["regroups"] == 0 and ours["failed_mixes"] == 0


def test_complete_gossip_through_gloo_is_syncs_averaged_step(tmp_path):
    """On the complete graph, with SGD and no clipping, gossip is all-reduce: sync's step."""
    cfg = small_run(
        workers=2, total_env_steps=3 * 2 * 128, runtime="ray", optimizer="sgd", lr=0.05
    ).replace(max_grad_norm=0.0)
    sync = hybrid.train(cfg.replace(scheduler="sync", out=str(tmp_path / "sync")))
    gossip = hybrid.train(
        cfg.replace(
            scheduler="gossip", scheduler_args={"topology": "complete"}, out=str(tmp_path / "g")
        )
    )
    assert gossip.summary["gloo_bytes"] > 0  # the actors mixed
    torch.testing.assert_close(gossip.params, sync.params, rtol=0, atol=1e-5)
    assert gossip.summary["consensus_distance"] < 1e-6


def test_a_resume_gives_the_actors_the_checkpoints_replicas(tmp_path):
    """A checkpoint holds every replica, gathered from the actors, with its optimizer state;
    a resume hands each new actor its own, and the next gather reads them back."""
    cfg = small_run(
        workers=2,
        total_env_steps=3 * 2 * 128,
        runtime="ray",
        scheduler="ad-psgd",
        checkpoint_every=2,
        out=str(tmp_path / "run"),
    )
    full = hybrid.train(cfg)
    saved = load(list_checkpoints(full.run_dir)[-1])["applier"]
    rows = torch.as_tensor(np.asarray(saved["rows"]))
    assert rows.shape == (2, full.params.numel())
    assert not torch.equal(rows[0], rows[1])  # two replicas, not one θ copied
    assert len(saved["optimizers"]) == 2 and saved["optimizers"][0]["state"]
    torch.testing.assert_close(rows.mean(dim=0), full.params)
    # a crash after the last checkpoint: the resumed run has nothing left to train, so its
    # model is the replicas the new actors hold, gathered back
    (full.run_dir / "summary.json").unlink()
    resumed = hybrid.train(resume=str(full.run_dir))
    torch.testing.assert_close(resumed.params, full.params, rtol=0, atol=1e-7)
    summary = json.loads((full.run_dir / "summary.json").read_text())
    assert summary["consensus_distance"] == pytest.approx(full.summary["consensus_distance"])
