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
CIs, probability of improvement, performance profiles, and across several envs an aggregate
of normalized scores ([`across_tasks`][hybrid.analysis.across_tasks]); see
[`hybrid.stats`][hybrid.stats], written over numpy/scipy rather than ``rliable``, whose ``arch``
dependency breaks with pandas 3. Steps to solve count every run: an unsolved run is censored
at the env steps it ran, and each group gets a Kaplan–Meier curve of the fraction solved and
its median ("not reached" when fewer than half solved).

The package is split by concern: ``loading`` (run directories, frames), ``groups`` (per-group
statistics and curves), ``tasks`` (across-tasks aggregate), ``tables``, ``figures``, ``results``
(the dataclasses) and ``compare``. matplotlib is imported only when figures are drawn and pandas
only when a DataFrame is asked for, so a run's start-up imports neither.
"""

from __future__ import annotations

from hybrid.analysis.compare import SETTING, SHORT_NAMES, compare
from hybrid.analysis.figures import CARRIED_NOTE
from hybrid.analysis.loading import (
    FRAME_KINDS,
    AnalysisWarning,
    CompareError,
    Run,
    find_runs,
    frame,
    load_run,
    load_runs,
    read_jsonl,
)
from hybrid.analysis.results import Comparison, Curve, GroupStats
from hybrid.analysis.tables import NOT_REACHED
from hybrid.analysis.tasks import REFERENCE_SCORES, Reference, TaskAggregate, across_tasks

__all__ = [
    "CARRIED_NOTE",
    "FRAME_KINDS",
    "NOT_REACHED",
    "REFERENCE_SCORES",
    "SETTING",
    "SHORT_NAMES",
    "AnalysisWarning",
    "CompareError",
    "Comparison",
    "Curve",
    "GroupStats",
    "Reference",
    "Run",
    "TaskAggregate",
    "across_tasks",
    "compare",
    "find_runs",
    "frame",
    "load_run",
    "load_runs",
    "read_jsonl",
]
