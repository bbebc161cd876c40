"""A comparison's figures: learning curves, staleness, steps to solve, performance profiles.

Figures are built as ``matplotlib.figure.Figure`` objects (imported only when drawn), so no
global backend is set and notebooks keep theirs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.analysis.tasks import TaskAggregate, seeded_stream
from hybrid.stats import performance_profile, performance_profile_across_tasks

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from hybrid.analysis.results import Comparison, Curve, GroupStats

CARRIED_NOTE = "dashed: some runs stopped when solved, their last evaluation carried forward"
"""The learning-curve legend's note on dashed stretches."""


def _figure(width: float = 6.0, height: float = 4.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(fig: Figure, out: Path, stem: str) -> dict[str, Path]:
    """Write ``fig`` as ``stem``.png and .pdf into ``out``; returns the paths by file name."""
    png, pdf = out / f"{stem}.png", out / f"{stem}.pdf"
    fig.savefig(png, dpi=150)
    # No creation date: re-running on the same runs rewrites byte-identical PDFs.
    fig.savefig(pdf, metadata={"CreationDate": None})
    return {f"{stem}.png": png, f"{stem}.pdf": pdf}


def _no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _colors(labels: Sequence[str]) -> dict[str, str]:
    # Same colour for a group in every figure.
    return {label: f"C{i % 10}" for i, label in enumerate(labels)}


_AXIS_LABELS = {
    "env_steps": "environment steps",
    "updates": "updates",
    "virtual_s": "virtual time (s)",
    "wall_s": "wall-clock time (s)",
}


def _plot_curves(
    curves: Mapping[str, Curve], axis: str, colors: Mapping[str, str], confidence: float
) -> Figure:
    from matplotlib.lines import Line2D

    fig = _figure()
    ax = fig.add_subplot()
    if not curves:
        _no_data(ax, "no eval rows")
        return fig
    sources = {s for cv in curves.values() for s in cv.source.split("+")}
    any_carried = False
    for label, cv in curves.items():
        # Name each group's clock when the groups do not share one.
        note = f", {cv.source}" if len(sources) > 1 else ""
        carried = cv.carried > 0 if cv.carried.size == cv.x.size else np.zeros(cv.x.size, bool)
        # Solid while every run has its own evaluations; dashed from the last point before
        # the first carried one, so the two stretches join.
        own = ~carried
        start = int(np.argmax(carried)) if carried.any() else cv.x.size
        own[: max(start, 1)] = True
        ax.plot(cv.x[own], cv.iqm[own], color=colors[label], label=f"{label} (n={cv.n_runs}{note})")
        if carried.any():
            any_carried = True
            tail = slice(max(start - 1, 0), None)
            ax.plot(cv.x[tail], cv.iqm[tail], color=colors[label], linestyle="--")
        ax.fill_between(cv.x, cv.low, cv.high, color=colors[label], alpha=0.2, linewidth=0)
    if len(sources) == 1:
        xlabel = _AXIS_LABELS.get(next(iter(sources)), next(iter(sources)))
    else:
        xlabel = "time (s; virtual where recorded, else wall-clock)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"eval return (IQM, {confidence:.0%} CI)")
    handles, names = ax.get_legend_handles_labels()
    if any_carried:
        handles.append(Line2D([], [], color="grey", linestyle="--"))
        names.append(CARRIED_NOTE)
    ax.legend(handles, names, fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def _plot_staleness(groups: Mapping[str, GroupStats], colors: Mapping[str, str]) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.add_subplot()
    with_hist = [g for g in groups.values() if g.staleness_histogram]
    if not with_hist:
        _no_data(ax, "no staleness histograms")
        return fig
    width = 0.8 / len(with_hist)
    for i, g in enumerate(with_hist):
        h = np.asarray(g.staleness_histogram)
        x = np.arange(h.size) - 0.4 + width * (i + 0.5)
        ax.bar(x, h, width=width, color=colors[g.label], label=g.label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("staleness of applied update (policy versions behind)")
    ax.set_ylabel("fraction of updates")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, axis="y")
    return fig


def _plot_steps_to_solve(
    groups: Mapping[str, GroupStats], colors: Mapping[str, str], seed: int
) -> Figure:
    gs = list(groups.values())
    fig = _figure(6.0, max(2.5, 0.6 * len(gs) + 1.2))
    ax = fig.add_subplot()
    if not any(g.solve_steps for g in gs):
        _no_data(ax, "no run has a steps-to-solve count")
        return fig
    jitter = np.random.default_rng(seed)
    for i, g in enumerate(gs):
        at = np.asarray(g.solve_steps, dtype=float)
        ok = np.asarray(g.solved, dtype=bool) & np.isfinite(at)
        unsolved = ~np.asarray(g.solved, dtype=bool) & np.isfinite(at)
        y = i + jitter.uniform(-0.15, 0.15, at.size)
        ax.scatter(at[ok], y[ok], color=colors[g.label], s=14)
        ax.scatter(at[unsolved], y[unsolved], color=colors[g.label], s=24, marker="x")
        e = g.median_steps_to_solve
        if math.isfinite(e.value):
            high = e.high if math.isfinite(e.high) else float(np.nanmax(at))
            ax.errorbar(
                [e.value],
                [i + 0.3],
                xerr=[[e.value - e.low], [high - e.value]],
                fmt="D",
                color="black",
                markersize=4,
                capsize=3,
            )
    ax.set_yticks(range(len(gs)), [f"{g.label} ({g.n_solved}/{g.n_runs})" for g in gs])
    ax.invert_yaxis()
    ax.set_xlabel(
        "environment steps to solve (dots: solved runs; x: unsolved, at the steps they ran;\n"
        "diamond: Kaplan–Meier median with CI, absent when not reached)"
    )
    ax.grid(alpha=0.3, axis="x")
    return fig


def _plot_solved_fraction(
    groups: Mapping[str, GroupStats], colors: Mapping[str, str], confidence: float
) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    with_curve = [g for g in groups.values() if g.solve_curve is not None]
    if not with_curve:
        _no_data(ax, "no run has a steps-to-solve count")
        return fig
    for g in with_curve:
        cv = g.solve_curve
        assert cv is not None
        # Start at (0, 0): no run has solved before its first env step.
        x = np.concatenate([[0.0], cv.steps])
        ax.step(
            x,
            np.concatenate([[0.0], cv.fraction]),
            where="post",
            color=colors[g.label],
            label=f"{g.label} ({g.n_solved}/{g.n_runs})",
        )
        high = np.nan_to_num(np.concatenate([[0.0], cv.high]), nan=1.0)
        ax.fill_between(
            x,
            np.concatenate([[0.0], cv.low]),
            high,
            step="post",
            color=colors[g.label],
            alpha=0.15,
            linewidth=0,
        )
        censored = np.asarray(g.solve_steps)[~np.asarray(g.solved, dtype=bool)]
        censored = censored[np.isfinite(censored)]
        if censored.size:
            frac = np.interp(censored, cv.steps, cv.fraction)
            ax.scatter(censored, frac, marker="|", s=80, color=colors[g.label])
    ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("environment steps (|: an unsolved run stopped there, censored)")
    ax.set_ylabel(f"fraction of runs solved (Kaplan–Meier, {confidence:.0%} CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def profiles(
    groups: Mapping[str, GroupStats], reps: int, confidence: float, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Each group's performance profile on a grid spanning every score, with its band."""
    scored = {k: g.valid_scores for k, g in groups.items() if g.valid_scores.size}
    out: dict[str, dict[str, np.ndarray]] = {}
    if not scored:
        return out
    every = np.concatenate(list(scored.values()))
    # A little margin so each profile visibly starts at 1 and ends at 0.
    pad = 0.03 * (every.max() - every.min()) or 1.0
    taus = np.linspace(every.min() - pad, every.max() + pad, 201)
    for label, s in scored.items():
        frac, low, high = performance_profile(
            s,
            taus,
            ci=True,
            reps=reps,
            confidence=confidence,
            rng=seeded_stream(seed, "profile", label),
        )
        out[label] = {"tau": taus, "fraction": frac, "low": low, "high": high}
    return out


def task_profiles(
    across: Mapping[str, TaskAggregate], reps: int, confidence: float, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Each method's profile of normalized scores over tasks, on one grid, with its band."""
    if not across:
        return {}
    every = np.concatenate([np.asarray(v) for t in across.values() for v in t.normalized.values()])
    taus = np.linspace(min(0.0, every.min()), max(1.0, every.max()) + 0.02, 201)
    out = {}
    for label, t in across.items():
        frac, low, high = performance_profile_across_tasks(
            list(t.normalized.values()),
            taus,
            reps,
            confidence,
            seeded_stream(seed, "task profile", label),
        )
        out[label] = {"tau": taus, "fraction": frac, "low": low, "high": high}
    return out


def _plot_profile(
    profiles: Mapping[str, Mapping[str, np.ndarray]],
    xlabel: str,
    colors: Mapping[str, str],
    confidence: float,
    empty: str,
) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    if not profiles:
        _no_data(ax, empty)
        return fig
    for label, p in profiles.items():
        ax.step(p["tau"], p["fraction"], where="post", color=colors[label], label=label)
        ax.fill_between(
            p["tau"], p["low"], p["high"], step="post", color=colors[label], alpha=0.2, lw=0
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"fraction of runs with score > τ ({confidence:.0%} CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def draw_all(c: Comparison) -> dict[str, Figure]:
    """Every figure of the report, by name."""
    colors = _colors(list(c.groups))
    figs = {
        f"curves_{axis}": _plot_curves(cv, axis, colors, c.confidence)
        for axis, cv in c.curves.items()
    }
    figs["staleness"] = _plot_staleness(c.groups, colors)
    figs["steps_to_solve"] = _plot_steps_to_solve(c.groups, colors, c.seed)
    figs["solved_fraction"] = _plot_solved_fraction(c.groups, colors, c.confidence)
    figs["profile"] = _plot_profile(
        c.profiles, f"{c.metric} threshold τ", colors, c.confidence, f"no finite {c.metric}"
    )
    if c.across_tasks:
        figs["profile_across_tasks"] = _plot_profile(
            c.task_profiles,
            f"normalized {c.metric} threshold τ (0 = random, 1 = reference)",
            _colors(list(c.across_tasks)),
            c.confidence,
            "no across-tasks aggregate",
        )
    return figs
