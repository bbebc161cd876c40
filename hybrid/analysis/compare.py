"""``compare``: group finished runs by config fields and aggregate each group."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid.analysis.groups import curves, group_label, group_stats, sort_key
from hybrid.analysis.loading import CompareError, Run, expand, load_run, summary_problem, warn
from hybrid.analysis.results import Comparison, GroupStats, check_out
from hybrid.analysis.tasks import TaskAggregate, across_tasks, seeded_stream
from hybrid.stats import Estimate
from hybrid.stats import probability_of_improvement as _poi

# Label abbreviations for non-string config values: group ("async", 4) reads "async/s=4".
SHORT_NAMES: dict[str, str] = {
    "staleness_bound": "s",
    "workers": "w",
    "total_env_steps": "steps",
    "num_envs": "envs",
}


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


def _across_tasks(
    groups: Mapping[str, GroupStats],
    group_by: Sequence[str],
    metric: str,
    references: Mapping[str, Any] | None,
    wanted: bool | None,
    short: Mapping[str, str],
    reps: int,
    confidence: float,
    seed: int,
) -> dict[str, TaskAggregate]:
    """Each method's (group key without env) normalized score over the envs, when asked for
    or possible; a refusal is a CompareError when asked for, else a warning."""
    required = bool(wanted) or references is not None
    envs = {g.key.get("env") for g in groups.values()} if "env" in group_by else set()
    if wanted is False or (not required and len(envs - {None}) < 2):
        return {}
    try:
        if len(envs - {None}) < 2 or None in envs:
            raise CompareError(
                "across tasks: group by env (--group-by env ...) over runs of at least 2 envs, "
                "each recording its env"
            )
        if references is None and "return" not in metric:
            raise CompareError(
                f"references: the built-in references are eval returns, not {metric!r}; "
                "pass references={env: (random, reference)} for this metric"
            )
        scores: dict[str, dict[str, list[float]]] = {}
        keys: dict[str, dict[str, Any]] = {}
        for g in groups.values():
            rest = {k: v for k, v in g.key.items() if k != "env"}
            method = group_label(rest, short) or "all runs"
            keys.setdefault(method, rest)
            scores.setdefault(method, {}).setdefault(str(g.key["env"]), []).extend(
                g.valid_scores.tolist()
            )
        return across_tasks(
            scores, references, keys=keys, reps=reps, confidence=confidence, seed=seed
        )
    except CompareError as exc:
        if required:
            raise
        warn(f"no across-tasks aggregate: {exc}")
        return {}


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
    references: Mapping[str, Any] | None = None,
    across_tasks: bool | None = None,
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
    as such). Steps to solve count every run: the Kaplan–Meier median, an unsolved run censored at
    the env steps it ran.

    Grouped by ``env`` over several envs, each method (the group key without env) also gets
    an across-tasks aggregate (``Comparison.across_tasks``): scores normalized per env by
    ``references`` ({env: (random, reference)}) over
    [`REFERENCE_SCORES`][hybrid.analysis.REFERENCE_SCORES], IQM, mean, median and optimality gap
    with a bootstrap stratified by env, and performance profiles. ``across_tasks=True`` (or
    giving ``references``) requires it, ``False`` skips it; by default a missing reference only
    warns.

    Raises [`CompareError`][hybrid.analysis.CompareError] before writing anything when
    ``group_by`` names a field no run has, when runs of several envs would be pooled (group by
    ``env``), when a required across-tasks aggregate has mismatched inputs (a method missing an
    env, an env without references), or when ``out`` cannot be a directory. Bootstraps are
    seeded from ``seed``, so the same inputs give the same numbers.
    """
    out_dir = None if out is None else Path(out)
    group_by = (group_by,) if isinstance(group_by, str) else tuple(group_by)
    short = {**SHORT_NAMES, **(short_names or {})}
    try:
        run_dirs = expand(runs)
    except FileNotFoundError as exc:
        raise CompareError(str(exc)) from None

    loaded: list[Run] = []
    skipped: list[Path] = []
    for p in run_dirs:
        try:
            run = load_run(p, kinds=("eval",))
        except FileNotFoundError:
            warn(f"skipping {p}: no readable config.json")
            skipped.append(p)
            continue
        if not run.complete:
            problem = summary_problem(p / "summary.json")
            if problem in (None, "missing"):
                warn(f"skipping incomplete run {p}: no summary.json (still running or crashed?)")
            else:  # a finished run whose result is damaged: not the same as still running
                warn(f"skipping run {p}: {p / 'summary.json'} is {problem}")
            skipped.append(p)
            continue
        loaded.append(run)
    if not loaded:
        raise CompareError("runs: no complete run among the given run directories")
    _check_grouping(loaded, group_by)
    if out_dir is not None:
        check_out(out_dir, create=False)  # created once nothing else is refused

    # Bucket by the JSON text of the values: config values may be lists (unhashable).
    buckets: dict[str, tuple[list[Any], list[Run]]] = {}
    for r in loaded:
        values = [_config_value(r.config, f) for f in group_by]
        bucket = buckets.setdefault(json.dumps(values, sort_keys=True, default=str), (values, []))
        bucket[1].append(r)
    ordered = sorted(buckets.values(), key=lambda b: tuple(sort_key(v) for v in b[0]))
    grouped: dict[str, list[Run]] = {}
    keys: dict[str, dict[str, Any]] = {}
    for values, members in ordered:
        key = dict(zip(group_by, values, strict=True))
        label = group_label(key, short)
        grouped.setdefault(label, []).extend(members)  # distinct keys may print alike
        keys.setdefault(label, key)

    groups = {
        label: group_stats(label, keys[label], rs, metric, reps, confidence, seed)
        for label, rs in grouped.items()
    }
    aggregate_tasks = _across_tasks(
        groups, group_by, metric, references, across_tasks, short, reps, confidence, seed
    )
    if out_dir is not None:
        check_out(out_dir)
    improvement: dict[tuple[str, str], Estimate] = {}
    labels = list(groups)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            sa, sb = groups[a].valid_scores, groups[b].valid_scores
            if sa.size and sb.size:
                e = _poi(sa, sb, reps, confidence, seeded_stream(seed, "poi", a, b))
                improvement[(a, b)] = e
                # P(b > a) = 1 - P(a > b) exactly, ties counting half on both sides.
                improvement[(b, a)] = Estimate(1.0 - e.value, 1.0 - e.high, 1.0 - e.low)

    by_axis = {axis: curves(grouped, axis, grid_points, reps, confidence, seed) for axis in x_axes}
    comp = Comparison(
        metric,
        group_by,
        confidence,
        groups,
        improvement,
        by_axis,
        skipped,
        reps=reps,
        seed=seed,
        across_tasks=aggregate_tasks,
    )
    comp.table_md = comp.to_markdown()
    comp.table_tex = comp.to_latex()
    if out_dir is not None:
        comp.save(out_dir)
    return comp
