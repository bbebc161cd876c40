"""Resumes that meet what a crash really leaves: logs cut short by a power loss, a run
killed before its first checkpoint, and the actor-learner's metric rows."""

from __future__ import annotations

import json

import pytest
from conftest import crash_copy, metric_rows

import hybrid
from hybrid.checkpoint import list_checkpoints, load


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_log_shorter_than_the_checkpoint_says_is_not_padded_and_rows_lost_are_counted(
    tiny_config, tmp_path
):
    cfg = tiny_config(
        total_env_steps=1_500, checkpoint_every=7, keep_checkpoints=100, stop_when_solved=False
    )
    full = hybrid.train(cfg)
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    logs = load(list_checkpoints(crashed)[-1])["logs"]
    metrics, spans = crashed / "metrics.jsonl", crashed / "spans.jsonl"
    # a power loss: the page cache never wrote the last rows (cut mid-row as well)
    metrics.write_bytes(metrics.read_bytes()[: logs["metrics.jsonl"] // 2 + 3])
    spans.write_bytes(spans.read_bytes()[: logs["spans.jsonl"] // 3 + 5])
    kept_metrics = len(metrics.read_bytes().split(b"\n")) - 1
    with pytest.warns(RuntimeWarning, match=r"metrics\.jsonl .* rows lost") as caught:
        resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    lost = logs["rows"]["metrics.jsonl"] - kept_metrics
    assert any(f"{lost} rows lost" in str(w.message) for w in caught)
    assert any("spans.jsonl" in str(w.message) for w in caught)
    for path in (metrics, spans):
        assert b"\x00" not in path.read_bytes()
        _rows(path)  # every line is a whole JSON row
    whole = metric_rows(full.run_dir)
    now = metric_rows(crashed)
    # the rows that survived, then the rows written after the checkpoint: none twice
    assert now == whole[:kept_metrics] + whole[logs["rows"]["metrics.jsonl"] :]
