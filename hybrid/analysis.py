"""Compare groups of training runs: robust aggregates, learning curves, tables and figures.

A run directory, as written by the trainer, holds ``config.json`` (flat config), ``metrics.jsonl``
(append-only rows tagged by ``kind``) and, once the run finished, ``summary.json``.
[`compare`][hybrid.analysis.compare] groups finished runs by config fields and returns a
[`Comparison`][hybrid.analysis.Comparison]: the table as a pandas DataFrame, the IQM/CIs, the
figures (drawn on first use) and [`Comparison.save`][hybrid.analysis.Comparison.save], which writes
figures (PNG + PDF), a Markdown table, a booktabs LaTeX table and ``results.json`` (what ``hybrid
compare`` writes). [`load_runs`][hybrid.analysis.load_runs] and [`frame`][hybrid.analysis.frame]
read run directories into DataFrames, one row per logged row with the config fields as columns (see
[`FRAME_KINDS`][hybrid.analysis.FRAME_KINDS]).

Aggregates follow Agarwal et al. (NeurIPS 2021): IQM and mean with stratified-bootstrap
CIs, probability of improvement, performance profiles (see [`hybrid.stats`][hybrid.stats], written
over numpy/scipy rather than ``rliable``, whose ``arch`` dependency breaks with pandas 3).

matplotlib is imported only when figures are drawn and pandas only when a DataFrame is
asked for, so a run's start-up imports neither. Figures are built as
``matplotlib.figure.Figure`` objects, so no global backend is set and notebooks keep theirs.
"""

from __future__ import annotations

import difflib
import glob
import json
import math
import warnings
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.stats import Estimate, aggregate, curve_ci, performance_profile
from hybrid.stats import iqm as _iqm
from hybrid.stats import probability_of_improvement as _poi

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "FRAME_KINDS",
    "SHORT_NAMES",
    "AnalysisWarning",
    "CompareError",
    "Comparison",
    "Curve",
    "GroupStats",
    "Run",
    "compare",
    "find_runs",
    "frame",
    "load_run",
    "load_runs",
    "read_jsonl",
]

# Label abbreviations for non-string config values: group ("async", 4) reads "async/s=4".
SHORT_NAMES: dict[str, str] = {
    "staleness_bound": "s",
    "workers": "w",
    "total_env_steps": "steps",
    "num_envs": "envs",
}

_NAN = float("nan")
_NO_ESTIMATE = Estimate(_NAN, _NAN, _NAN)


class AnalysisWarning(UserWarning):
    """Something in the inputs was skipped or could not be used."""


class CompareError(ValueError):
    """Inputs that cannot give a meaningful comparison. One line; the CLI exits with code 2."""


def _warn(message: str) -> None:
    warnings.warn(message, AnalysisWarning, stacklevel=3)


# --------------------------------------------------------------------------- loading


def read_jsonl(path: str | Path, kinds: Collection[str] | None = None) -> tuple[list[dict], int]:
    """Parse a JSONL file, skipping lines that are not JSON objects (e.g. a crash-torn tail).

    With ``kinds``, only rows whose ``kind`` is in it are kept. Returns ``(rows, skipped)``.
    """
    # errors="replace": a crash can also cut a multi-byte character in half.
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    keep = set(kinds) if kinds is not None else None
    # Parsing dominates load time; lines that cannot hold a wanted kind are dropped by a
    # substring test first (a false positive is parsed and filtered below, so still exact
    # for what json.dumps writes).
    needles = [json.dumps(k) for k in keep] if keep is not None else None
    rows: list[dict] = []
    skipped = 0
    loads = json.loads
    for line in text.splitlines():
        if not line or line.isspace():
            continue
        if needles is not None and not any(n in line for n in needles):
            continue
        try:
            row = loads(line)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(row, dict):
            skipped += 1
            continue
        if keep is None or row.get("kind") in keep:
            rows.append(row)
    return rows, skipped


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _summary_problem(path: Path) -> str | None:
    """Why ``path`` (a summary.json) is unusable: None when it reads as a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        return f"unreadable ({exc})"
    try:
        summary = json.loads(text)
    except ValueError as exc:
        return f"corrupt (not valid JSON: {exc})"
    return None if isinstance(summary, dict) else "corrupt (not a JSON object)"


@dataclass
class Run:
    """One run directory: its config, its summary (None if unfinished) and metric rows."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any] | None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped_lines: int = 0

    @property
    def complete(self) -> bool:
        return self.summary is not None

    @property
    def name(self) -> str:
        return self.path.name

    def column(self, kind: str, key: str) -> np.ndarray:
        """Values of ``key`` over the rows of ``kind`` as floats, NaN where absent or null."""
        return np.array(
            [_to_float(r.get(key)) for r in self.rows.get(kind, ())], dtype=float
        ).reshape(-1)


def load_run(path: str | Path, kinds: Collection[str] | None = None) -> Run:
    """Load a run directory. ``kinds`` limits which metric rows are kept (all by default).

    Raises FileNotFoundError without a readable ``config.json``. An unreadable
    ``summary.json`` (e.g. torn by a crash) counts as absent.
    """
    p = Path(path)
    config = _read_json(p / "config.json")
    if not isinstance(config, dict):
        raise FileNotFoundError(f"{p}: no readable config.json")
    summary = _read_json(p / "summary.json")
    metrics = p / "metrics.jsonl"
    rows: dict[str, list[dict[str, Any]]] = {}
    skipped = 0
    if metrics.is_file():
        flat, skipped = read_jsonl(metrics, kinds)
        for row in flat:
            rows.setdefault(str(row.get("kind")), []).append(row)
    return Run(p, config, summary if isinstance(summary, dict) else None, rows, skipped)


def find_runs(root: str | Path) -> list[Path]:
    """Every directory at or under ``root`` holding a ``config.json``, sorted."""
    r = Path(root)
    return sorted({c.parent for c in r.rglob("config.json")})


# --------------------------------------------------------------------------- data frames

FRAME_KINDS: dict[str, str] = {
    "metrics": "every row of metrics.jsonl (train and eval rows; `kind` says which)",
    "train": "the train rows of metrics.jsonl (losses, staleness, throughput)",
    "eval": "the eval rows of metrics.jsonl (eval/return_mean, eval/return_std)",
    "spans": "one row per worker task from spans.jsonl (start, upload_start, end, "
    "base_version, staleness, verdict, env_steps; virtual seconds on the serial runtime)",
    "summary": "one row per finished run: summary.json",
    "config": "one row per run: config.json",
}
"""What [`frame`][hybrid.analysis.frame] and [`load_runs`][hybrid.analysis.load_runs] read, by
``kind``."""

_GLOB_CHARS = frozenset("*?[")


def _frame_rows(path: Path, kind: str) -> list[dict[str, Any]] | None:
    """The rows of one kind in one run directory; None when the run has no such file."""
    if kind in ("metrics", "train", "eval"):
        metrics = path / "metrics.jsonl"
        if not metrics.is_file():
            return None
        return read_jsonl(metrics, None if kind == "metrics" else (kind,))[0]
    if kind == "spans":
        spans = path / "spans.jsonl"
        return read_jsonl(spans)[0] if spans.is_file() else None
    if kind == "summary":
        summary = _read_json(path / "summary.json")
        return [summary] if isinstance(summary, dict) else None
    return [{}]  # config: the config columns are added by the caller


def _check_kind(kind: str) -> None:
    if kind not in FRAME_KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(FRAME_KINDS)}")


def _records(
    path: Path, kind: str, config: bool | Sequence[str]
) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Rows of ``kind`` with a ``run`` column first and the config fields after the row's."""
    p = Path(path)
    cfg = _read_json(p / "config.json")
    if not isinstance(cfg, dict):
        raise FileNotFoundError(f"{p}: no readable config.json")
    rows = _frame_rows(p, kind)
    if rows is None:
        return None
    fields = list(cfg) if config is True else [] if config is False else list(config)
    out = []
    for row in rows:
        rec: dict[str, Any] = {"run": str(p), **row}
        for name in fields:
            # A config field never hides a logged value of the same name.
            rec[f"config/{name}" if name in row else name] = cfg.get(name)
        out.append(rec)
    return out, fields


def _dataframe(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    # Lists (staleness_histogram, scheduler_args...) stay Python objects in their cells.
    return pd.DataFrame.from_records(records) if records else pd.DataFrame({"run": []})


def frame(
    run: str | Path, kind: str = "metrics", *, config: bool | Sequence[str] = True
) -> pd.DataFrame:
    """One run directory as a pandas DataFrame: one row per logged row of ``kind``.

    ``kind`` is one of [`FRAME_KINDS`][hybrid.analysis.FRAME_KINDS]. The first column, ``run``, is
    the run directory; the config fields follow the logged columns (all of them, none with
    ``config=False``, or the ones named), so frames of several runs concatenate and group by any
    field. A config field whose name a row already has becomes ``config/<name>``. Raises
    FileNotFoundError when ``run`` has no config.json or no file for ``kind``.
    """
    _check_kind(kind)
    got = _records(Path(run), kind, config)
    if got is None:
        raise FileNotFoundError(f"{run}: holds no data for kind={kind!r} ({FRAME_KINDS[kind]})")
    return _dataframe(got[0])


def _expand(paths: Any) -> list[Path]:
    """Run directories from paths, globs, folders holding runs, Result or Run objects."""
    if isinstance(paths, (str, Path)) or hasattr(paths, "run_dir"):
        paths = [paths]
    found: list[Path] = []
    for item in paths:
        if hasattr(item, "run_dir"):  # a hybrid.Result
            found.append(Path(item.run_dir))
            continue
        if isinstance(item, Run):
            found.append(item.path)
            continue
        text = str(item)
        matches = sorted(glob.glob(text)) if _GLOB_CHARS & set(text) else [text]
        if not matches:
            _warn(f"{text!r} matches no path")
        for m in map(Path, matches):
            if (m / "config.json").is_file():
                found.append(m)
            elif m.is_dir():
                found += find_runs(m)
            elif not m.exists():
                raise FileNotFoundError(f"runs: {str(m)!r} does not exist")
    unique: dict[Path, Path] = {}
    for f in found:
        unique.setdefault(f.resolve(), f)
    return list(unique.values())


def load_runs(
    paths: Any, kind: str = "metrics", *, config: bool | Sequence[str] = True
) -> pd.DataFrame:
    """Many runs as one pandas DataFrame: [`frame`][hybrid.analysis.frame] of each, stacked.

    ``paths`` is a path, a glob (``"runs/sweep/*"``), a folder searched for run directories, a
    [`hybrid.Result`][hybrid.Result], or a list of those. Runs are read in path order; one without
    data for ``kind`` (an unfinished run has no summary) is left out with an
    [`AnalysisWarning`][hybrid.analysis.AnalysisWarning]. Group with pandas, e.g.
    ``load_runs("runs/*", "eval").groupby(["scheduler", "env_steps"])["eval/return_mean"]``.
    """
    _check_kind(kind)
    records: list[dict[str, Any]] = []
    for p in _expand(paths):
        try:
            got = _records(p, kind, config)
        except FileNotFoundError as exc:
            _warn(f"skipping {exc}")
            continue
        if got is None:
            _warn(f"skipping {p}: no data for kind={kind!r}")
            continue
        records += got[0]
    return _dataframe(records)


# --------------------------------------------------------------------------- results


@dataclass
class Curve:
    """IQM learning curve of one group on a grid, with pointwise bootstrap band."""

    x: np.ndarray
    iqm: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int
    source: str  # the eval-row column used for x ("env_steps", "virtual_s", "wall_s", ...)


@dataclass
class GroupStats:
    """Aggregates over the seeds of one group of runs."""

    label: str
    key: dict[str, Any]
    run_paths: list[Path]
    scores: list[float]  # the metric per run, NaN where missing
    iqm: Estimate
    mean: Estimate
    median: Estimate
    solved: list[bool]
    steps_to_solve: list[int]  # only runs that solved
    steps_to_solve_iqm: Estimate
    steps_to_solve_median: Estimate
    env_steps_per_s: float  # mean over runs
    staleness_mean: float  # mean over runs
    staleness_max: int | None
    staleness_histogram: list[float]  # fraction of updates at staleness 0, 1, ... (seed-averaged)

    @property
    def n_runs(self) -> int:
        return len(self.run_paths)

    @property
    def n_solved(self) -> int:
        return sum(self.solved)

    @property
    def valid_scores(self) -> np.ndarray:
        s = np.asarray(self.scores, dtype=float)
        return s[np.isfinite(s)]


@dataclass
class Comparison:
    """What [`compare`][hybrid.analysis.compare] computed: per-group aggregates, curves, and the
    report.

    In Jupyter it renders as its table. [`table`][hybrid.analysis.Comparison.table] is the same
    table as a DataFrame (numbers, not strings), [`figures`][hybrid.analysis.Comparison.figures] the
    figures (drawn on first use) and [`save`][hybrid.analysis.Comparison.save] writes everything
    ``hybrid compare`` writes.
    """

    metric: str
    group_by: tuple[str, ...]
    confidence: float
    groups: dict[str, GroupStats]
    improvement: dict[tuple[str, str], Estimate]  # (a, b) -> P(a > b) on the metric
    curves: dict[str, dict[str, Curve]]  # x axis -> group label -> curve
    skipped: list[Path]
    table_md: str = ""
    table_tex: str = ""
    paths: dict[str, Path] = field(default_factory=dict)
    reps: int = 2000
    seed: int = 0
    _profiles: dict[str, dict[str, np.ndarray]] | None = field(default=None, repr=False)
    _figures: dict[str, Figure] | None = field(default=None, repr=False)

    def to_markdown(self) -> str:
        """The per-group table, then the probability-of-improvement matrix if >= 2 groups."""
        return _markdown(self)

    def to_latex(self) -> str:
        """The per-group table as a booktabs ``tabular``."""
        return _latex(self)

    @property
    def table(self) -> pd.DataFrame:
        """One row per group, indexed by label: the grouping fields, then each estimate
        with its CI (``iqm``, ``iqm_low``, ``iqm_high``, ...), runs solved and throughput."""
        import pandas as pd

        rows = []
        for g in self.groups.values():
            row: dict[str, Any] = {"group": g.label, **g.key, "runs": g.n_runs}
            row["runs_with_metric"] = int(g.valid_scores.size)
            for name in ("iqm", "mean", "median"):
                e = getattr(g, name)
                row |= {name: e.value, f"{name}_low": e.low, f"{name}_high": e.high}
            row["solved"] = g.n_solved
            for name in ("iqm", "median"):
                e = getattr(g, f"steps_to_solve_{name}")
                col = f"steps_to_solve_{name}"
                row |= {col: e.value, f"{col}_low": e.low, f"{col}_high": e.high}
            row["env_steps_per_s"] = g.env_steps_per_s
            row["staleness_mean"] = g.staleness_mean
            row["staleness_max"] = g.staleness_max
            rows.append(row)
        return pd.DataFrame(rows).set_index("group") if rows else pd.DataFrame()

    @property
    def improvement_table(self) -> pd.DataFrame:
        """P(row's metric > column's), a square DataFrame over the groups (NaN on the
        diagonal and where a group has no score); the CIs are in ``improvement``."""
        import pandas as pd

        labels = list(self.groups)
        return pd.DataFrame(
            [
                [
                    self.improvement[a, b].value if (a, b) in self.improvement else _NAN
                    for b in labels
                ]
                for a in labels
            ],
            index=labels,
            columns=labels,
        )

    @property
    def profiles(self) -> dict[str, dict[str, np.ndarray]]:
        """Performance profile per group: ``tau``, ``fraction`` (of runs scoring above
        tau) and its CI ``low``/``high``."""
        if self._profiles is None:
            self._profiles = _profiles(self.groups, self.reps, self.confidence, self.seed)
        return self._profiles

    @property
    def figures(self) -> dict[str, Figure]:
        """The report's figures by name (``curves_<axis>`` per x axis, ``staleness``,
        ``steps_to_solve``, ``profile``), matplotlib Figures drawn on first access."""
        if self._figures is None:
            colors = _colors(list(self.groups))
            figs = {
                f"curves_{axis}": _plot_curves(cv, axis, colors, self.confidence)
                for axis, cv in self.curves.items()
            }
            figs["staleness"] = _plot_staleness(self.groups, colors)
            figs["steps_to_solve"] = _plot_steps_to_solve(self.groups, colors, self.seed)
            figs["profile"] = _plot_profile(
                self.groups, self.metric, colors, self.confidence, self.profiles
            )
            self._figures = figs
        return self._figures

    def save(self, out: str | Path) -> dict[str, Path]:
        """Write the report into ``out`` (created): each figure as PNG and PDF,
        ``table.md``, ``table.tex`` and ``results.json``. Returns the paths by file name, also kept
        in ``paths``. Raises [`CompareError`][hybrid.analysis.CompareError] when ``out`` cannot be
        a directory."""
        out_dir = Path(out)
        _check_out(out_dir)
        paths: dict[str, Path] = {}
        for stem, fig in self.figures.items():
            paths |= _save(fig, out_dir, stem)
        self.table_md = self.to_markdown()
        self.table_tex = self.to_latex()
        for name, text in (("table.md", self.table_md), ("table.tex", self.table_tex)):
            (out_dir / name).write_text(text, encoding="utf-8")
            paths[name] = out_dir / name
        paths["results.json"] = out_dir / "results.json"
        self.paths = paths
        results = _results(self, self.reps, self.seed)
        results["performance_profile"] = _jsonable(self.profiles)
        paths["results.json"].write_text(
            json.dumps(results, indent=2, allow_nan=False) + "\n", encoding="utf-8"
        )
        return paths

    def _repr_html_(self) -> str:
        import html

        pct = f"{self.confidence:.0%}"
        head = (
            f"<p><b>{html.escape(self.metric)}</b> by {html.escape(', '.join(self.group_by))}: "
            f"IQM and mean over runs with stratified-bootstrap {pct} CIs "
            f"({self.reps} resamples)</p>"
        )
        parts = [head, self.table.to_html(float_format=_num, na_rep="–")]
        if len(self.groups) >= 2 and self.improvement:
            parts.append(f"<p>P(row &gt; column) on <code>{html.escape(self.metric)}</code></p>")
            parts.append(self.improvement_table.to_html(float_format=_prob, na_rep=""))
        if self.skipped:
            parts.append(f"<p>{len(self.skipped)} run(s) skipped (see the warnings)</p>")
        return "\n".join(parts)


# --------------------------------------------------------------------------- helpers


def _to_float(v: Any) -> float:
    if v is None or isinstance(v, (str, dict, list)):
        return _NAN
    try:
        return float(v)
    except (TypeError, ValueError):
        return _NAN


def _rng(seed: int, *names: str) -> np.random.Generator:
    # One stream per purpose, keyed by name: a group's CIs do not shift when other
    # groups are added to the comparison.
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def _est(d: Mapping[str, Any], name: str) -> Estimate:
    lo, hi = d[f"{name}_ci"]
    return Estimate(float(d[name]), float(lo), float(hi))


def _sort_key(v: Any) -> tuple[int, Any]:
    # Numbers in numeric order (s=2 before s=10), then strings, then anything else.
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    return (2, str(v))


def _label(key: Mapping[str, Any], short: Mapping[str, str]) -> str:
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
        h = np.asarray((r.summary or {}).get("staleness_histogram") or [], dtype=float)
        if h.size and h.sum() > 0:
            hists.append(h / h.sum())
    if not hists:
        return []
    width = max(h.size for h in hists)
    padded = np.stack([np.pad(h, (0, width - h.size)) for h in hists])
    return padded.mean(axis=0).tolist()


def _nanmean(values: Iterable[Any]) -> float:
    a = np.array([_to_float(v) for v in values], dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else _NAN


def _group_stats(
    label: str,
    key: dict[str, Any],
    runs: Sequence[Run],
    metric: str,
    reps: int,
    confidence: float,
    seed: int,
) -> GroupStats:
    summaries = [r.summary or {} for r in runs]
    scores = []
    for r, s in zip(runs, summaries, strict=True):
        v = _to_float(s.get(metric))
        if not math.isfinite(v):
            _warn(f"{r.path}: {metric!r} missing or not finite in summary.json; left out")
        scores.append(v)
    valid = np.asarray(scores, dtype=float)
    valid = valid[np.isfinite(valid)]
    iqm_e = mean_e = median_e = _NO_ESTIMATE
    if valid.size:
        agg = aggregate(valid, reps, confidence, _rng(seed, "metric", label))
        iqm_e, mean_e, median_e = _est(agg, "iqm"), _est(agg, "mean"), _est(agg, "median")
    else:
        _warn(f"group {label!r}: no run has a finite {metric!r}")

    solved, steps = [], []
    for s in summaries:
        n = s.get("env_steps_to_solve")
        ok = bool(s.get("solved", n is not None)) and n is not None
        solved.append(ok)
        if ok:
            steps.append(int(n))
    steps_iqm = steps_median = _NO_ESTIMATE
    if steps:
        # Conditional on solving: unsolved runs have no value, and k/n is reported beside.
        agg = aggregate(np.asarray(steps, float), reps, confidence, _rng(seed, "solve", label))
        steps_iqm, steps_median = _est(agg, "iqm"), _est(agg, "median")

    maxes = [s.get("staleness_max") for s in summaries if s.get("staleness_max") is not None]
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


def _curves(
    groups: Mapping[str, Sequence[Run]],
    axis: str,
    points: int,
    reps: int,
    confidence: float,
    seed: int,
) -> dict[str, Curve]:
    per_group: dict[str, list[tuple[np.ndarray, np.ndarray, str]]] = {}
    missing = []
    for label, runs in groups.items():
        for r in runs:
            xy = _eval_xy(r, axis)
            if xy is None:
                missing.append(str(r.path))
            else:
                per_group.setdefault(label, []).append(xy)
    if missing:
        _warn(f"no usable eval rows for the {axis!r} curves in: {', '.join(missing)}")
    if not per_group:
        return {}
    lo_all = min(xy[0][0] for xys in per_group.values() for xy in xys)
    hi_all = max(xy[0][-1] for xys in per_group.values() for xy in xys)
    grid = np.linspace(lo_all, hi_all, points)
    for label, runs in groups.items():
        if label not in per_group:
            continue
        # A run that stopped because it was solved keeps its final policy: carry its last
        # evaluation forward, or early solvers would cut their group's curve short.
        solved = [_stopped_solved(r) for r in runs if _eval_xy(r, axis) is not None]
        per_group[label] = [
            (np.append(x, hi_all), np.append(y, y[-1]), src)
            if stop and x[-1] < hi_all
            else (x, y, src)
            for (x, y, src), stop in zip(per_group[label], solved, strict=True)
        ]
    out = {}
    for label, xys in per_group.items():
        # Only where every run of the group has data: extrapolating a run past its last
        # eval would invent performance for it (e.g. on the time axis of a faster run).
        lo = max(x[0] for x, _, _ in xys)
        hi = min(x[-1] for x, _, _ in xys)
        # The shared grid inside that range, plus its ends so the curve reaches the final eval.
        gx = np.union1d(grid[(grid >= lo) & (grid <= hi)], [lo, hi])
        mat = np.stack([np.interp(gx, x, y) for x, y, _ in xys])
        value, low, high = curve_ci(mat, _iqm, reps, confidence, _rng(seed, "curve", axis, label))
        sources = sorted({s for _, _, s in xys})
        out[label] = Curve(gx, value, low, high, len(xys), "+".join(sources))
    return out


# --------------------------------------------------------------------------- formatting


def _num(x: float) -> str:
    if x is None or not math.isfinite(x):
        return ""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _count(x: float) -> str:
    """Steps and rates: whole numbers with thousands separators."""
    return f"{x:,.0f}" if x is not None and math.isfinite(x) else ""


def _with_ci(e: Estimate, fmt: Callable[[float], str] = _num) -> str:
    if not math.isfinite(e.value):
        return ""
    return f"{fmt(e.value)} [{fmt(e.low)}, {fmt(e.high)}]"


def _prob(x: float) -> str:
    return f"{x:.2f}"


def _rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    pct = f"{c.confidence:.0%}"
    header = [
        "group",
        "runs",
        f"IQM [{pct} CI]",
        f"mean [{pct} CI]",
        "solved",
        "median steps to solve",
        "env steps/s",
    ]
    body = [
        [
            g.label,
            str(g.n_runs),
            _with_ci(g.iqm),
            _with_ci(g.mean),
            f"{g.n_solved}/{g.n_runs}",
            _count(g.steps_to_solve_median.value),
            _count(g.env_steps_per_s),
        ]
        for g in c.groups.values()
    ]
    return header, body


def _md_row(cells: Sequence[str], empty: str = "–") -> str:
    return "| " + " | ".join((s or empty).replace("|", "\\|") for s in cells) + " |"


def _markdown(c: Comparison) -> str:
    header, body = _rows(c)
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = [_md_row(header), "| " + " | ".join(align) + " |", *map(_md_row, body)]
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
                cells.append(_with_ci(e, _prob) if e is not None and a != b else "")
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


def _latex(c: Comparison) -> str:
    header, body = _rows(c)

    def row(cells: Sequence[str]) -> str:
        out = [_tex(s) if s else "--" for s in cells]
        # "\\" followed by "[" would read the cell as an optional argument of "\\".
        if out[0].startswith("["):
            out[0] = "{" + out[0] + "}"
        return " & ".join(out) + r" \\"

    spec = "l" + "r" * (len(header) - 1)
    return "\n".join(
        [
            f"% hybrid.analysis.compare, metric {c.metric}; needs \\usepackage{{booktabs}}",
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
            row(header),
            r"\midrule",
            *map(row, body),
            r"\bottomrule",
            r"\end{tabular}",
            "",
        ]
    )


def _jsonable(x: Any) -> Any:
    """Convert to plain JSON; NaN and inf become null (strict JSON has no NaN)."""
    if isinstance(x, Estimate):
        return _jsonable({"value": x.value, "ci": [x.low, x.high]})
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _solve_steps(g: GroupStats) -> list[int | None]:
    it = iter(g.steps_to_solve)
    return [next(it) if ok else None for ok in g.solved]


def _results(c: Comparison, reps: int, seed: int) -> dict[str, Any]:
    groups = {}
    for g in c.groups.values():
        groups[g.label] = {
            "key": g.key,
            "runs": [
                {"path": p, c.metric: s, "solved": ok, "env_steps_to_solve": n}
                for p, s, ok, n in zip(
                    g.run_paths, g.scores, g.solved, _solve_steps(g), strict=True
                )
            ],
            "n_runs": g.n_runs,
            "n_metric": int(g.valid_scores.size),
            "iqm": g.iqm,
            "mean": g.mean,
            "median": g.median,
            "n_solved": g.n_solved,
            "steps_to_solve": g.steps_to_solve,
            "steps_to_solve_iqm": g.steps_to_solve_iqm,
            "steps_to_solve_median": g.steps_to_solve_median,
            "env_steps_per_s": g.env_steps_per_s,
            "staleness_mean": g.staleness_mean,
            "staleness_max": g.staleness_max,
            "staleness_histogram": g.staleness_histogram,
        }
    return _jsonable(
        {
            "metric": c.metric,
            "group_by": list(c.group_by),
            "confidence": c.confidence,
            "bootstrap_reps": reps,
            "seed": seed,
            "groups": groups,
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
                    }
                    for label, cv in curves.items()
                }
                for axis, curves in c.curves.items()
            },
            "skipped": c.skipped,
            "files": c.paths,
        }
    )


# --------------------------------------------------------------------------- figures


def _figure(width: float = 6.0, height: float = 4.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Figure, out: Path, stem: str) -> dict[str, Path]:
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
    fig = _figure()
    ax = fig.add_subplot()
    if not curves:
        _no_data(ax, "no eval rows")
        return fig
    sources = {s for cv in curves.values() for s in cv.source.split("+")}
    for label, cv in curves.items():
        # Name each group's clock when the groups do not share one.
        note = f", {cv.source}" if len(sources) > 1 else ""
        ax.plot(cv.x, cv.iqm, color=colors[label], label=f"{label} (n={cv.n_runs}{note})")
        ax.fill_between(cv.x, cv.low, cv.high, color=colors[label], alpha=0.2, linewidth=0)
    if len(sources) == 1:
        xlabel = _AXIS_LABELS.get(next(iter(sources)), next(iter(sources)))
    else:
        xlabel = "time (s; virtual where recorded, else wall-clock)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"eval return (IQM, {confidence:.0%} CI)")
    ax.legend(fontsize="small")
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
    if not any(g.steps_to_solve for g in gs):
        _no_data(ax, "no run solved the task")
        return fig
    jitter = np.random.default_rng(seed)
    for i, g in enumerate(gs):
        s = np.asarray(g.steps_to_solve, dtype=float)
        if s.size:
            ax.scatter(s, i + jitter.uniform(-0.15, 0.15, s.size), color=colors[g.label], s=14)
            e = g.steps_to_solve_iqm
            ax.errorbar(
                [e.value],
                [i + 0.3],
                xerr=[[e.value - e.low], [e.high - e.value]],
                fmt="D",
                color="black",
                markersize=4,
                capsize=3,
            )
    ax.set_yticks(range(len(gs)), [f"{g.label} ({g.n_solved}/{g.n_runs})" for g in gs])
    ax.invert_yaxis()
    ax.set_xlabel("environment steps to solve (dots: runs; diamond: IQM with CI)")
    ax.grid(alpha=0.3, axis="x")
    return fig


def _profiles(
    groups: Mapping[str, GroupStats], reps: int, confidence: float, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    scored = {k: g.valid_scores for k, g in groups.items() if g.valid_scores.size}
    profiles: dict[str, dict[str, np.ndarray]] = {}
    if not scored:
        return profiles
    every = np.concatenate(list(scored.values()))
    # A little margin so each profile visibly starts at 1 and ends at 0.
    pad = 0.03 * (every.max() - every.min()) or 1.0
    taus = np.linspace(every.min() - pad, every.max() + pad, 201)
    for label, s in scored.items():
        frac, low, high = performance_profile(
            s, taus, ci=True, reps=reps, confidence=confidence, rng=_rng(seed, "profile", label)
        )
        profiles[label] = {"tau": taus, "fraction": frac, "low": low, "high": high}
    return profiles


def _plot_profile(
    groups: Mapping[str, GroupStats],
    metric: str,
    colors: Mapping[str, str],
    confidence: float,
    profiles: Mapping[str, Mapping[str, np.ndarray]],
) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    if not profiles:
        _no_data(ax, f"no finite {metric}")
        return fig
    for label, p in profiles.items():
        ax.step(p["tau"], p["fraction"], where="post", color=colors[label], label=label)
        ax.fill_between(
            p["tau"], p["low"], p["high"], step="post", color=colors[label], alpha=0.2, lw=0
        )
    ax.set_xlabel(f"{metric} threshold τ")
    ax.set_ylabel(f"fraction of runs with score > τ ({confidence:.0%} CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


# --------------------------------------------------------------------------- compare


def _check_grouping(runs: Sequence[Run], group_by: Sequence[str]) -> None:
    """Refuse a grouping that would name a field no run has, or pool different envs.

    A misspelt field would put every run in one group ``field=none``; returns of different
    envs are on different scales (Pendulum ~-1000, CartPole 500), so one IQM over them means
    nothing. Runs whose config.json records no env are not counted.
    """
    fields = sorted({str(k) for r in runs for k in r.config} | _setting_fields(runs))
    for name in group_by:
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise CompareError(
                f"--group-by: {name!r} is not a config field of these runs; "
                f"{hint}valid fields: {', '.join(fields)}"
            )
    envs = sorted({str(r.config["env"]) for r in runs if r.config.get("env") is not None})
    if len(envs) > 1 and "env" not in group_by:
        raise CompareError(
            f"runs: these runs span {len(envs)} envs ({', '.join(envs)}), whose returns are "
            "not comparable in one score; add env to the grouping "
            f"(--group-by env {' '.join(group_by)}) or compare one env at a time"
        )


SETTING = "scheduler_arg."
"""``--group-by scheduler_arg.KEY`` groups by a user scheduler's setting KEY (config.json's
``scheduler_args``), the name sweep YAML gives it."""


def _setting_fields(runs: Sequence[Run]) -> set[str]:
    return {
        f"{SETTING}{key}"
        for r in runs
        if isinstance(r.config.get("scheduler_args"), dict)
        for key in r.config["scheduler_args"]
    }


def _config_value(config: Mapping[str, Any], name: str) -> Any:
    if name.startswith(SETTING) and name not in config:
        settings = config.get("scheduler_args")
        return settings.get(name[len(SETTING) :]) if isinstance(settings, dict) else None
    return config.get(name)


def _check_out(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise CompareError(f"--out: {out_dir} is a file; give a directory for the report")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent is a file, no permission, read-only disk...
        raise CompareError(f"--out: cannot create {out_dir} ({exc.strerror or exc})") from None


def compare(
    runs: Any,
    out: str | Path | None = None,
    group_by: Sequence[str] | str = ("scheduler",),
    metric: str = "final_eval_return",
    x_axes: Sequence[str] = ("env_steps", "time"),
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    grid_points: int = 100,
    short_names: Mapping[str, str] | None = None,
) -> Comparison:
    """Aggregate finished runs per group of ``group_by`` config values.

    ``runs`` is what [`load_runs`][hybrid.analysis.load_runs] takes: run directories, globs, folders
    searched for runs ([`find_runs`][hybrid.analysis.find_runs]), [`hybrid.Result`][hybrid.Result]
    objects, or a list of those. ``metric`` is read from each ``summary.json``. ``x_axes`` entries
    are eval-row columns (``env_steps``, ``updates``, ...) or ``time`` (virtual_s when a run records
    it, else wall_s). With ``out``, the report is also written there
    ([`Comparison.save`][hybrid.analysis.Comparison.save], what ``hybrid compare --out`` writes).
    Runs without ``summary.json`` are skipped with an
    [`AnalysisWarning`][hybrid.analysis.AnalysisWarning] (one whose summary.json is corrupt is named
    as such). Raises [`CompareError`][hybrid.analysis.CompareError] before writing anything when
    ``group_by`` names a field no run has, when runs of several envs would be pooled (group by
    ``env``), or when ``out`` cannot be a directory. Bootstraps are seeded from ``seed``, so the
    same inputs give the same numbers.
    """
    out_dir = None if out is None else Path(out)
    group_by = (group_by,) if isinstance(group_by, str) else tuple(group_by)
    short = {**SHORT_NAMES, **(short_names or {})}
    try:
        run_dirs = _expand(runs)
    except FileNotFoundError as exc:
        raise CompareError(str(exc)) from None

    loaded: list[Run] = []
    skipped: list[Path] = []
    for p in run_dirs:
        try:
            run = load_run(p, kinds=("eval",))
        except FileNotFoundError:
            _warn(f"skipping {p}: no readable config.json")
            skipped.append(p)
            continue
        if not run.complete:
            problem = _summary_problem(p / "summary.json")
            if problem in (None, "missing"):
                _warn(f"skipping incomplete run {p}: no summary.json (still running or crashed?)")
            else:  # a finished run whose result is damaged: not the same as still running
                _warn(f"skipping run {p}: {p / 'summary.json'} is {problem}")
            skipped.append(p)
            continue
        loaded.append(run)
    if not loaded:
        raise CompareError("runs: no complete run among the given run directories")
    _check_grouping(loaded, group_by)
    if out_dir is not None:
        _check_out(out_dir)

    # Bucket by the JSON text of the values: config values may be lists (unhashable).
    buckets: dict[str, tuple[list[Any], list[Run]]] = {}
    for r in loaded:
        values = [_config_value(r.config, f) for f in group_by]
        bucket = buckets.setdefault(json.dumps(values, sort_keys=True, default=str), (values, []))
        bucket[1].append(r)
    ordered = sorted(buckets.values(), key=lambda b: tuple(_sort_key(v) for v in b[0]))
    grouped: dict[str, list[Run]] = {}
    keys: dict[str, dict[str, Any]] = {}
    for values, members in ordered:
        key = dict(zip(group_by, values, strict=True))
        label = _label(key, short)
        grouped.setdefault(label, []).extend(members)  # distinct keys may print alike
        keys.setdefault(label, key)

    groups = {
        label: _group_stats(label, keys[label], rs, metric, reps, confidence, seed)
        for label, rs in grouped.items()
    }
    improvement: dict[tuple[str, str], Estimate] = {}
    labels = list(groups)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            sa, sb = groups[a].valid_scores, groups[b].valid_scores
            if sa.size and sb.size:
                e = _poi(sa, sb, reps, confidence, _rng(seed, "poi", a, b))
                improvement[(a, b)] = e
                # P(b > a) = 1 - P(a > b) exactly, ties counting half on both sides.
                improvement[(b, a)] = Estimate(1.0 - e.value, 1.0 - e.high, 1.0 - e.low)

    curves = {axis: _curves(grouped, axis, grid_points, reps, confidence, seed) for axis in x_axes}
    comp = Comparison(
        metric, group_by, confidence, groups, improvement, curves, skipped, reps=reps, seed=seed
    )
    comp.table_md = comp.to_markdown()
    comp.table_tex = comp.to_latex()
    if out_dir is not None:
        comp.save(out_dir)
    return comp
