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


@pytest.mark.parametrize(
    "changes",
    [{"algo": "a2c"}, {"algo": "nstep_q", "learning_starts": 20, "checkpoint_replay": True}],
    ids=["vtrace", "apex"],
)
def test_the_actor_learners_metric_rows_after_a_resume_are_the_uninterrupted_runs(
    tiny_config, tmp_path, changes
):
    """Its loss and policy-lag columns average the learner steps since the last row: a
    checkpoint between two rows carries that window, so the resumed row is the same."""
    cfg = tiny_config(
        scheduler="hybrid",
        learner_batch=2,
        total_env_steps=1_500,
        checkpoint_every=3,
        keep_checkpoints=100,
        log_every=100,
        stop_when_solved=False,
        **changes,
    )
    full = hybrid.train(cfg)
    assert len(list_checkpoints(full.run_dir)) >= 4
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    rows, expected = metric_rows(crashed), metric_rows(full.run_dir)
    assert any(k.startswith("losses/") for row in expected for k in row)
    assert rows == expected


def test_a_run_killed_before_its_first_checkpoint_resumes_by_starting_over(tiny_config, tmp_path):
    cfg = tiny_config(total_env_steps=900, checkpoint_every=1_000_000, stop_when_solved=False)
    full = hybrid.train(cfg)  # its one checkpoint is the final one
    # a copy as a kill before the first checkpoint leaves it: config, some rows, a lock
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.json").write_text((full.run_dir / "config.json").read_text())
    rows = (full.run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (killed / "metrics.jsonl").write_text("".join(rows[:2]) + '{"kind": "tra')
    (killed / "spans.jsonl").write_text('{"worker": 0, "st')
    (killed / "run.lock").write_text("")
    with pytest.warns(
        RuntimeWarning, match="stopped before its first checkpoint; starting it over"
    ):
        restarted = hybrid.train(resume=str(killed))
    assert restarted.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(killed) == metric_rows(full.run_dir)
    assert (killed / "spans.jsonl").read_text() == (full.run_dir / "spans.jsonl").read_text()
    # config.json as the run wrote it: a restart does not record itself as a resume
    assert json.loads((killed / "config.json").read_text()) == json.loads(
        (full.run_dir / "config.json").read_text()
    )


def test_a_restart_takes_a_new_budget_and_records_it(tiny_config, tmp_path):
    cfg = tiny_config(total_env_steps=600, checkpoint_every=1_000_000, stop_when_solved=False)
    full = hybrid.train(cfg)
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.json").write_text((full.run_dir / "config.json").read_text())
    with pytest.warns(RuntimeWarning, match="starting it over"):
        restarted = hybrid.train(resume=str(killed), total_env_steps=300)
    assert 300 <= restarted.summary["env_steps"] < 600
    assert json.loads((killed / "config.json").read_text())["total_env_steps"] == 300
