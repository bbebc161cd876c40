"""Robust aggregate statistics for comparing RL runs, with stratified bootstrap CIs.

Implements the reporting practice of Agarwal et al., "Deep RL at the Edge of the
Statistical Precipice" (NeurIPS 2021): interquartile mean (IQM), percentile confidence
intervals from a bootstrap that resamples runs independently within each task,
probability of improvement and performance profiles.

Written directly over numpy/scipy instead of depending on ``rliable``: the statistics are
a few lines each, and rliable 1.2.0 pulls in ``arch``, which breaks with pandas 3.

Steps to solve are censored data: a run that never solved is known only to need more than
its budget, so [`solve_curve`][hybrid.stats.solve_curve] estimates the fraction solved by
each env step count with the Kaplan–Meier estimator (``scipy.stats.ecdf`` on
``scipy.stats.CensoredData``) and [`median_steps_to_solve`][hybrid.stats.median_steps_to_solve]
its median, "not reached" (infinite) when fewer than half the runs solve.
[`aggregate_across_tasks`][hybrid.stats.aggregate_across_tasks] pools normalized scores of
several tasks (any number of runs each) with a bootstrap stratified by task.

Score arrays are ``[runs, tasks]``; a 1-D array is read as ``[runs]`` of a single task.
``rng`` arguments take a ``numpy.random.Generator``, an int seed, or None (fresh entropy).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, NamedTuple, overload

import numpy as np

__all__ = [
    "Estimate",
    "SolveCurve",
    "aggregate",
    "aggregate_across_tasks",
    "curve_ci",
    "iqm",
    "ks_distance",
    "median_steps_to_solve",
    "normalize_scores",
    "performance_profile",
    "performance_profile_across_tasks",
    "probability_of_improvement",
    "solve_curve",
    "stratified_bootstrap_ci",
]

RngLike = np.random.Generator | int | None
Statistic = Callable[[np.ndarray], float | np.ndarray]

# Resampled copies are built in chunks of at most this many elements, so that many runs,
# tasks or reps never materialise a huge [reps, runs, tasks] array at once.
_CHUNK_ELEMENTS = 1 << 22


class Estimate(NamedTuple):
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float


def iqm(x: np.ndarray, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% of ``x`` (all of it when axis is None).

    Same cut as ``scipy.stats.trim_mean(x, 0.25)`` (``int(n / 4)`` values off each end),
    but sorts instead of partitioning, which is several times faster on the many short
    rows a bootstrap produces.
    """
    a = np.asarray(x, dtype=float)
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    # A (C-contiguous) copy: the sort below must never reorder the caller's array, of which
    # asarray, reshape and moveaxis return views.
    a = np.moveaxis(a, axis, -1).copy()
    a.sort(axis=-1)
    n = a.shape[-1]
    cut = int(0.25 * n)
    out = a[..., cut : n - cut].mean(axis=-1)
    return float(out) if out.ndim == 0 else out


def _as_2d(scores: np.ndarray) -> np.ndarray:
    a = np.asarray(scores, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"scores must be [runs, tasks] or [runs], got shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError("scores must hold at least one run and one task")
    return a


def _chunk_size(*arrays: np.ndarray) -> int:
    return max(1, _CHUNK_ELEMENTS // sum(a.size for a in arrays))


def _resamples(
    a: np.ndarray, reps: int, rng: np.random.Generator, chunk: int | None = None
) -> Iterator[np.ndarray]:
    """Yield chunks ``[k, runs, tasks]`` of stratified bootstrap resamples of ``a``."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    runs, tasks = a.shape
    chunk = chunk or _chunk_size(a)
    cols = np.arange(tasks)
    done = 0
    while done < reps:
        k = min(chunk, reps - done)
        # One index draw per (rep, run slot, task): runs are resampled independently
        # within each task, which is what makes the bootstrap stratified.
        idx = rng.integers(0, runs, size=(k, runs, tasks))
        yield a[idx, cols]
        done += k


def _percentiles(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    alpha = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(samples, [alpha, 100.0 - alpha], axis=0)
    return low, high


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic: Statistic,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
    *,
    vectorized: bool = False,
) -> tuple[float, float]:
    """Percentile interval of ``statistic`` under a stratified bootstrap over runs.

    ``statistic`` maps a ``[runs, tasks]`` array to a float. With ``vectorized=True`` it
    instead maps ``[k, runs, tasks]`` to ``[k]``, which is much faster for thousands of reps.
    """
    a = _as_2d(scores)
    gen = np.random.default_rng(rng)
    if vectorized:
        parts = [np.asarray(statistic(chunk), dtype=float) for chunk in _resamples(a, reps, gen)]
        samples = np.concatenate([p.reshape(-1) for p in parts])
    else:
        samples = np.array(
            [float(statistic(s)) for chunk in _resamples(a, reps, gen) for s in chunk]
        )
    low, high = _percentiles(samples, confidence)
    return float(low), float(high)


def _pooled(fn: Callable[..., np.ndarray]) -> Statistic:
    """Vectorized statistic over all runs and tasks of each resample ``[k, runs, tasks]``."""
    return lambda batch: fn(batch.reshape(batch.shape[0], -1), axis=-1)


def aggregate(
    scores: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> dict[str, float | tuple[float, float] | int]:
    """IQM, mean and median of ``scores`` with stratified-bootstrap CIs.

    All three pool runs and tasks. (rliable's median is the median of per-task means, which
    for a single task collapses to the mean; pooling keeps it a robust statistic here.)
    Keys: ``iqm``, ``iqm_ci``, ``mean``, ``mean_ci``, ``median``, ``median_ci``, ``n``.
    """
    a = _as_2d(scores)
    gen = np.random.default_rng(rng)
    out: dict[str, float | tuple[float, float] | int] = {"n": int(a.shape[0])}
    fns: dict[str, Callable[..., np.ndarray]] = {"iqm": iqm, "mean": np.mean, "median": np.median}
    for name, fn in fns.items():
        out[name] = float(fn(a, axis=None))
        out[f"{name}_ci"] = stratified_bootstrap_ci(
            a, _pooled(fn), reps, confidence, gen, vectorized=True
        )
    return out


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y)/2 averaged over tasks, for batches ``[k, runs, tasks]``."""
    # Imported here: scipy.stats takes ~0.5 s to import and is only needed for this.
    from scipy.stats import rankdata

    nx, ny = x.shape[1], y.shape[1]
    # Mann-Whitney: with mid-ranks for ties, the rank sum of x in the pooled sample minus
    # its minimum nx(nx+1)/2 counts the pairs x > y, plus half the ties.
    ranks = rankdata(np.concatenate([x, y], axis=1), axis=1)
    u = ranks[:, :nx].sum(axis=1) - nx * (nx + 1) / 2.0
    return (u / (nx * ny)).mean(axis=-1)


def probability_of_improvement(
    x: np.ndarray,
    y: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> Estimate:
    """Probability that a run of X scores above a run of Y (ties count half), averaged over tasks.

    The CI resamples the runs of X and of Y independently, each within every task.
    """
    a, b = _as_2d(x), _as_2d(y)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must cover the same tasks: {a.shape[1]} vs {b.shape[1]}")
    value = float(_poi(a[None], b[None])[0])
    gen = np.random.default_rng(rng)
    # Both streams must yield chunks of equal length to be compared pairwise.
    chunk = _chunk_size(a, b)
    pairs = zip(_resamples(a, reps, gen, chunk), _resamples(b, reps, gen, chunk), strict=True)
    samples = np.concatenate([_poi(xa, yb) for xa, yb in pairs])
    low, high = _percentiles(samples, confidence)
    return Estimate(value, float(low), float(high))


def _profile(batch: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of runs above each tau, averaged over tasks: ``[k, runs, tasks]`` -> [k, taus]."""
    above = batch[..., None] > taus  # [k, runs, tasks, taus]
    return above.mean(axis=1).mean(axis=1)


@overload
def performance_profile(
    scores: np.ndarray,
    taus: np.ndarray,
    *,
    ci: Literal[False] = ...,
    reps: int = ...,
    confidence: float = ...,
    rng: RngLike = ...,
) -> np.ndarray: ...


@overload
def performance_profile(
    scores: np.ndarray,
    taus: np.ndarray,
    *,
    ci: Literal[True],
    reps: int = ...,
    confidence: float = ...,
    rng: RngLike = ...,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def performance_profile(
    scores: np.ndarray,
    taus: np.ndarray,
    *,
    ci: bool = False,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction of runs with score strictly above each threshold in ``taus``.

    Fractions are taken per task, then averaged over tasks. With ``ci=True`` returns
    ``(fraction, low, high)``, the bounds from a stratified bootstrap.
    """
    a = _as_2d(scores)
    t = np.atleast_1d(np.asarray(taus, dtype=float))
    value = _profile(a[None], t)[0]
    if not ci:
        return value
    gen = np.random.default_rng(rng)
    samples = np.concatenate([_profile(chunk, t) for chunk in _resamples(a, reps, gen)])
    low, high = _percentiles(samples, confidence)
    return value, low, high


def curve_ci(
    curves: np.ndarray,
    statistic: Callable[..., np.ndarray] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise ``statistic`` of ``curves [runs, points]`` with bootstrap bands.

    Whole curves are resampled (one run index per slot, shared by every point), so the
    band reflects run-to-run variation rather than independent noise at each point.
    ``statistic`` must accept ``axis=``. Returns ``(value, low, high)``, each ``[points]``.
    """
    c = np.asarray(curves, dtype=float)
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"curves must be [runs, points] with runs > 0, got shape {c.shape}")
    runs = c.shape[0]
    value = np.asarray(statistic(c, axis=0), dtype=float)
    gen = np.random.default_rng(rng)
    chunk = _chunk_size(c)
    # Work on [points, k, runs] so the statistic reduces the contiguous last axis.
    by_point = np.ascontiguousarray(c.T)
    parts = []
    for start in range(0, reps, chunk):
        idx = gen.integers(0, runs, size=(min(chunk, reps - start), runs))
        parts.append(np.asarray(statistic(by_point[:, idx], axis=-1), dtype=float).T)
    low, high = _percentiles(np.concatenate(parts), confidence)
    return value, low, high


def ks_distance(counts_a: Sequence[float], counts_b: Sequence[float]) -> float:
    """Kolmogorov–Smirnov distance between two histograms over the same bins 0, 1, 2, ...

    ``counts_a[k]`` is how often value ``k`` occurred (e.g. a run's ``staleness_histogram``);
    the histograms may differ in length (missing bins are empty). Returns
    max_k |CDF_a(k) − CDF_b(k)|, in [0, 1]: 0 for the same distribution, 1 when they
    do not overlap. Counts are normalised, so runs of different lengths compare.
    """
    bins = max(len(counts_a), len(counts_b))
    cdfs = []
    for counts in (counts_a, counts_b):
        a = np.zeros(bins)
        a[: len(counts)] = np.asarray(counts, dtype=float)
        total = a.sum()
        if total <= 0 or (a < 0).any():
            raise ValueError(f"a histogram needs counts >= 0 and a positive total: {counts}")
        cdfs.append(np.cumsum(a) / total)
    return float(np.max(np.abs(cdfs[0] - cdfs[1])))


# --------------------------------------------------------------------------- steps to solve


class SolveCurve(NamedTuple):
    """Kaplan–Meier estimate of the fraction of runs solved by each env step count.

    ``steps`` are the distinct step counts at which a run solved or stopped unsolved (was
    censored), ascending; ``fraction`` is the estimated fraction solved at or before each,
    with its pointwise confidence band ``low``/``high``. ``median`` is the smallest step count
    by which at least half the runs are estimated to have solved, with its CI; a value or
    bound of ``inf`` reads "not reached".
    """

    steps: np.ndarray
    fraction: np.ndarray
    low: np.ndarray
    high: np.ndarray
    median: Estimate
    n_runs: int
    n_solved: int


def _first_reaching(steps: np.ndarray, curve: np.ndarray, level: float) -> float:
    """The first step at which ``curve`` reaches ``level``; inf when it never does."""
    at = np.flatnonzero(curve >= level)
    return float(steps[at[0]]) if at.size else math.inf


def solve_curve(
    steps: Sequence[float] | np.ndarray,
    solved: Sequence[bool] | np.ndarray,
    confidence: float = 0.95,
) -> SolveCurve:
    """Fraction of runs solved vs env steps, counting every run.

    ``steps[i]`` is run i's env steps to solve when ``solved[i]``, else the env steps it ran
    without solving (its budget when it ran to the end): the run is right-censored there.
    The curve is ``scipy.stats.ecdf`` of the censored sample, its band the log-log
    pointwise interval (Greenwood's variance). Where the band is undefined (no run left at
    risk) it is held at its last defined value and the upper bound at 1. The median's CI
    inverts the band (Brookmeyer and Crowley): from the first step where the upper band
    reaches 1/2 to the first where the lower band does, ``inf`` when it never does.
    """
    from scipy.stats import CensoredData, ecdf

    s = np.asarray(steps, dtype=float).reshape(-1)
    ok = np.asarray(solved, dtype=bool).reshape(-1)
    if s.size == 0 or s.shape != ok.shape:
        raise ValueError(
            f"steps and solved must be non-empty and of one length, got {s.size} and {ok.size}"
        )
    if not np.isfinite(s).all() or (s < 0).any():
        raise ValueError("steps must be finite and >= 0")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    cdf = ecdf(CensoredData(uncensored=s[ok], right=s[~ok])).cdf
    x, p = cdf.quantiles, cdf.probabilities
    if ok.any():
        with warnings.catch_warnings():
            # scipy warns where Greenwood's variance is undefined; handled below.
            warnings.simplefilter("ignore", RuntimeWarning)
            band = cdf.confidence_interval(confidence, method="log-log")
        low, high = band.low.probabilities.copy(), band.high.probabilities.copy()
        # Undefined where no run is left at risk or none solved yet: keep the last lower
        # bound (0 before any); fmax skips NaN, so an undefined upper bound is the estimate
        # itself (1 once every run solved), never below an earlier one.
        low = np.fmax.accumulate(np.where(np.isnan(low), 0.0, low))
        high = np.fmax.accumulate(np.fmax(high, p))
        low = np.fmin(low, p)
    else:
        low, high = np.zeros_like(p), np.full_like(p, np.nan)
    median = Estimate(
        _first_reaching(x, p, 0.5),
        _first_reaching(x, high, 0.5) if ok.any() else math.inf,
        _first_reaching(x, low, 0.5),
    )
    return SolveCurve(x, p, low, high, median, int(s.size), int(ok.sum()))


def median_steps_to_solve(
    steps: Sequence[float] | np.ndarray,
    solved: Sequence[bool] | np.ndarray,
    confidence: float = 0.95,
) -> Estimate:
    """Kaplan–Meier median env steps to solve with its CI; ``inf`` reads "not reached".

    Unsolved runs count, censored at the steps they ran (see
    [`solve_curve`][hybrid.stats.solve_curve]): fewer than half solving gives ``inf``, never
    a median of the few that solved.
    """
    return solve_curve(steps, solved, confidence).median


# --------------------------------------------------------------------------- across tasks


def normalize_scores(
    scores: np.ndarray | Sequence[float], random: float, reference: float
) -> np.ndarray:
    """``(score − random) / (reference − random)``: 0 at a random policy, 1 at the reference."""
    if not (math.isfinite(random) and math.isfinite(reference)) or random == reference:
        raise ValueError(
            f"random and reference scores must be finite and differ, got {random} and {reference}"
        )
    return (np.asarray(scores, dtype=float) - random) / (reference - random)


def _as_tasks(scores_by_task: Sequence[np.ndarray | Sequence[float]]) -> list[np.ndarray]:
    tasks = [np.asarray(t, dtype=float).reshape(-1) for t in scores_by_task]
    if not tasks or any(t.size == 0 for t in tasks):
        raise ValueError("scores_by_task must hold at least one task, each with at least one run")
    if not all(np.isfinite(t).all() for t in tasks):
        raise ValueError("scores_by_task must be finite")
    return tasks


def _task_resamples(
    tasks: list[np.ndarray], reps: int, rng: np.random.Generator
) -> Iterator[list[np.ndarray]]:
    """Chunks of resamples: per task ``[k, runs of that task]``, runs drawn within the task."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    chunk = max(1, _CHUNK_ELEMENTS // sum(t.size for t in tasks))
    done = 0
    while done < reps:
        k = min(chunk, reps - done)
        yield [t[rng.integers(0, t.size, size=(k, t.size))] for t in tasks]
        done += k


def _task_statistics(batch: list[np.ndarray], gamma: float) -> dict[str, np.ndarray]:
    """IQM over every run of every task, mean and median of the task means, optimality gap."""
    task_means = np.stack([t.mean(axis=-1) for t in batch], axis=-1)
    gaps = np.stack([np.maximum(gamma - t, 0.0).mean(axis=-1) for t in batch], axis=-1)
    return {
        "iqm": np.asarray(iqm(np.concatenate(batch, axis=-1), axis=-1)),
        "mean": task_means.mean(axis=-1),
        "median": np.median(task_means, axis=-1),
        "optimality_gap": gaps.mean(axis=-1),
    }


def aggregate_across_tasks(
    scores_by_task: Sequence[np.ndarray | Sequence[float]],
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
    *,
    gamma: float = 1.0,
) -> dict[str, Estimate]:
    """IQM, mean, median and optimality gap of normalized scores over tasks, with CIs.

    ``scores_by_task`` holds one array of run scores per task (normalized, e.g. by
    [`normalize_scores`][hybrid.stats.normalize_scores]); tasks may have different numbers of
    runs. The bootstrap resamples runs within each task (stratified), as rliable does. The
    IQM pools every run of every task; mean and median are of the per-task means; the
    optimality gap is the mean over tasks of how far runs fall short of ``gamma``. With the
    same number of runs per task these are rliable's four aggregates.
    """
    tasks = _as_tasks(scores_by_task)
    value = {k: float(v[0]) for k, v in _task_statistics([t[None] for t in tasks], gamma).items()}
    gen = np.random.default_rng(rng)
    samples: dict[str, list[np.ndarray]] = {k: [] for k in value}
    for batch in _task_resamples(tasks, reps, gen):
        for k, v in _task_statistics(batch, gamma).items():
            samples[k].append(v)
    out = {}
    for k, v in value.items():
        low, high = _percentiles(np.concatenate(samples[k]), confidence)
        out[k] = Estimate(v, float(low), float(high))
    return out


def _task_profile(batch: list[np.ndarray], taus: np.ndarray) -> np.ndarray:
    """Fraction of runs above each tau per task, averaged over tasks: ``[k, taus]``."""
    return np.mean([(t[..., None] > taus).mean(axis=1) for t in batch], axis=0)


def performance_profile_across_tasks(
    scores_by_task: Sequence[np.ndarray | Sequence[float]],
    taus: np.ndarray | Sequence[float],
    reps: int = 2000,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction of runs scoring above each tau (per task, averaged over tasks) with its band.

    Like [`performance_profile`][hybrid.stats.performance_profile] for tasks with different
    numbers of runs; the band is from the same task-stratified bootstrap.
    """
    tasks = _as_tasks(scores_by_task)
    t = np.atleast_1d(np.asarray(taus, dtype=float))
    value = _task_profile([x[None] for x in tasks], t)[0]
    gen = np.random.default_rng(rng)
    samples = np.concatenate([_task_profile(b, t) for b in _task_resamples(tasks, reps, gen)])
    low, high = _percentiles(samples, confidence)
    return value, low, high
