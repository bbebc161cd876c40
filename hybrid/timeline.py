"""Per-worker timelines of a run: a Gantt chart and a Chrome trace-event export.

Every task a worker ran is a line of ``spans.jsonl``: when it started computing,
when it began uploading, when its update arrived (on the virtual clock for the
serial runtime, else seconds since the run began), the version it started from
and its staleness. Waiting is what lies between a worker's update arriving and
its next task starting: barriers (sync), bounds (bounded) and idle stragglers
show up there. The trace opens in Perfetto or chrome://tracing.
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


def read_spans(run_dir: str | Path) -> list[Span]:
    """Compute, upload and wait spans of every worker, ordered by worker then time."""
    tasks: list[dict[str, Any]] = []
    with open(Path(run_dir) / "spans.jsonl") as f:
        for line in f:
            try:
                tasks.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
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


def chrome_trace(spans: list[Span], clock: str = "virtual") -> dict[str, Any]:
    """Spans as trace events ("X" complete events, microseconds), one thread per worker."""
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
    return {"traceEvents": events, "displayTimeUnit": "ms"}


COLORS = {"compute": "#4C72B0", "upload": "#DD8452", "wait": "#D0D0D0"}


def draw_gantt(spans: list[Span], path: Path, title: str, max_time: float | None = None) -> None:
    from matplotlib.figure import Figure
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
    ax.set_yticks(workers, [f"worker {w}" for w in workers])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    if max_time is not None:
        ax.set_xlim(0, max_time)
    ax.set_title(title)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
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
    config = json.loads((run_dir / "config.json").read_text())
    clock = "virtual clock" if config.get("runtime") == "serial" else "wall clock"
    png, trace = out / "timeline.png", out / "trace.json"
    draw_gantt(
        spans, png, f"{config.get('scheduler')} on {config.get('env')} ({clock})", max_time=window_s
    )
    trace.write_text(json.dumps(chrome_trace(spans, clock)))
    return {"png": png, "trace": trace}
