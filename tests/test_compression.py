"""Codecs inside training: bytes counted from real payloads, corrupt ones refused, learning kept."""

from __future__ import annotations

import pytest
import torch

import hybrid
from hybrid import TrainConfig
from hybrid.core.worker import Worker


def test_bytes_and_ratio_come_from_the_encoded_payloads(tiny_config):
    plain = hybrid.train(tiny_config(out=tiny_config().out + "-none"))
    topk = hybrid.train(tiny_config(codec="topk", topk_ratio=0.01))
    numel = plain.params.numel()
    tasks = plain.summary["tasks"]
    assert plain.summary["bytes_up"] == tasks * numel * 4
    assert plain.summary["compression_ratio"] == pytest.approx(1.0)
    assert topk.summary["compression_ratio"] > 50
    assert topk.summary["bytes_down"] == plain.summary["bytes_down"] > 0
    rows = topk.metrics("train")
    assert 0 < rows[-1]["perf/bytes_up"] <= topk.summary["bytes_up"]


def test_a_slow_link_costs_virtual_time_and_compression_buys_it_back(tiny_config):
    slow = dict(bandwidth_mbps=1.0, stop_when_solved=False)
    plain = hybrid.train(tiny_config(out=tiny_config().out + "-a", **slow))
    packed = hybrid.train(tiny_config(out=tiny_config().out + "-b", codec="int8", **slow))
    assert packed.summary["virtual_time_s"] < 0.6 * plain.summary["virtual_time_s"]


def test_corrupt_payloads_are_rejected_counted_and_never_applied(tiny_config, monkeypatch):
    original = Worker.encode

    def flip_a_byte(self, vector):
        wire, nbytes = original(self, vector)
        if self.worker_id == 1:
            wire = bytearray(wire)
            wire[-1] ^= 0xFF
            wire = bytes(wire)
        return wire, nbytes

    monkeypatch.setattr(Worker, "encode", flip_a_byte)
    result = hybrid.train(tiny_config(scheduler="async", codec="fp16"))
    s = result.summary
    assert s["rejected_corrupt"] > 0
    assert s["updates"] == s["tasks"] - s["rejected_corrupt"]
    assert torch.isfinite(result.params).all()


def test_nonfinite_updates_are_rejected(tiny_config, monkeypatch):
    original = Worker.encode

    def poison(self, vector):
        if self.worker_id == 0:
            vector = vector.clone()
            vector[0] = float("nan")
        return original(self, vector)

    monkeypatch.setattr(Worker, "encode", poison)
    for scheduler in ("sync", "async", "bounded"):
        result = hybrid.train(tiny_config(scheduler=scheduler, out=tiny_config().out + scheduler))
        assert result.summary["rejected_nonfinite"] > 0
        assert torch.isfinite(result.params).all()
        assert result.summary["updates"] > 0  # sync rounds close without the bad update


@pytest.mark.slow
def test_async_with_topk_one_percent_and_error_feedback_solves_cartpole(tmp_path):
    cfg = TrainConfig(
        scheduler="async",
        codec="topk",
        topk_ratio=0.01,
        seed=0,
        total_env_steps=200_000,
        progress=False,
        out=str(tmp_path / "r"),
    )
    result = hybrid.train(cfg)
    assert result.summary["solved"] is True
    assert result.summary["final_eval_return"] >= 475
    assert result.summary["compression_ratio"] >= 50
