"""hybrid.stats against hand-computed references: CI levels, chunked bootstraps, curve bands,
Kaplan-Meier steps to solve and the across-tasks aggregate."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hybrid.stats as stats
from hybrid.stats import (
    aggregate_across_tasks,
    curve_ci,
    iqm,
    median_steps_to_solve,
    normalize_scores,
    performance_profile_across_tasks,
    probability_of_improvement,
    solve_curve,
    stratified_bootstrap_ci,
)

SCORES = np.array([[3.0, 10.0], [1.0, 14.0], [4.0, 11.0], [1.5, 19.0], [5.0, 12.0], [9.0, 16.0]])


def _percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile bootstrap interval written out: the (1-c)/2 and (1+c)/2 quantiles."""
    lo = 100 * (1 - confidence) / 2
    hi = 100 * (1 + confidence) / 2
    return float(np.percentile(samples, lo)), float(np.percentile(samples, hi))


def _by_hand(scores: np.ndarray, reps: int, seed: int, chunks: list[int]) -> np.ndarray:
    """Bootstrap means drawn as documented: per chunk of k reps, one run index per
    (rep, run slot, task), runs resampled within each task."""
    gen = np.random.default_rng(seed)
    runs, tasks = scores.shape
    out = []
    for k in chunks:
        idx = gen.integers(0, runs, size=(k, runs, tasks))
        out += [scores[i, np.arange(tasks)].mean() for i in idx]
    assert len(out) == reps
    return np.array(out)


@pytest.mark.parametrize("confidence", [0.95, 0.8, 0.5])
def test_ci_level_matches_a_hand_computed_percentile_bootstrap(confidence: float) -> None:
    samples = _by_hand(SCORES, 400, 7, [400])
    expected = _percentile_interval(samples, confidence)
    got = stratified_bootstrap_ci(SCORES, np.mean, reps=400, confidence=confidence, rng=7)
    assert got == pytest.approx(expected)
    # The 95% interval is the 2.5th to 97.5th percentile: about 95% of the resampled means
    # fall inside it (an 80% interval would hold about 80%).
    inside = np.mean((samples >= got[0]) & (samples <= got[1]))
    assert inside == pytest.approx(confidence, abs=0.04)  # ties: the means are discrete


def test_many_unequal_chunks_draw_every_rep_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 elements per resample and room for 36: chunks of 3 reps; 10 reps = 3 + 3 + 3 + 1.
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 36)
    calls = []

    def mean_counting(sample: np.ndarray) -> float:
        calls.append(1)
        if len(calls) > 10:  # a loop that never ends fails here rather than hanging
            raise AssertionError("the bootstrap drew more resamples than reps")
        return float(sample.mean())

    got = stratified_bootstrap_ci(SCORES, mean_counting, reps=10, confidence=0.9, rng=3)
    assert len(calls) == 10
    expected = _percentile_interval(_by_hand(SCORES, 10, 3, [3, 3, 3, 1]), 0.9)
    assert got == pytest.approx(expected)
    vectorized = stratified_bootstrap_ci(
        SCORES,
        lambda b: b.reshape(len(b), -1).mean(axis=-1),
        reps=10,
        confidence=0.9,
        rng=3,
        vectorized=True,
    )
    assert vectorized == pytest.approx(expected)


def test_probability_of_improvement_chunks_x_and_y_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([1.0, 4.0, 2.0, 8.0, 5.0])
    y = np.array([3.0, 0.5, 6.0])
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 16)  # 8 elements per pair: chunks of 2
    got = probability_of_improvement(x, y, reps=7, confidence=0.9, rng=11)
    gen = np.random.default_rng(11)
    samples = []
    for k in (2, 2, 2, 1):  # x's chunk, then y's, from one stream
        xi = x[gen.integers(0, 5, size=(k, 5))]
        yi = y[gen.integers(0, 3, size=(k, 3))]
        for a, b in zip(xi, yi, strict=True):
            wins = (a[:, None] > b[None, :]).mean() + 0.5 * (a[:, None] == b[None, :]).mean()
            samples.append(wins)
    low, high = _percentile_interval(np.array(samples), 0.9)
    assert (got.low, got.high) == pytest.approx((low, high))
    # wins of 1, 4, 2, 8, 5 over (3, 0.5, 6): 1 + 2 + 1 + 3 + 2 of 15 pairs
    assert got.value == pytest.approx(9 / 15)


def test_curve_ci_band_and_axis_against_a_hand_computed_bootstrap() -> None:
    # 5 runs x 3 points; points differ in spread, runs differ by a lot.
    curves = np.array(
        [[0.0, 10.0, 5.0], [1.0, 30.0, 5.0], [2.0, 20.0, 5.0], [3.0, 60.0, 5.0], [4.0, 0.0, 5.0]]
    )
    value, low, high = curve_ci(curves, np.mean, reps=300, confidence=0.9, rng=5)
    np.testing.assert_allclose(value, [2.0, 24.0, 5.0])  # per point: mean over runs
    gen = np.random.default_rng(5)
    idx = gen.integers(0, 5, size=(300, 5))  # one run index per slot, shared by every point
    means = curves[idx].mean(axis=1)  # [reps, points]
    lo_ref, hi_ref = np.percentile(means, [5.0, 95.0], axis=0)
    np.testing.assert_allclose(low, lo_ref)
    np.testing.assert_allclose(high, hi_ref)
    # A real band where runs differ, none where they agree.
    assert low[0] < value[0] < high[0] and low[1] < value[1] < high[1]
    assert low[2] == high[2] == 5.0
    assert high[1] - low[1] > 10 * (high[0] - low[0])


def test_iqm_returns_a_python_float_for_one_value() -> None:
    for x, axis in ((np.arange(8.0), None), (np.arange(8.0), 0), ([[1.0, 2.0, 3.0]], None)):
        out = iqm(np.asarray(x), axis=axis)
        assert type(out) is float
    per_column = iqm(np.arange(12.0).reshape(4, 3), axis=0)
    assert isinstance(per_column, np.ndarray) and per_column.shape == (3,)


# ----------------------------------------------------------------------- steps to solve


def test_kaplan_meier_counts_unsolved_runs() -> None:
    # 3 of 5 solved; 2 ran to their 5,000-step budget unsolved.
    cv = solve_curve([1000, 2000, 3000, 5000, 5000], [True, True, True, False, False])
    np.testing.assert_allclose(cv.steps, [1000, 2000, 3000, 5000])
    np.testing.assert_allclose(cv.fraction, [0.2, 0.4, 0.6, 0.6])
    assert (cv.n_runs, cv.n_solved) == (5, 3)
    assert cv.median.value == 3000.0  # the third of five, not the median of the solved three
    assert np.all(cv.low <= cv.fraction) and np.all(cv.fraction <= cv.high)
    # Censored before later solves: after 1,000 (4/5 unsolved) one run stops unsolved at
    # 1,500, so each later solve takes a third, a half, all of what is left.
    early = solve_curve([1000, 1500, 2000, 3000, 4000], [True, False, True, True, True])
    np.testing.assert_allclose(early.fraction, [0.2, 0.2, 1 - 0.8 * 2 / 3, 1 - 0.8 / 3, 1.0])


def test_median_not_reached_when_fewer_than_half_solve() -> None:
    one_early = median_steps_to_solve([1000, 50000, 50000, 50000, 50000], [1, 0, 0, 0, 0])
    assert one_early.value == math.inf and one_early.high == math.inf
    assert one_early.low == 1000.0  # the data allow a median as low as the one solve
    assert median_steps_to_solve([500, 800], [False, False]).value == math.inf


def test_median_ci_of_many_runs_is_finite_and_holds_the_median() -> None:
    steps = np.arange(1, 21) * 1000.0
    e = median_steps_to_solve(steps, np.ones(20, bool))
    assert e.value == 10000.0
    assert 1000.0 < e.low < e.value < e.high < 20000.0
    # A single run gives no zero-width interval.
    single = median_steps_to_solve([3000], [True])
    assert single.value == 3000.0 and single.high == math.inf


def test_solve_curve_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="one length"):
        solve_curve([1.0, 2.0], [True])
    with pytest.raises(ValueError, match="finite"):
        solve_curve([float("inf")], [True])
    with pytest.raises(ValueError, match="confidence"):
        solve_curve([1.0], [True], confidence=1.5)


# ------------------------------------------------------------------------ across tasks


def test_normalize_scores() -> None:
    np.testing.assert_allclose(normalize_scores([22.0, 500.0, 261.0], 22.0, 500.0), [0, 1, 0.5])
    with pytest.raises(ValueError, match="differ"):
        normalize_scores([1.0], 5.0, 5.0)


def test_aggregate_across_tasks_hand_values() -> None:
    a = [0.0, 0.4, 0.8, 1.2]  # task mean 0.6; shortfall below 1: 1, 0.6, 0.2, 0 -> 0.45
    b = [0.1, 0.3]  # task mean 0.2; shortfall 0.9, 0.7 -> 0.8
    agg = aggregate_across_tasks([a, b], reps=300, rng=0)
    # IQM pools the six runs: sorted 0, .1, .3, .4, .8, 1.2 -> drop 1 each end -> .4
    assert agg["iqm"].value == pytest.approx(0.4)
    assert agg["mean"].value == pytest.approx(0.4)
    assert agg["median"].value == pytest.approx(0.4)
    assert agg["optimality_gap"].value == pytest.approx((0.45 + 0.8) / 2)
    for e in agg.values():
        assert e.low <= e.value <= e.high


def test_across_tasks_bootstrap_is_stratified_by_task() -> None:
    # Each task's runs agree, so resampling within tasks changes nothing; pooling would.
    agg = aggregate_across_tasks([[0.0, 0.0, 0.0], [1.0, 1.0]], reps=200, rng=1)
    assert (agg["mean"].low, agg["mean"].high) == (0.5, 0.5)
    frac, low, high = performance_profile_across_tasks(
        [[0.0, 0.0, 0.0], [1.0, 1.0]], [0.5], reps=200, rng=1
    )
    assert frac[0] == low[0] == high[0] == 0.5


def test_aggregate_across_tasks_refuses_empty_or_non_finite() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        aggregate_across_tasks([[1.0], []])
    with pytest.raises(ValueError, match="finite"):
        aggregate_across_tasks([[1.0, float("nan")]])


def test_iqm_and_aggregate_leave_the_callers_scores_in_their_order() -> None:
    """iqm sorts a copy. It once sorted a float64 caller's array in place (asarray and reshape
    return views): the runs lost their order, and aggregate's bootstrap then resampled the
    sorted pool, mixing the tasks it is meant to keep apart."""
    runs = np.array([3.0, 1.0, 2.0, 5.0])
    assert iqm(runs) == 2.5
    np.testing.assert_array_equal(runs, [3.0, 1.0, 2.0, 5.0])
    one_point = np.array([[3.0], [1.0], [2.0]])  # a [runs, 1] curve: its transpose is a view
    curve_ci(one_point, reps=5, rng=0)
    np.testing.assert_array_equal(one_point, [[3.0], [1.0], [2.0]])
    # task 0 scores 0..2, task 1 10..12: resampled within tasks, the mean stays in [5, 7]
    two_tasks = np.array([[0.0, 12.0], [1.0, 10.0], [2.0, 11.0]])
    low, high = stats.aggregate(two_tasks, reps=300, rng=0)["mean_ci"]
    assert 5.0 <= low <= high <= 7.0
    np.testing.assert_array_equal(two_tasks, [[0.0, 12.0], [1.0, 10.0], [2.0, 11.0]])
