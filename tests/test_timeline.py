"""Spans of worker tasks: barriers visible as waits, a valid Chrome trace."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest

import hybrid
from hybrid.cli import main
from hybrid.timeline import Span, chrome_trace, read_spans, waiting_fraction


@pytest.fixture
def sync_run(tiny_config):
    cfg = tiny_config(scheduler="sync", workers=4, cluster="heterogeneous", speed_sigma=0.8)
    return hybrid.train(cfg)


def test_sync_workers_wait_at_every_barrier(sync_run):
    spans = read_spans(sync_run.run_dir)
    computes = [s for s in spans if s.kind == "compute"]
    rounds: dict[int, list] = defaultdict(list)
    for s in computes:
        rounds[s.base_version].append(s)
    versions = sorted(rounds)
    assert len(versions) >= 3 and all(len(rounds[v]) == 4 for v in versions)
    waits = [s for s in spans if s.kind == "wait"]
    for previous, current in itertools.pairwise(versions):
        barrier = rounds[current][0].start
        assert all(s.start == barrier for s in rounds[current])  # everyone starts together
        # every worker but the last to arrive waits for the barrier
        waiting = {s.worker for s in waits if s.end == barrier}
        assert len(waiting) >= 3, (previous, waiting)


def test_trace_export_is_valid_trace_event_json(sync_run, tmp_path):
    assert main(["timeline", str(sync_run.run_dir), "--out", str(tmp_path)]) == 0
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and {"compute", "upload", "wait"} <= {e["name"] for e in complete}
    for e in complete:
        assert {"name", "ph", "pid", "tid", "ts", "dur"} <= set(e)
        assert e["dur"] >= 0 and isinstance(e["ts"], float)
    assert chrome_trace([])["traceEvents"][0]["ph"] == "M"


def test_timeline_of_a_missing_run_is_a_clear_error(tmp_path, capsys):
    assert main(["timeline", str(tmp_path / "nope")]) == 2
    assert "spans.jsonl" in capsys.readouterr().err


def test_waiting_fraction_of_hand_made_spans():
    spans = [
        Span(0, "compute", 0.0, 1.0),
        Span(0, "upload", 1.0, 1.5),  # sending is not computing
        Span(0, "wait", 1.5, 2.0),
        Span(0, "compute", 2.0, 3.0),
        Span(1, "compute", 0.0, 3.0),  # never waits
    ]
    assert waiting_fraction(spans) == pytest.approx(1.0 / 6.0)
    assert waiting_fraction([]) == 0.0


def test_sync_workers_of_unequal_speeds_wait(sync_run):
    assert 0.0 < waiting_fraction(read_spans(sync_run.run_dir)) < 1.0
