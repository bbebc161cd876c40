"""What a comparison computes: per-group aggregates, learning curves, and the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.analysis import figures, tables
from hybrid.analysis.loading import CompareError
from hybrid.analysis.tasks import TaskAggregate
from hybrid.stats import Estimate, SolveCurve

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

_NAN = float("nan")
NO_ESTIMATE = Estimate(_NAN, _NAN, _NAN)
"""A statistic with no data (no run has a value)."""


@dataclass
class Curve:
    """IQM learning curve of one group on a grid, with pointwise bootstrap band.

    ``carried[i]`` counts the runs whose value at ``x[i]`` is their last evaluation carried
    forward: a run that stopped because it solved keeps its final policy. The figures draw
    those stretches dashed.
    """

    x: np.ndarray
    iqm: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int
    source: str  # the eval-row column used for x ("env_steps", "virtual_s", "wall_s", ...)
    carried: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))


@dataclass
class GroupStats:
    """Aggregates over the seeds of one group of runs.

    Steps to solve count every run: an unsolved run is censored at the env steps it ran
    (``solve_steps``), ``solve_curve`` is the Kaplan–Meier fraction solved vs env steps and
    ``median_steps_to_solve`` its median with CI (``inf``: not reached, fewer than half
    solved). ``steps_to_solve_iqm`` and ``steps_to_solve_median`` are over the solved runs
    only, an extra to read beside k/n, never on their own.
    """

    label: str
    key: dict[str, Any]
    run_paths: list[Path]
    scores: list[float]  # the metric per run, NaN where missing
    iqm: Estimate
    mean: Estimate
    median: Estimate
    solved: list[bool]
    steps_to_solve: list[int]  # only runs that solved
    steps_to_solve_iqm: Estimate  # over solved runs only
    steps_to_solve_median: Estimate  # over solved runs only
    env_steps_per_s: float  # mean over runs
    staleness_mean: float  # mean over runs
    staleness_max: int | None
    staleness_histogram: list[float]  # fraction of updates at staleness 0, 1, ... (seed-averaged)
    solve_steps: list[float] = field(default_factory=list)  # per run: solved at, or ran unsolved
    solve_curve: SolveCurve | None = None
    median_steps_to_solve: Estimate = NO_ESTIMATE

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


def check_out(out_dir: Path, create: bool = True) -> None:
    """Create ``out_dir`` for a report, or raise a one-line CompareError saying why not."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CompareError(f"--out: {out_dir} is a file; give a directory for the report")
    if not create:
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent is a file, no permission, read-only disk...
        raise CompareError(f"--out: cannot create {out_dir} ({exc.strerror or exc})") from None


@dataclass
class Comparison:
    """What [`compare`][hybrid.analysis.compare] computed: per-group aggregates, curves, and the
    report.

    In Jupyter it renders as its table. [`table`][hybrid.analysis.Comparison.table] is the same
    table as a DataFrame (numbers, not strings), [`figures`][hybrid.analysis.Comparison.figures] the
    figures (drawn on first use) and [`save`][hybrid.analysis.Comparison.save] writes everything
    ``hybrid compare`` writes. ``across_tasks`` holds, when the groups span several envs, each
    method's normalized score over them ([`TaskAggregate`][hybrid.analysis.TaskAggregate]).
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
    across_tasks: dict[str, TaskAggregate] = field(default_factory=dict)
    _profiles: dict[str, dict[str, np.ndarray]] | None = field(default=None, repr=False)
    _task_profiles: dict[str, dict[str, np.ndarray]] | None = field(default=None, repr=False)
    _figures: dict[str, Figure] | None = field(default=None, repr=False)

    def to_markdown(self) -> str:
        """The per-group table, the across-tasks table when there is one, then the
        probability-of-improvement matrix if >= 2 groups."""
        return tables.markdown(self)

    def to_latex(self) -> str:
        """The per-group table as a booktabs ``tabular`` (and the across-tasks one after it)."""
        return tables.latex(self)

    @property
    def table(self) -> pd.DataFrame:
        """One row per group, indexed by label: the grouping fields, then each estimate
        with its CI (``iqm``, ``iqm_low``, ``iqm_high``, ...), runs solved, the Kaplan–Meier
        ``median_steps_to_solve`` (``inf``: not reached) with its CI, the solved-only
        ``steps_to_solve_iqm``/``steps_to_solve_median``, throughput and staleness. Sorting
        by ``median_steps_to_solve`` ranks the groups by steps to solve, counting every run."""
        return tables.frame(self)

    @property
    def task_table(self) -> pd.DataFrame:
        """One row per method of the across-tasks aggregate (empty without one): IQM, mean,
        median of normalized scores and the optimality gap, each with its CI."""
        return tables.task_frame(self)

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
            self._profiles = figures.profiles(self.groups, self.reps, self.confidence, self.seed)
        return self._profiles

    @property
    def task_profiles(self) -> dict[str, dict[str, np.ndarray]]:
        """Performance profile of normalized scores per method of the across-tasks aggregate
        (the fraction of runs above tau per task, averaged over tasks), with its CI."""
        if self._task_profiles is None:
            self._task_profiles = figures.task_profiles(
                self.across_tasks, self.reps, self.confidence, self.seed
            )
        return self._task_profiles

    @property
    def figures(self) -> dict[str, Figure]:
        """The report's figures by name (``curves_<axis>`` per x axis, ``staleness``,
        ``steps_to_solve``, ``solved_fraction``, ``profile``, and ``profile_across_tasks``
        with an across-tasks aggregate), matplotlib Figures drawn on first access."""
        if self._figures is None:
            self._figures = figures.draw_all(self)
        return self._figures

    def save(self, out: str | Path) -> dict[str, Path]:
        """Write the report into ``out`` (created): each figure as PNG and PDF,
        ``table.md``, ``table.tex`` and ``results.json``. Returns the paths by file name, also kept
        in ``paths``. Raises [`CompareError`][hybrid.analysis.CompareError] when ``out`` cannot be
        a directory."""
        out_dir = Path(out)
        check_out(out_dir)
        paths: dict[str, Path] = {}
        for stem, fig in self.figures.items():
            paths |= figures.save(fig, out_dir, stem)
        self.table_md = self.to_markdown()
        self.table_tex = self.to_latex()
        for name, text in (("table.md", self.table_md), ("table.tex", self.table_tex)):
            (out_dir / name).write_text(text, encoding="utf-8")
            paths[name] = out_dir / name
        paths["results.json"] = out_dir / "results.json"
        self.paths = paths
        results = tables.results(self)
        paths["results.json"].write_text(
            json.dumps(results, indent=2, allow_nan=False) + "\n", encoding="utf-8"
        )
        return paths

    def _repr_html_(self) -> str:
        return tables.html(self)
