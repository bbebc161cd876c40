"""What a sweep reports when it ends: OUT/sweep_summary.json and each run's one-line result."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybrid.sweep.planning import PlannedRun
from hybrid.sweep.spec import Sweep
from hybrid.sweep.state import Outcome, _read_json, is_pruned, objective, write_json

SUMMARY_FILE = "sweep_summary.json"


def _write_summary(
    out: Path, sweep: Sweep, seed: int, outcomes: Sequence[Outcome], skipped: Sequence[PlannedRun]
) -> None:
    """OUT/sweep_summary.json: every run of this invocation and its status (done, pruned,
    failed, skipped: finished before), its parameter values and, with a metric, its value."""
    rows = [(o.run, o.status, o.message) for o in outcomes]
    rows += [(r, "pruned" if is_pruned(r.run_dir) else "skipped", "") for r in skipped]
    entries = []
    for run, status, message in rows:
        entry: dict[str, Any] = {"name": run.name, "status": status, "values": run.values}
        if sweep.metric is not None and status != "failed":
            entry["value"] = objective(run.run_dir, sweep.metric)
        if status == "pruned":
            entry["pruned"] = _read_json(run.run_dir / "pruned.json")
        if message and status == "failed":
            entry["error"] = message
        entries.append(entry)
    summary: dict[str, Any] = {"sweep": str(sweep.path), "method": sweep.method, "seed": seed}
    if sweep.metric is not None:
        summary["metric"] = {"name": sweep.metric.name, "goal": sweep.metric.goal}
        scored = [e for e in entries if e["status"] != "pruned" and e.get("value") is not None]
        if scored:
            pick = max if sweep.metric.goal == "maximize" else min
            summary["best"] = pick(scored, key=lambda e: e["value"])["name"]
    summary["runs"] = entries
    write_json(out / SUMMARY_FILE, summary)


def _result(run_dir: Path) -> str:
    try:
        s = json.loads((run_dir / "summary.json").read_text())
        text = f"final eval return {float(s['final_eval_return']):.1f}"
        if s.get("solved"):
            text += f", solved at {int(s['env_steps_to_solve']):,} env steps"
        return text
    except (OSError, ValueError, KeyError, TypeError):
        return "summary.json written"
