"""hybrid.stats against hand-computed references: CI levels, chunked bootstraps, curve bands,
Kaplan-Meier steps to solve and the across-tasks aggregate."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import hybrid.stats as stats
from hybrid.stats import (
    aggregate,
    aggregate_across_tasks,
    curve_ci,
    iqm,
    median_steps_to_solve,
    normalize_scores,
    performance_profile,
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


# ------------------------------------------------------- input checks, defaults, precision


def test_bad_score_arrays_are_one_clear_error() -> None:
    with pytest.raises(ValueError) as err:
        stratified_bootstrap_ci(np.zeros((2, 2, 2)), np.mean)
    assert str(err.value) == "scores must be [runs, tasks] or [runs], got shape (2, 2, 2)"
    for empty in (np.zeros((0, 2)), np.zeros((3, 0)), np.zeros(0)):
        with pytest.raises(ValueError) as err:
            stratified_bootstrap_ci(empty, np.mean)
        assert str(err.value) == "scores must hold at least one run and one task"
    with pytest.raises(ValueError) as err:
        probability_of_improvement(np.ones((3, 2)), np.ones((4, 1)))
    assert str(err.value) == "x and y must cover the same tasks: 2 vs 1"


@pytest.mark.parametrize("reps", [0, -3])
def test_fewer_than_one_rep_is_refused(reps: int) -> None:
    message = f"reps must be >= 1, got {reps}"
    with pytest.raises(ValueError) as err:
        stratified_bootstrap_ci(SCORES, np.mean, reps=reps)
    assert str(err.value) == message
    with pytest.raises(ValueError) as err:
        aggregate_across_tasks([[1.0, 2.0]], reps=reps)
    assert str(err.value) == message


def test_one_rep_is_one_resample() -> None:
    # a single resample: the interval collapses onto that resample's statistic
    low, high = stratified_bootstrap_ci(SCORES, np.mean, reps=1, rng=2)
    assert low == high == pytest.approx(float(_by_hand(SCORES, 1, 2, [1])[0]))
    across = aggregate_across_tasks([[1.0, 2.0, 4.0]], reps=1, rng=2)["mean"]
    pick = np.array([1.0, 2.0, 4.0])[np.random.default_rng(2).integers(0, 3, size=(1, 3))]
    assert across.low == across.high == pytest.approx(pick.mean())


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.2])
def test_a_confidence_outside_the_open_unit_interval_is_refused(confidence: float) -> None:
    message = f"confidence must lie in (0, 1), got {confidence}"
    for call in (
        lambda: stratified_bootstrap_ci(SCORES, np.mean, reps=5, confidence=confidence),
        lambda: solve_curve([1.0, 2.0], [True, True], confidence=confidence),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message


def test_the_default_is_a_95_percent_interval_from_2000_resamples() -> None:
    """Each function's defaults against the same call spelled out (continuous data, so that
    2001 resamples or another level would move the interval)."""
    gen = np.random.default_rng(9)
    scores = gen.normal(size=(8, 2))
    x, y = gen.normal(size=(12, 2)), gen.normal(size=(10, 2))
    curves = gen.normal(size=(8, 3))
    tasks = [gen.normal(size=7), gen.normal(size=9)]
    many = np.random.default_rng(5).normal(size=(40, 2))  # fractions are coarse: many runs
    spelled = {"reps": 2000, "confidence": 0.95, "rng": 1}
    calls = {
        "ci": lambda **kw: stratified_bootstrap_ci(scores, np.mean, **kw),
        "aggregate": lambda **kw: aggregate(scores, **kw),
        "poi": lambda **kw: tuple(probability_of_improvement(x, y, **kw)),
        "profile": lambda **kw: performance_profile(many, [0.0, 0.5], ci=True, **kw),
        "curve": lambda **kw: curve_ci(curves, **kw),
        "across": lambda **kw: aggregate_across_tasks(tasks, **kw),
        "profile_across": lambda **kw: performance_profile_across_tasks(tasks, [0.0], **kw),
    }
    for name, call in calls.items():
        default, explicit = repr(call(rng=1)), repr(call(**spelled))
        assert default == explicit, name
        assert repr(call(**{**spelled, "reps": 2001})) != explicit, name
    plain = performance_profile(scores, [0.0])
    assert isinstance(plain, np.ndarray)  # ci=False by default: the fraction alone


def test_float32_scores_are_summarised_in_double_precision() -> None:
    """Scores read as float32 give the statistics of their float64 values, not float32
    arithmetic's rounding of them."""
    gen = np.random.default_rng(4)
    x64 = gen.normal(size=(7, 3)).astype(np.float32).astype(np.float64)
    x32 = x64.astype(np.float32)
    assert iqm(x32) == iqm(x64) and type(iqm(x32)) is float
    np.testing.assert_array_equal(iqm(x32, axis=0), iqm(x64, axis=0))
    assert stratified_bootstrap_ci(x32, np.mean, reps=50, rng=0) == stratified_bootstrap_ci(
        x64, np.mean, reps=50, rng=0
    )
    assert aggregate(x32, reps=50, rng=0) == aggregate(x64, reps=50, rng=0)
    for a, b in zip(
        curve_ci(x32, np.mean, 50, rng=0), curve_ci(x64, np.mean, 50, rng=0), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    across = aggregate_across_tasks(list(x32.T), reps=50, rng=0)
    assert across == aggregate_across_tasks(list(x64.T), reps=50, rng=0)
    normalized = normalize_scores(x32[:, 0], 0.1, 0.7)
    assert normalized.dtype == np.float64
    np.testing.assert_array_equal(normalized, (x64[:, 0] - 0.1) / 0.6)


def test_aggregate_intervals_are_percentiles_of_each_pooled_statistic() -> None:
    """IQM, mean and median of every resample, all runs and tasks pooled, drawn one after the
    other from the one stream."""
    scores = SCORES.copy()
    agg = aggregate(scores, reps=200, confidence=0.9, rng=4)
    np.testing.assert_array_equal(scores, SCORES)  # the caller's array is left as it was
    gen = np.random.default_rng(4)
    assert agg["n"] == 6
    for name, fn in (("iqm", iqm), ("mean", np.mean), ("median", np.median)):
        idx = gen.integers(0, 6, size=(200, 6, 2))
        samples = [fn(SCORES[i, np.arange(2)].reshape(-1)) for i in idx]
        assert agg[f"{name}_ci"] == pytest.approx(_percentile_interval(np.array(samples), 0.9))
        assert agg[name] == pytest.approx(fn(SCORES.reshape(-1)))


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
    low, high = aggregate(two_tasks, reps=300, rng=0)["mean_ci"]
    assert 5.0 <= low <= high <= 7.0
    np.testing.assert_array_equal(two_tasks, [[0.0, 12.0], [1.0, 10.0], [2.0, 11.0]])


@pytest.mark.parametrize(("limit", "chunks"), [(8, [1] * 5), (3, [1] * 5), (24, [3, 2])])
def test_probability_of_improvement_chunks_of_one_and_more(
    monkeypatch: pytest.MonkeyPatch, limit: int, chunks: list[int]
) -> None:
    """8 elements per pair of resamples: a limit of 8 (or less: at least one) draws x and y
    one rep at a time, 24 three at a time."""
    x = np.array([1.0, 4.0, 2.0, 8.0, 5.0])
    y = np.array([3.0, 0.5, 6.0])
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", limit)
    got = probability_of_improvement(x, y, reps=5, confidence=0.8, rng=13)
    gen = np.random.default_rng(13)
    samples = []
    for k in chunks:
        xi = x[gen.integers(0, 5, size=(k, 5))]
        yi = y[gen.integers(0, 3, size=(k, 3))]
        for a, b in zip(xi, yi, strict=True):
            wins = (a[:, None] > b[None, :]).mean() + 0.5 * (a[:, None] == b[None, :]).mean()
            samples.append(wins)
    assert (got.low, got.high) == pytest.approx(_percentile_interval(np.array(samples), 0.8))


def test_performance_profile_band_is_a_hand_computed_bootstrap() -> None:
    scores = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0], [4.0, 8.0], [5.0, 9.0]])
    taus = np.array([2.0, 5.0, 7.5])
    frac, low, high = performance_profile(scores, taus, ci=True, reps=300, confidence=0.9, rng=6)
    # strictly above: tau 2 -> 3/5 and 5/5, tau 5 -> 0/5 and 4/5, tau 7.5 -> 0 and 2/5
    np.testing.assert_allclose(frac, [0.8, 0.4, 0.2])
    gen = np.random.default_rng(6)
    idx = gen.integers(0, 5, size=(300, 5, 2))
    resampled = scores[idx, np.arange(2)]  # [reps, runs, tasks]
    fractions = (resampled[..., None] > taus).mean(axis=1).mean(axis=1)  # [reps, taus]
    lo_ref, hi_ref = np.percentile(fractions, [5.0, 95.0], axis=0)
    np.testing.assert_allclose(low, lo_ref)
    np.testing.assert_allclose(high, hi_ref)


def test_performance_profile_takes_fractions_per_task_then_averages_over_tasks() -> None:
    """As documented, and bit for bit: averaging over tasks first rounds differently here."""
    scores = np.array(
        [
            [2.0, 1.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 3.0, 2.0, 3.0],
            [2.0, 2.0, 3.0, 2.0, 2.0],
            [2.0, 2.0, 3.0, 1.0, 3.0],
            [2.0, 0.0, 1.0, 3.0, 2.0],
            [0.0, 3.0, 2.0, 3.0, 0.0],
            [0.0, 3.0, 0.0, 2.0, 0.0],
        ]
    )
    taus = np.array([0.5, 1.5, 2.5])
    per_task = (scores[..., None] > taus).mean(axis=0)  # [tasks, taus]
    expected = per_task.mean(axis=0)
    assert not np.array_equal(expected, (scores[..., None] > taus).mean(axis=1).mean(axis=0))
    np.testing.assert_array_equal(performance_profile(scores, taus), expected)


def test_curve_ci_over_several_chunks_and_its_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    curves = np.array(
        [[0.0, 10.0, 5.0], [1.0, 30.0, 5.0], [2.0, 20.0, 5.0], [3.0, 60.0, 5.0], [4.0, 0.0, 5.0]]
    )
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 45)  # 15 elements a resample: 3 per chunk
    calls = []

    def mean(a: np.ndarray, axis: int) -> np.ndarray:
        calls.append(a.shape)
        return np.mean(a, axis=axis)

    _, low, high = curve_ci(curves, mean, reps=10, confidence=0.8, rng=8)
    assert calls[1:] == [(3, 3, 5)] * 3 + [(3, 1, 5)]  # [points, k, runs]: 3 + 3 + 3 + 1
    idx = np.random.default_rng(8).integers(0, 5, size=(10, 5))
    lo_ref, hi_ref = np.percentile(curves[idx].mean(axis=1), [10.0, 90.0], axis=0)
    np.testing.assert_allclose(low, lo_ref)
    np.testing.assert_allclose(high, hi_ref)
    # a statistic that counts still gives float curves
    counted = curve_ci(curves, lambda a, axis: (a > 2.5).sum(axis=axis), reps=10, rng=8)
    assert counted[0].dtype == np.float64
    np.testing.assert_array_equal(counted[0], [2.0, 4.0, 5.0])
    for bad in (np.zeros(5), np.zeros((0, 3)), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError) as err:
            curve_ci(bad)
        assert str(err.value) == (
            f"curves must be [runs, points] with runs > 0, got shape {bad.shape}"
        )


def _across_by_hand(
    tasks: list[np.ndarray], chunks: list[int], seed: int, gamma: float = 1.0
) -> dict[str, np.ndarray]:
    """Per chunk of k reps and per task, k resamples of that task's runs; the four statistics
    of each rep as documented."""
    gen = np.random.default_rng(seed)
    out: dict[str, list[float]] = {"iqm": [], "mean": [], "median": [], "optimality_gap": []}
    for k in chunks:
        drawn = [t[gen.integers(0, t.size, size=(k, t.size))] for t in tasks]
        for rep in range(k):
            runs = [d[rep] for d in drawn]
            means = [r.mean() for r in runs]
            out["iqm"].append(iqm(np.concatenate(runs)))
            out["mean"].append(np.mean(means))
            out["median"].append(np.median(means))
            out["optimality_gap"].append(np.mean([np.maximum(gamma - r, 0).mean() for r in runs]))
    return {name: np.array(v) for name, v in out.items()}


@pytest.mark.parametrize(("limit", "chunks"), [(None, [40]), (8, [1] * 40), (24, [3] * 13 + [1])])
def test_across_tasks_intervals_against_a_hand_computed_bootstrap(
    monkeypatch: pytest.MonkeyPatch, limit: int | None, chunks: list[int]
) -> None:
    tasks = [np.array([0.1, 0.5, 0.9, 1.3]), np.array([0.2, 0.2, 0.8]), np.array([1.5])]
    if limit is not None:  # 8 runs in all: 8 or less draws one rep a chunk, 24 three
        monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", limit)
    agg = aggregate_across_tasks(tasks, reps=40, confidence=0.8, rng=3, gamma=1.2)
    samples = _across_by_hand(tasks, chunks, 3, gamma=1.2)
    for name, estimate in agg.items():
        assert (estimate.low, estimate.high) == pytest.approx(
            _percentile_interval(samples[name], 0.8)
        ), name
    # the one-run task counts like any: its gap below 1.2 is 0, the others' 0.525 and 0.8
    assert agg["optimality_gap"].value == pytest.approx((0.525 + 0.8 + 0.0) / 3)


def test_profile_across_tasks_band_against_a_hand_computed_bootstrap() -> None:
    tasks = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 5.0])]
    taus = [2.0, 3.5]  # 2.0 equals a score of each task: strictly above leaves it out
    frac, low, high = performance_profile_across_tasks(tasks, taus, reps=60, confidence=0.8, rng=5)
    np.testing.assert_allclose(frac, [(2 / 4 + 1 / 2) / 2, (1 / 4 + 1 / 2) / 2])
    gen = np.random.default_rng(5)
    drawn = [t[gen.integers(0, t.size, size=(60, t.size))] for t in tasks]
    fractions = np.mean([(d[..., None] > np.array(taus)).mean(axis=1) for d in drawn], axis=0)
    lo_ref, hi_ref = np.percentile(fractions, [10.0, 90.0], axis=0)
    np.testing.assert_allclose(low, lo_ref)
    np.testing.assert_allclose(high, hi_ref)


def test_across_tasks_refusals_are_one_clear_error() -> None:
    for bad in ([], [[1.0], []]):
        with pytest.raises(ValueError) as err:
            aggregate_across_tasks(bad)
        assert str(err.value) == (
            "scores_by_task must hold at least one task, each with at least one run"
        )
    with pytest.raises(ValueError) as err:
        performance_profile_across_tasks([[1.0], [float("inf")]], [0.0])
    assert str(err.value) == "scores_by_task must be finite"


@pytest.mark.parametrize(
    ("random", "reference"), [(math.inf, 1.0), (0.0, math.inf), (math.nan, 1.0), (0.0, -math.inf)]
)
def test_normalize_scores_refuses_non_finite_anchors(random: float, reference: float) -> None:
    with pytest.raises(ValueError) as err:
        normalize_scores([1.0], random, reference)
    assert str(err.value) == (
        f"random and reference scores must be finite and differ, got {random} and {reference}"
    )


def test_ks_distance_refuses_empty_or_negative_histograms() -> None:
    from hybrid.stats import ks_distance

    for bad in ([0, 0], [2, -1, 3], []):
        with pytest.raises(ValueError) as err:
            ks_distance(bad, [1])
        assert str(err.value) == f"a histogram needs counts >= 0 and a positive total: {bad}"
    assert ks_distance([1], [1]) == 0.0  # one count is a histogram


# ------------------------------------------------------------- steps to solve, continued


def test_solve_curve_band_is_scipys_log_log_interval_held_where_undefined() -> None:
    """The first run stops unsolved (nothing solved yet: the band is undefined there) and the
    last solves (nobody left at risk): the documented fill on scipy's log-log band."""
    from scipy.stats import CensoredData, ecdf

    steps = np.array([500.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0])
    solved = np.array([False, True, True, False, True, True])
    cv = solve_curve(steps, solved, confidence=0.9)
    cdf = ecdf(CensoredData(uncensored=steps[solved], right=steps[~solved])).cdf
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        band = cdf.confidence_interval(0.9, method="log-log")
    low, high = band.low.probabilities, band.high.probabilities
    assert np.isnan(low[0]) and np.isnan(high[-1])  # what the fill is for
    np.testing.assert_allclose(cv.fraction, cdf.probabilities)
    assert cv.low[0] == 0.0 and cv.fraction[-1] == cv.high[-1] == 1.0
    defined = ~np.isnan(low) & ~np.isnan(high)
    np.testing.assert_allclose(cv.low[defined], np.minimum(low, cv.fraction)[defined])
    np.testing.assert_allclose(cv.high[defined], np.maximum.accumulate(high[defined]))
    assert np.all(np.diff(cv.low) >= 0) and np.all(np.diff(cv.high) >= 0)
    # a narrower level narrows the band and the median's interval
    wide = median_steps_to_solve(steps, solved, confidence=0.99)
    narrow = median_steps_to_solve(steps, solved, confidence=0.5)
    assert narrow == solve_curve(steps, solved, confidence=0.5).median
    assert (wide.low, wide.high) != (narrow.low, narrow.high)
    assert wide.low <= narrow.low <= narrow.value <= narrow.high <= wide.high


def test_solve_curve_when_no_run_solved_and_its_step_checks() -> None:
    cv = solve_curve([500.0, 800.0], [False, False])
    assert cv.n_solved == 0 and np.all(cv.fraction == 0.0) and np.all(cv.low == 0.0)
    assert np.all(np.isnan(cv.high))  # no band without a solve
    assert cv.median == (math.inf, math.inf, math.inf)
    assert solve_curve([0.0, 10.0], [True, False]).median.value == 0.0  # zero steps is fine
    for bad in ([-1.0, 2.0], [1.0, math.nan]):
        with pytest.raises(ValueError) as err:
            solve_curve(bad, [True, True])
        assert str(err.value) == "steps must be finite and >= 0"
    for steps, solved in (([], []), ([1.0, 2.0], [True])):
        with pytest.raises(ValueError) as err:
            solve_curve(steps, solved)
        assert str(err.value) == (
            f"steps and solved must be non-empty and of one length, got {len(steps)} and "
            f"{len(solved)}"
        )


def test_a_task_given_as_a_column_of_runs_is_read_as_its_runs() -> None:
    """Each task's scores are flattened: a [runs, 1] column (one score per run, as a frame's
    column comes) counts as those runs, not as rows to resample whole."""
    flat = [np.array([0.1, 0.5, 0.9, 1.3]), np.array([0.2, 0.4])]
    column = [flat[0][:, None], flat[1]]
    assert aggregate_across_tasks(column, reps=50, rng=1) == aggregate_across_tasks(
        flat, reps=50, rng=1
    )
    for a, b in zip(
        performance_profile_across_tasks(column, [0.3], reps=50, rng=1),
        performance_profile_across_tasks(flat, [0.3], reps=50, rng=1),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_steps_given_as_a_column_are_read_as_runs() -> None:
    flat = solve_curve([1000.0, 2000.0, 3000.0], [True, True, False])
    column = solve_curve(np.array([[1000.0], [2000.0], [3000.0]]), [True, True, False])
    both = solve_curve(np.array([[1000.0], [2000.0], [3000.0]]), np.array([[1], [1], [0]]))
    for curve in (column, both):  # a column of outcomes too, as a frame's column gives it
        np.testing.assert_array_equal(curve.steps, flat.steps)
        np.testing.assert_array_equal(curve.fraction, flat.fraction)
        assert curve.median == flat.median and curve.n_runs == 3 and curve.n_solved == 2
