"""Per-worker timelines of a run: a Gantt chart and a Chrome trace-event export.

Every task a worker ran is a line of ``spans.jsonl``: when it started computing,
when it began uploading, when its update arrived (on the virtual clock for the
serial runtime, else seconds since the run began), the version it started from
and its staleness. Waiting is what lies between a worker's update arriving and
its next task starting: barriers (sync), bounds (bounded) and idle stragglers
show up there. The trace opens in Perfetto or chrome://tracing.

A decentralized run (``gossip``, ``ad-psgd``, ``sgp``) also writes one line per mix of its
replicas into ``spans.jsonl`` (``{"mix": index, "time": t, "edges": [[sender, receiver,
weight], ...]}``, and AD-PSGD's drawn ``pairs``): who averaged with whom, and when. The Gantt
chart draws each exchange as a line between the two workers' rows at the mix time, and the
trace as a flow arrow from sender to receiver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Span:
    worker: int
    kind: str  # compute | upload | wait
    start: float
    end: float
    base_version: int | None = None
    staleness: int | None = None
    verdict: str | None = None


@dataclass(frozen=True)
class Mix:
    """One mix of a decentralized run's replicas: its index (1, 2, ...), its time (the run's
    clock, as the spans'), its edges (sender, receiver, weight) and, for AD-PSGD, the pairs
    (worker, neighbour) its scheduler drew."""

    index: int
    time: float
    edges: tuple[tuple[int, int, float], ...]
    pairs: tuple[tuple[int, int], ...] = ()


def _read_lines(run_dir: str | Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    with open(Path(run_dir) / "spans.jsonl") as f:
        for line in f:
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return lines


def read_mixes(run_dir: str | Path) -> list[Mix]:
    """The mixes of a decentralized run, in order (none for other schedulers)."""
    return [
        Mix(
            int(line["mix"]),
            float(line["time"]),
            tuple((int(s), int(r), float(w)) for s, r, w in line["edges"]),
            tuple((int(i), int(j)) for i, j in line.get("pairs", ())),
        )
        for line in _read_lines(run_dir)
        if "mix" in line
    ]


def read_spans(run_dir: str | Path) -> list[Span]:
    """Compute, upload and wait spans of every worker, ordered by worker then time."""
    tasks = [line for line in _read_lines(run_dir) if "mix" not in line]
    spans: list[Span] = []
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for task in tasks:
        by_worker.setdefault(int(task["worker"]), []).append(task)
    for worker, own in sorted(by_worker.items()):
        own.sort(key=lambda t: t["start"])
        previous_end: float | None = None
        for t in own:
            if previous_end is not None and t["start"] > previous_end:
                spans.append(Span(worker, "wait", previous_end, t["start"]))
            meta = {
                "base_version": t["base_version"],
                "staleness": t["staleness"],
                "verdict": t["verdict"],
            }
            spans.append(Span(worker, "compute", t["start"], t["upload_start"], **meta))
            if t["end"] > t["upload_start"]:
                spans.append(Span(worker, "upload", t["upload_start"], t["end"], **meta))
            previous_end = t["end"]
    return spans


def waiting_fraction(spans: list[Span]) -> float:
    """Of the time from each worker's first start to its last finished computation, the
    share it spent not computing: sending its result and waiting for its next task
    (barriers, bounds, a busy server). Summed over workers; 0 without spans."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    computing = 0.0
    for span in spans:
        if span.kind != "compute":
            continue
        first[span.worker] = min(first.get(span.worker, span.start), span.start)
        last[span.worker] = max(last.get(span.worker, span.end), span.end)
        computing += span.end - span.start
    horizon = sum(last[w] - first[w] for w in first)
    return max(0.0, 1.0 - computing / horizon) if horizon > 0 else 0.0


def chrome_trace(
    spans: list[Span], clock: str = "virtual", mixes: list[Mix] | None = None
) -> dict[str, Any]:
    """Spans as trace events ("X" complete events, microseconds), one thread per worker;
    each exchange of a mix as a flow arrow (an "s"/"f" pair) from the sender's thread to the
    receiver's, between two short "mix" slices it binds to."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"workers ({clock})"}}
    ]
    for worker in sorted({s.worker for s in spans}):
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 0,
                "tid": worker,
                "args": {"name": f"worker {worker}"},
            }
        )
    for s in spans:
        event: dict[str, Any] = {
            "name": s.kind,
            "cat": s.kind,
            "ph": "X",
            "pid": 0,
            "tid": s.worker,
            "ts": s.start * 1e6,
            "dur": max(0.0, s.end - s.start) * 1e6,
        }
        if s.kind != "wait":
            event["args"] = {
                "base_version": s.base_version,
                "staleness": s.staleness,
                "verdict": s.verdict,
            }
        events.append(event)
    flow = 0
    for mix in mixes or []:
        ts = mix.time * 1e6
        workers = sorted({w for s, r, _ in mix.edges for w in (s, r)})
        for worker in workers:
            events.append(
                {
                    "name": "mix",
                    "cat": "mix",
                    "ph": "X",
                    "pid": 0,
                    "tid": worker,
                    "ts": ts,
                    "dur": 1.0,
                    "args": {"mix": mix.index, "pairs": [list(p) for p in mix.pairs]},
                }
            )
        for sender, receiver, weight in mix.edges:
            flow += 1
            common = {"name": f"mix {mix.index}", "cat": "mix", "id": flow, "pid": 0}
            events.append({**common, "ph": "s", "tid": sender, "ts": ts, "args": {"w": weight}})
            events.append({**common, "ph": "f", "bp": "e", "tid": receiver, "ts": ts})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


COLORS = {"compute": "#4C72B0", "upload": "#DD8452", "wait": "#D0D0D0"}
EXCHANGE_COLOR = "#C44E52"


def draw_gantt(
    spans: list[Span],
    path: Path,
    title: str,
    max_time: float | None = None,
    mixes: list[Mix] | None = None,
) -> None:
    """The workers' rows of compute, upload and wait bars; ``mixes``: each exchange as a
    line between the two workers' rows at the mix time."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    workers = sorted({s.worker for s in spans})
    fig = Figure(figsize=(10, 0.35 * len(workers) + 1.6))
    ax = fig.add_subplot()
    for kind in ("wait", "compute", "upload"):
        for worker in workers:
            bars = [
                (s.start, s.end - s.start)
                for s in spans
                if s.worker == worker
                and s.kind == kind
                and (max_time is None or s.start <= max_time)
            ]
            if bars:
                ax.broken_barh(bars, (worker - 0.4, 0.8), facecolors=COLORS[kind], linewidth=0)
    exchanges = []
    for mix in mixes or []:
        if max_time is not None and mix.time > max_time:
            continue
        pairs = {(min(s, r), max(s, r)) for s, r, _ in mix.edges}  # both ways: one line
        exchanges += [[(mix.time, a), (mix.time, b)] for a, b in sorted(pairs)]
    if exchanges:
        ax.add_collection(LineCollection(exchanges, colors=EXCHANGE_COLOR, linewidths=0.8))
    ax.set_yticks(workers, [f"worker {w}" for w in workers])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    if max_time is not None:
        ax.set_xlim(0, max_time)
    ax.set_title(title)
    handles: list[Any] = [Patch(color=c, label=k) for k, c in COLORS.items()]
    if exchanges:
        handles.append(Line2D([], [], color=EXCHANGE_COLOR, label="exchange"))
    ax.legend(
        handles=handles,
        loc="upper right",
        fontsize="small",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def timeline(
    run_dir: str | Path, out: str | Path | None = None, window_s: float | None = None
) -> dict[str, Path]:
    """Write ``timeline.png`` and ``trace.json`` for a run (into ``out``, default the run)."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    spans = read_spans(run_dir)
    mixes = read_mixes(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    clock = "virtual clock" if config.get("runtime") == "serial" else "wall clock"
    png, trace = out / "timeline.png", out / "trace.json"
    title = f"{config.get('scheduler')} on {config.get('env')} ({clock})"
    draw_gantt(spans, png, title, max_time=window_s, mixes=mixes)
    trace.write_text(json.dumps(chrome_trace(spans, clock, mixes)))
    return {"png": png, "trace": trace}
