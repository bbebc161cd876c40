"""Per-group aggregates of runs: scores, steps to solve counting every run, learning curves."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hybrid.analysis.loading import Run, to_float, warn
from hybrid.analysis.results import NO_ESTIMATE, Curve, GroupStats
from hybrid.analysis.tasks import seeded_stream
from hybrid.stats import Estimate, aggregate, curve_ci, solve_curve
from hybrid.stats import iqm as _iqm

_NAN = float("nan")


def _est(d: Mapping[str, Any], name: str) -> Estimate:
    lo, hi = d[f"{name}_ci"]
    return Estimate(float(d[name]), float(lo), float(hi))


def sort_key(v: Any) -> tuple[int, Any]:
    """Group order: numbers numerically, then strings, then anything else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    return (2, str(v))


def group_label(key: Mapping[str, Any], short: Mapping[str, str]) -> str:
    """A group's name: string values bare, others ``name=value`` with ``short`` names."""
    parts = []
    for name, v in key.items():
        if isinstance(v, str):
            parts.append(v)
        else:
            parts.append(f"{short.get(name, name)}={'none' if v is None else v}")
    return "/".join(parts)


def _histogram(runs: Sequence[Run]) -> list[float]:
    """Seed-averaged distribution of update staleness (each run normalised first)."""
    hists = []
    for r in runs:
        counts = (r.summary or {}).get("staleness_histogram")
        h = np.array([to_float(c) for c in counts] if isinstance(counts, list) else [])
        if not np.isfinite(h).all() or (h < 0).any():
            warn(f"{r.path}: staleness_histogram in summary.json is not finite counts; left out")
            continue
        if h.size and h.sum() > 0:
            hists.append(h / h.sum())
    if not hists:
        return []
    width = max(h.size for h in hists)
    padded = np.stack([np.pad(h, (0, width - h.size)) for h in hists])
    return padded.mean(axis=0).tolist()


def _nanmean(values: Iterable[Any]) -> float:
    a = np.array([to_float(v) for v in values], dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else _NAN


def _solve_point(run: Run, summary: Mapping[str, Any]) -> tuple[bool, float]:
    """(solved, steps): the steps to solve, or the steps the run ran unsolved (censored there).

    NaN steps when the summary gives no usable count; the run is then left off the curve.
    """
    raw = summary.get("env_steps_to_solve")
    solved = bool(summary.get("solved", raw is not None)) and raw is not None
    steps = to_float(raw) if solved else to_float(summary.get("env_steps"))
    if not math.isfinite(steps) or steps < 0:
        what = "env_steps_to_solve" if solved else "env_steps"
        warn(
            f"{run.path}: {what} in summary.json is missing or not a finite count of env "
            "steps; left out of steps to solve"
        )
        return solved, _NAN
    return solved, steps


def group_stats(
    label: str,
    key: dict[str, Any],
    runs: Sequence[Run],
    metric: str,
    reps: int,
    confidence: float,
    seed: int,
) -> GroupStats:
    """Aggregate one group's runs: the metric with bootstrap CIs, steps to solve (Kaplan–Meier
    over every run, and the IQM over solved runs as an extra), throughput and staleness."""
    summaries = [r.summary or {} for r in runs]
    scores = []
    for r, s in zip(runs, summaries, strict=True):
        v = to_float(s.get(metric))
        if not math.isfinite(v):
            warn(f"{r.path}: {metric!r} missing or not finite in summary.json; left out")
        scores.append(v)
    valid = np.asarray(scores, dtype=float)
    valid = valid[np.isfinite(valid)]
    iqm_e = mean_e = median_e = NO_ESTIMATE
    if valid.size:
        agg = aggregate(valid, reps, confidence, seeded_stream(seed, "metric", label))
        iqm_e, mean_e, median_e = _est(agg, "iqm"), _est(agg, "mean"), _est(agg, "median")
    else:
        warn(f"group {label!r}: no run has a finite {metric!r}")

    points = [_solve_point(r, s) for r, s in zip(runs, summaries, strict=True)]
    solved = [ok and math.isfinite(at) for ok, at in points]
    steps = [int(at) for ok, at in points if ok and math.isfinite(at)]
    at_steps = np.array([at for _, at in points], dtype=float)
    usable = np.isfinite(at_steps)
    curve = (
        solve_curve(at_steps[usable], np.asarray(solved)[usable], confidence)
        if usable.any()
        else None
    )
    steps_iqm = steps_median = NO_ESTIMATE
    if steps:
        # Over solved runs only: an extra beside the Kaplan–Meier median, labeled k/n.
        agg = aggregate(
            np.asarray(steps, float), reps, confidence, seeded_stream(seed, "solve", label)
        )
        steps_iqm, steps_median = _est(agg, "iqm"), _est(agg, "median")

    maxes = [to_float(s.get("staleness_max")) for s in summaries]
    maxes = [m for m in maxes if math.isfinite(m)]
    return GroupStats(
        label=label,
        key=key,
        run_paths=[r.path for r in runs],
        scores=scores,
        iqm=iqm_e,
        mean=mean_e,
        median=median_e,
        solved=solved,
        steps_to_solve=steps,
        steps_to_solve_iqm=steps_iqm,
        steps_to_solve_median=steps_median,
        env_steps_per_s=_nanmean(s.get("env_steps_per_s") for s in summaries),
        staleness_mean=_nanmean(s.get("staleness_mean") for s in summaries),
        staleness_max=int(max(maxes)) if maxes else None,
        staleness_histogram=_histogram(runs),
        solve_steps=at_steps.tolist(),
        solve_curve=curve,
        median_steps_to_solve=NO_ESTIMATE if curve is None else curve.median,
    )


def _eval_xy(run: Run, axis: str) -> tuple[np.ndarray, np.ndarray, str] | None:
    """Sorted (x, eval return) of a run along ``axis``, or None without usable eval rows."""
    y = run.column("eval", "eval/return_mean")
    if axis == "time":
        # Virtual time is the simulated clock of the serial runtime; prefer it when every
        # eval row has it, since wall time there measures the simulator, not the system.
        v = run.column("eval", "virtual_s")
        source = "virtual_s" if v.size and np.isfinite(v).all() else "wall_s"
    else:
        source = axis
    x = run.column("eval", source)
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        return None
    order = np.argsort(x[ok], kind="stable")
    return x[ok][order], y[ok][order], source


def _stopped_solved(run: Run) -> bool:
    summary = run.summary or {}
    return bool(summary.get("solved")) and bool(run.config.get("stop_when_solved", True))


def curves(
    groups: Mapping[str, Sequence[Run]],
    axis: str,
    points: int,
    reps: int,
    confidence: float,
    seed: int,
) -> dict[str, Curve]:
    """IQM learning curve per group along ``axis`` on a shared grid, with bootstrap bands.

    A run stopped because it solved keeps its final policy, so its last evaluation is carried
    forward to the end of the axis; each curve counts, per point, how many of its runs are
    carried there (``Curve.carried``), and the figure draws those stretches dashed.
    """
    per_group: dict[str, list[tuple[np.ndarray, np.ndarray, str, bool]]] = {}
    missing = []
    for label, runs in groups.items():
        for r in runs:
            xy = _eval_xy(r, axis)
            if xy is None:
                missing.append(str(r.path))
            else:
                per_group.setdefault(label, []).append((*xy, _stopped_solved(r)))
    if missing:
        warn(f"no usable eval rows for the {axis!r} curves in: {', '.join(missing)}")
    if not per_group:
        return {}
    lo_all = min(xy[0][0] for xys in per_group.values() for xy in xys)
    hi_all = max(xy[0][-1] for xys in per_group.values() for xy in xys)
    grid = np.linspace(lo_all, hi_all, points)
    out = {}
    for label, xys in per_group.items():
        # Where each run's own evaluations end; a stopped solved run is carried past it.
        last = np.array([x[-1] for x, _, _, _ in xys])
        extended = [
            (np.append(x, hi_all), np.append(y, y[-1])) if stop and x[-1] < hi_all else (x, y)
            for x, y, _, stop in xys
        ]
        # Only where every run of the group has data (its own or carried): extrapolating a
        # run past its last eval would invent performance for it (e.g. on the time axis of
        # a faster run).
        lo = max(x[0] for x, _ in extended)
        hi = min(x[-1] for x, _ in extended)
        # The shared grid inside that range, plus its ends so the curve reaches the final eval.
        gx = np.union1d(grid[(grid >= lo) & (grid <= hi)], [lo, hi])
        mat = np.stack([np.interp(gx, x, y) for x, y in extended])
        value, low, high = curve_ci(
            mat, _iqm, reps, confidence, seeded_stream(seed, "curve", axis, label)
        )
        carried = (gx[:, None] > last[None, :]).sum(axis=1)
        sources = sorted({s for _, _, s, _ in xys})
        out[label] = Curve(gx, value, low, high, len(xys), "+".join(sources), carried)
    return out
