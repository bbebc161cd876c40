"""A comparison as tables: Markdown, booktabs LaTeX, a DataFrame, HTML and ``results.json``.

Steps to solve are shown as the Kaplan–Meier median over every run (unsolved runs censored
at the steps they ran; "not reached" when fewer than half solved), the solved-only IQM
only in a column labeled as such with k/n beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.stats import Estimate

if TYPE_CHECKING:
    import pandas as pd

    from hybrid.analysis.results import Comparison, GroupStats

NOT_REACHED = "not reached"
"""How tables and ``results.json`` write a median (or CI bound) of steps to solve that the
Kaplan–Meier curve never reaches: fewer than half the runs solved."""


def number(x: float) -> str:
    """A score: three significant digits, or one decimal, or thousands separators."""
    if x is None or not math.isfinite(x):
        return ""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def count(x: float) -> str:
    """Steps and rates: whole numbers with thousands separators."""
    return f"{x:,.0f}" if x is not None and math.isfinite(x) else ""


def steps_cell(x: float) -> str:
    """Steps to solve: a count, or "not reached" for an infinite median or bound."""
    return NOT_REACHED if x == math.inf else count(x)


def with_ci(e: Estimate, fmt: Callable[[float], str] = number) -> str:
    if math.isnan(e.value):
        return ""
    return f"{fmt(e.value)} [{fmt(e.low)}, {fmt(e.high)}]"


def probability(x: float) -> str:
    return f"{x:.2f}"


def _solved_only(g: GroupStats) -> str:
    value = count(g.steps_to_solve_iqm.value) or "–"
    return f"{value} ({g.n_solved}/{g.n_runs})"


def _rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    pct = f"{c.confidence:.0%}"
    header = [
        "group",
        "runs",
        f"IQM [{pct} CI]",
        f"mean [{pct} CI]",
        "solved",
        f"median steps to solve, every run [{pct} CI]",
        "IQM steps over solved runs, k/n",
        "env steps/s",
    ]
    body = [
        [
            g.label,
            str(g.n_runs),
            with_ci(g.iqm),
            with_ci(g.mean),
            f"{g.n_solved}/{g.n_runs}",
            with_ci(g.median_steps_to_solve, steps_cell),
            _solved_only(g),
            count(g.env_steps_per_s),
        ]
        for g in c.groups.values()
    ]
    return header, body


def _task_rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    pct = f"{c.confidence:.0%}"
    header = [
        "method",
        "runs per env",
        f"IQM [{pct} CI]",
        f"mean [{pct} CI]",
        f"median [{pct} CI]",
        f"optimality gap [{pct} CI]",
    ]
    body = [
        [
            t.label,
            ", ".join(f"{n}" for n in t.n_runs.values()),
            with_ci(t.iqm),
            with_ci(t.mean),
            with_ci(t.median),
            with_ci(t.optimality_gap),
        ]
        for t in c.across_tasks.values()
    ]
    return header, body


def _task_caption(c: Comparison) -> str:
    first = next(iter(c.across_tasks.values()))
    refs = "; ".join(
        f"{env}: random {number(r.random)}, reference {number(r.reference)}"
        for env, r in first.references.items()
    )
    return (
        f"Across tasks: `{c.metric}` normalized per env, 0 = random and 1 = reference ({refs}); "
        "bootstrap over runs within each env:"
    )


def _md_row(cells: Sequence[str], empty: str = "–") -> str:
    return "| " + " | ".join((s or empty).replace("|", "\\|") for s in cells) + " |"


def _md_table(header: list[str], body: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return [_md_row(header), "| " + " | ".join(align) + " |", *map(_md_row, body)]


def markdown(c: Comparison) -> str:
    """The per-group table, the across-tasks table, then P(row > column)."""
    lines = _md_table(*_rows(c))
    lines += [
        "",
        "Median steps to solve: Kaplan–Meier over every run, an unsolved run censored at the "
        f"steps it ran; {NOT_REACHED} when fewer than half solved.",
    ]
    if c.across_tasks:
        lines += ["", _task_caption(c), "", *_md_table(*_task_rows(c))]
    labels = list(c.groups)
    if len(labels) >= 2 and c.improvement:
        lines += [
            "",
            f"P(row > column) on `{c.metric}` [{c.confidence:.0%} CI]:",
            "",
            _md_row(["", *labels], empty=" "),
            "| " + " | ".join(["---"] + [":---:"] * len(labels)) + " |",
        ]
        for a in labels:
            cells = [a]
            for b in labels:
                e = c.improvement.get((a, b))
                cells.append(with_ci(e, probability) if e is not None and a != b else "")
            lines.append(_md_row(cells))
    return "\n".join(lines) + "\n"


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _tex(s: str) -> str:
    # One pass per character, so the backslashes this inserts are never escaped again.
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in s)


def _tex_tabular(header: list[str], body: list[list[str]]) -> list[str]:
    def row(cells: Sequence[str]) -> str:
        out = [_tex(s) if s else "--" for s in cells]
        # "\\" followed by "[" would read the cell as an optional argument of "\\".
        if out[0].startswith("["):
            out[0] = "{" + out[0] + "}"
        return " & ".join(out) + r" \\"

    spec = "l" + "r" * (len(header) - 1)
    return [
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        row(header),
        r"\midrule",
        *map(row, body),
        r"\bottomrule",
        r"\end{tabular}",
    ]


def latex(c: Comparison) -> str:
    """The per-group table as a booktabs ``tabular``; the across-tasks one follows it."""
    lines = [
        f"% hybrid.analysis.compare, metric {c.metric}; needs \\usepackage{{booktabs}}",
        "% median steps to solve: Kaplan-Meier over every run, unsolved runs censored",
        *_tex_tabular(*_rows(c)),
    ]
    if c.across_tasks:
        lines += ["", "% across tasks: scores normalized per env (0 random, 1 reference)"]
        lines += _tex_tabular(*_task_rows(c))
    return "\n".join([*lines, ""])


def frame(c: Comparison) -> pd.DataFrame:
    """The per-group table as a DataFrame of numbers (see ``Comparison.table``)."""
    import pandas as pd

    rows = []
    for g in c.groups.values():
        row: dict[str, Any] = {"group": g.label, **g.key, "runs": g.n_runs}
        row["runs_with_metric"] = int(g.valid_scores.size)
        for name in ("iqm", "mean", "median"):
            e = getattr(g, name)
            row |= {name: e.value, f"{name}_low": e.low, f"{name}_high": e.high}
        row["solved"] = g.n_solved
        e = g.median_steps_to_solve
        col = "median_steps_to_solve"
        row |= {col: e.value, f"{col}_low": e.low, f"{col}_high": e.high}
        for name in ("iqm", "median"):
            e = getattr(g, f"steps_to_solve_{name}")
            col = f"steps_to_solve_{name}_solved_only"
            row |= {col: e.value, f"{col}_low": e.low, f"{col}_high": e.high}
        row["env_steps_per_s"] = g.env_steps_per_s
        row["staleness_mean"] = g.staleness_mean
        row["staleness_max"] = g.staleness_max
        rows.append(row)
    return pd.DataFrame(rows).set_index("group") if rows else pd.DataFrame()


def task_frame(c: Comparison) -> pd.DataFrame:
    """The across-tasks table as a DataFrame of numbers (see ``Comparison.task_table``)."""
    import pandas as pd

    rows = []
    for t in c.across_tasks.values():
        row: dict[str, Any] = {"method": t.label, **t.key}
        for name in ("iqm", "mean", "median", "optimality_gap"):
            e = getattr(t, name)
            row |= {name: e.value, f"{name}_low": e.low, f"{name}_high": e.high}
        rows.append(row)
    return pd.DataFrame(rows).set_index("method") if rows else pd.DataFrame()


def html(c: Comparison) -> str:
    """The notebook view: the table, the across-tasks table, then P(row > column)."""
    import html as escape

    pct = f"{c.confidence:.0%}"
    head = (
        f"<p><b>{escape.escape(c.metric)}</b> by {escape.escape(', '.join(c.group_by))}: "
        f"IQM and mean over runs with stratified-bootstrap {pct} CIs "
        f"({c.reps} resamples); median steps to solve over every run (Kaplan–Meier, unsolved "
        f"runs censored; inf: {NOT_REACHED})</p>"
    )
    parts = [head, c.table.to_html(float_format=number, na_rep="–")]
    if c.across_tasks:
        parts.append("<p>Across tasks, normalized scores (0 = random, 1 = reference)</p>")
        parts.append(c.task_table.to_html(float_format=number, na_rep="–"))
    if len(c.groups) >= 2 and c.improvement:
        parts.append(f"<p>P(row &gt; column) on <code>{escape.escape(c.metric)}</code></p>")
        parts.append(c.improvement_table.to_html(float_format=probability, na_rep=""))
    if c.skipped:
        parts.append(f"<p>{len(c.skipped)} run(s) skipped (see the warnings)</p>")
    return "\n".join(parts)


def jsonable(x: Any) -> Any:
    """Convert to plain JSON; NaN and inf become null (strict JSON has no NaN)."""
    if isinstance(x, Estimate):
        return jsonable({"value": x.value, "ci": [x.low, x.high]})
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _steps_json(x: float) -> float | str | None:
    return NOT_REACHED if x == math.inf else jsonable(x)


def _km_json(g: GroupStats) -> dict[str, Any]:
    e = g.median_steps_to_solve
    out: dict[str, Any] = {
        "median": {"value": _steps_json(e.value), "ci": [_steps_json(e.low), _steps_json(e.high)]}
    }
    if g.solve_curve is not None:
        cv = g.solve_curve
        out |= jsonable(
            {"steps": cv.steps, "fraction": cv.fraction, "low": cv.low, "high": cv.high}
        )
    return out


def _solve_steps(g: GroupStats) -> list[int | None]:
    it = iter(g.steps_to_solve)
    return [next(it) if ok else None for ok in g.solved]


def results(c: Comparison) -> dict[str, Any]:
    """Everything computed, as strict JSON: what ``results.json`` holds."""
    groups = {}
    for g in c.groups.values():
        groups[g.label] = {
            "key": g.key,
            "runs": [
                {"path": p, c.metric: s, "solved": ok, "env_steps_to_solve": n, "steps": at}
                for p, s, ok, n, at in zip(
                    g.run_paths, g.scores, g.solved, _solve_steps(g), g.solve_steps, strict=True
                )
            ],
            "n_runs": g.n_runs,
            "n_metric": int(g.valid_scores.size),
            "iqm": g.iqm,
            "mean": g.mean,
            "median": g.median,
            "n_solved": g.n_solved,
            "median_steps_to_solve": _km_json(g)["median"],
            "solve_curve": _km_json(g),
            "solved_only": {
                "steps_to_solve": g.steps_to_solve,
                "steps_to_solve_iqm": g.steps_to_solve_iqm,
                "steps_to_solve_median": g.steps_to_solve_median,
            },
            "env_steps_per_s": g.env_steps_per_s,
            "staleness_mean": g.staleness_mean,
            "staleness_max": g.staleness_max,
            "staleness_histogram": g.staleness_histogram,
        }
    across = {
        t.label: {
            "key": t.key,
            "tasks": t.tasks,
            "references": {e: r._asdict() for e, r in t.references.items()},
            "normalized": t.normalized,
            "iqm": t.iqm,
            "mean": t.mean,
            "median": t.median,
            "optimality_gap": t.optimality_gap,
        }
        for t in c.across_tasks.values()
    }
    return jsonable(
        {
            "metric": c.metric,
            "group_by": list(c.group_by),
            "confidence": c.confidence,
            "bootstrap_reps": c.reps,
            "seed": c.seed,
            "steps_to_solve": "Kaplan-Meier over every run: an unsolved run is censored at the "
            f"env steps it ran (runs[].steps); '{NOT_REACHED}' when fewer than half solved",
            "groups": groups,
            "across_tasks": across,
            "probability_of_improvement": [
                {"x": a, "y": b, "p": e} for (a, b), e in c.improvement.items()
            ],
            "curves": {
                axis: {
                    label: {
                        "x_source": cv.source,
                        "n_runs": cv.n_runs,
                        "x": cv.x,
                        "iqm": cv.iqm,
                        "low": cv.low,
                        "high": cv.high,
                        "carried": cv.carried,
                    }
                    for label, cv in curves.items()
                }
                for axis, curves in c.curves.items()
            },
            "performance_profile": c.profiles,
            "performance_profile_across_tasks": c.task_profiles,
            "skipped": c.skipped,
            "files": c.paths,
        }
    )
