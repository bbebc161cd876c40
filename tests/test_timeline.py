"""Spans of worker tasks: barriers visible as waits, a valid Chrome trace."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import numpy as np
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


# --- the exchanges of a decentralized run ------------------------------------------------------


@pytest.fixture
def ad_psgd_run(tiny_config):
    cfg = tiny_config(
        scheduler="ad-psgd",
        scheduler_args={"topology": "ring"},
        workers=4,
        cluster="heterogeneous",
        stop_when_solved=False,
    )
    return hybrid.train(cfg)


def test_ad_psgd_records_the_pairs_its_scheduler_drew(ad_psgd_run):
    """Replaying the scheduler's seeded draws in the order the updates were applied gives
    the recorded pairs: the timeline is who really averaged with whom."""
    from hybrid.schedulers import AdPsgd, AdPsgdSettings
    from hybrid.seeding import SCHEDULER, stream
    from hybrid.timeline import read_mixes

    run_dir = ad_psgd_run.run_dir
    lines = [json.loads(line) for line in (run_dir / "spans.jsonl").read_text().splitlines()]
    mixes = read_mixes(run_dir)
    assert len(mixes) == ad_psgd_run.summary["mixes"] > 0
    assert [m.index for m in mixes] == list(range(1, len(mixes) + 1))
    applied = [line["worker"] for line in lines if line.get("verdict") == "buffer"]
    drawn = [pair for mix in mixes for pair in mix.pairs]
    assert [i for i, _ in drawn] == applied  # one pair per applied update, in order
    replay = AdPsgd(4, AdPsgdSettings(topology="ring"))
    rng = np.random.default_rng(stream(ad_psgd_run.config.seed, SCHEDULER))
    expected = [(i, replay.neighbours[i][rng.integers(2)]) for i in applied]
    assert drawn == expected
    for mix, (i, j) in zip(mixes, drawn, strict=True):  # the pair's average, both ways
        assert sorted(mix.edges) == sorted([(i, j, 0.5), (j, i, 0.5)])
    times = [m.time for m in mixes]
    assert times == sorted(times) and times[0] > 0  # on the virtual clock, as the tasks


def test_gossip_records_every_edge_of_its_graph_with_its_weight(tiny_config):
    from hybrid.timeline import read_mixes

    result = hybrid.train(tiny_config(scheduler="gossip", workers=4, stop_when_solved=False))
    mixes = read_mixes(result.run_dir)
    assert len(mixes) == result.summary["mixes"] > 0
    ring = sorted((k, (k + d) % 4, pytest.approx(1 / 3)) for k in range(4) for d in (1, 3))
    assert all(sorted(m.edges) == ring for m in mixes)  # Metropolis–Hastings on a ring
    assert all(s.kind in ("compute", "upload", "wait") for s in read_spans(result.run_dir))


def test_the_timeline_draws_the_exchanges(ad_psgd_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    assert main(["timeline", str(ad_psgd_run.run_dir), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    starts = [e for e in events if e["ph"] == "s"]
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == 2 * ad_psgd_run.summary["mixes"]  # a pair: both ways
    for start in starts:
        end = ends[start["id"]]
        assert end["ts"] == start["ts"] and end["tid"] != start["tid"]
    mix_slices = [e for e in events if e["ph"] == "X" and e["name"] == "mix"]
    assert len(mix_slices) == 2 * ad_psgd_run.summary["mixes"]  # flows bind to them
