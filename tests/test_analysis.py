"""Tests for hybrid.stats (against hand-computed values) and hybrid.analysis: compare, frames."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import trim_mean

from hybrid.analysis import (
    AnalysisWarning,
    CompareError,
    Comparison,
    compare,
    frame,
    load_run,
    load_runs,
    read_jsonl,
)
from hybrid.stats import (
    aggregate,
    curve_ci,
    iqm,
    performance_profile,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

# ----------------------------------------------------------------------------- stats


def test_iqm_hand_values() -> None:
    # n=8: drop 2 from each end -> mean(3, 4, 5, 6) = 4.5
    assert iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)
    # n=5: int(5/4) = 1 off each end -> mean(20, 30, 40) = 30, the outlier 1000 is ignored
    assert iqm(np.array([10.0, 20.0, 30.0, 40.0, 1000.0])) == pytest.approx(30.0)
    # n=3: nothing trimmed -> plain mean
    assert iqm(np.array([1.0, 2.0, 6.0])) == pytest.approx(3.0)
    # Per column: [1,2,3,100] -> mean(2,3) = 2.5; [0,0,4,4] -> mean(0,4) = 2
    x = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 4.0], [100.0, 4.0]])
    np.testing.assert_allclose(iqm(x, axis=0), [2.5, 2.0])


def test_iqm_matches_scipy_trim_mean() -> None:
    rng = np.random.default_rng(3)
    for n in range(1, 13):
        x = rng.normal(size=(n, 4, 3))
        for axis in (None, 0, 1, 2):
            np.testing.assert_allclose(iqm(x, axis=axis), trim_mean(x, 0.25, axis=axis))


def test_aggregate_hand_values_and_ci_contains_point() -> None:
    scores = np.array([10.0, 20.0, 30.0, 40.0, 1000.0])
    agg = aggregate(scores, rng=0)
    assert agg["n"] == 5
    assert agg["iqm"] == pytest.approx(30.0)
    assert agg["mean"] == pytest.approx(220.0)  # 1100 / 5
    assert agg["median"] == pytest.approx(30.0)
    for name in ("iqm", "mean", "median"):
        low, high = agg[f"{name}_ci"]
        assert low <= agg[name] <= high
    # The IQM interval stays clear of the outlier; the mean's does not.
    assert agg["iqm_ci"][1] < 1000.0
    assert agg["mean_ci"][1] > 400.0


def test_single_run_ci_is_the_point() -> None:
    agg = aggregate(np.array([7.0]), rng=0)
    for name in ("iqm", "mean", "median"):
        assert agg[name] == 7.0
        assert agg[f"{name}_ci"] == (7.0, 7.0)


def test_bootstrap_deterministic_with_fixed_rng() -> None:
    scores = np.random.default_rng(0).normal(size=(12, 3))
    a = stratified_bootstrap_ci(scores, np.mean, rng=42)
    b = stratified_bootstrap_ci(scores, np.mean, rng=np.random.default_rng(42))
    c = stratified_bootstrap_ci(scores, np.mean, rng=43)
    assert a == b
    assert a != c


def test_vectorized_and_plain_statistic_agree() -> None:
    scores = np.random.default_rng(1).normal(size=(9, 2))
    plain = stratified_bootstrap_ci(scores, lambda s: iqm(s), reps=300, rng=5)
    vec = stratified_bootstrap_ci(
        scores, lambda b: iqm(b.reshape(len(b), -1), axis=-1), reps=300, rng=5, vectorized=True
    )
    assert plain == pytest.approx(vec)


def test_ci_narrows_with_more_runs() -> None:
    rng = np.random.default_rng(0)
    widths = []
    for runs in (5, 50, 500):
        low, high = stratified_bootstrap_ci(rng.normal(size=(runs, 2)), iqm, reps=500, rng=1)
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]


def test_bootstrap_is_stratified_by_task() -> None:
    # Task 0 always scores 0, task 1 always 10. Resampling runs within each task keeps 4
    # values of each, so the pooled mean is exactly 5 every time; pooled resampling would not.
    scores = np.array([[0.0, 10.0]] * 4)
    assert stratified_bootstrap_ci(scores, np.mean, rng=0) == (5.0, 5.0)


def test_probability_of_improvement_hand_values() -> None:
    # x vs y pairs: 1>(0) -> 1 win; 2>(0) and ties with 2,2 -> 1 + 2*0.5; 3 beats all -> 3.
    # (1 + 2 + 3) / 9 = 2/3
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.0])
    est = probability_of_improvement(x, y, rng=0)
    assert est.value == pytest.approx(2 / 3)
    assert est.low <= est.value <= est.high
    assert probability_of_improvement(y, x, rng=0).value == pytest.approx(1 / 3)
    # Identical samples: all ties -> 0.5
    assert probability_of_improvement(x, x, rng=0).value == pytest.approx(0.5)
    # Averaged over tasks: task 0 x always wins (1), task 1 x always loses (0) -> 0.5
    xs = np.array([[5.0, 0.0], [6.0, 1.0]])
    ys = np.array([[1.0, 8.0], [2.0, 9.0], [3.0, 7.0]])
    assert probability_of_improvement(xs, ys, rng=0).value == pytest.approx(0.5)
    # Unequal sizes: 3 of the 4 x beat the single y of 2.5
    assert probability_of_improvement(
        np.array([1.0, 3.0, 4.0, 5.0]), np.array([2.5]), rng=0
    ).value == pytest.approx(0.75)


def test_performance_profile_hand_values() -> None:
    scores = np.arange(1.0, 9.0)  # 1..8
    # strictly above: tau=0 -> 8/8, tau=4 -> {5..8} 4/8, tau=8 -> none
    np.testing.assert_allclose(performance_profile(scores, [0.0, 4.0, 8.0]), [1.0, 0.5, 0.0])
    # Two tasks, averaged: task 0 {1,2,3,4} above 2.5 -> 1/2; task 1 {10,...} -> 1
    two = np.array([[1.0, 10.0], [2.0, 11.0], [3.0, 12.0], [4.0, 13.0]])
    np.testing.assert_allclose(performance_profile(two, [2.5]), [0.75])
    frac, low, high = performance_profile(scores, [0.0, 4.0, 8.0], ci=True, rng=0)
    assert np.all(low <= frac) and np.all(frac <= high)
    assert low[0] == high[0] == 1.0  # every resample is above 0


def test_curve_ci() -> None:
    curves = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [30.0, 40.0]])
    value, low, high = curve_ci(curves, rng=0)
    # n=4: drop 1 at each end per point -> mean(1, 2) = 1.5, mean(2, 3) = 2.5
    np.testing.assert_allclose(value, [1.5, 2.5])
    assert np.all(low <= value) and np.all(value <= high)
    one = curve_ci(curves[:1], rng=0)
    for a in one:
        np.testing.assert_allclose(a, curves[0])


# -------------------------------------------------------------------------- run dirs

SYNC_SCORES = [100.0, 200.0, 300.0, 400.0, 500.0]  # IQM = mean(200, 300, 400) = 300
ASYNC_SCORES = [10.0, 20.0, 30.0, 40.0, 1000.0]  # IQM = mean(20, 30, 40) = 30; mean 220
SYNC_SOLVE = [1000, 2000, 3000, None, None]  # 3/5 solved, median 2000
ASYNC_SOLVE = [500, 700, 900, 1100, 1300]  # 5/5 solved, median 900
STEPS = 5000


def make_run(
    root: Path,
    name: str,
    config: dict[str, Any],
    final: float | None,
    solve_at: int | None = None,
    staleness_hist: Sequence[int] = (10,),
    virtual: bool = False,
    evals: bool = True,
    finished: bool = True,
) -> Path:
    """Write a synthetic run dir whose eval return grows linearly to ``final``."""
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    lines = []
    for i, step in enumerate(range(0, STEPS + 1, 500)):
        wall = step / 500.0
        vt = step / 1000.0 if virtual else None
        lines.append(
            {
                "kind": "train",
                "env_steps": step,
                "updates": i,
                "wall_s": wall,
                "virtual_s": vt,
                "charts/episode_return": 1.0,
                "sched/staleness_mean": 0.5,
                "sched/staleness_max": 2,
                "perf/env_steps_per_s": 500.0,
            }
        )
        lines.append({"kind": "span", "name": "rollout", "wall_s": wall})
        if evals and step % 1000 == 0 and final is not None:
            ret = final * step / STEPS
            lines.append(
                {
                    "kind": "eval",
                    "env_steps": step,
                    "updates": i,
                    "wall_s": wall,
                    "virtual_s": vt,
                    "eval/return_mean": ret,
                    "eval/return_std": 1.0,
                }
            )
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if finished:
        summary = {
            "solved": solve_at is not None,
            "env_steps_to_solve": solve_at,
            "train_wall_s": STEPS / 500.0,
            "env_steps": STEPS,
            "updates": 10,
            "env_steps_per_s": 500.0 if not virtual else 1000.0,
            "staleness_mean": 0.0 if len(staleness_hist) == 1 else 0.7,
            "staleness_max": len(staleness_hist) - 1,
            "staleness_histogram": list(staleness_hist),
            "final_eval_return": float("nan") if final is None else final,
            "virtual_time_s": STEPS / 1000.0 if virtual else None,
            "final_params_sha256": "0" * 64,
        }
        (d / "summary.json").write_text(json.dumps(summary))
    return d


def make_runs(root: Path) -> list[Path]:
    """2 groups x 5 seeds: sync (wall time only) and async with staleness bound 4."""
    dirs = []
    for seed in range(5):
        cfg = {"env": "CartPole-v1", "scheduler": "sync", "runtime": "serial", "algo": "a2c"}
        cfg |= {"workers": 8, "seed": seed, "total_env_steps": STEPS, "staleness_bound": None}
        dirs.append(make_run(root, f"sync_{seed}", cfg, SYNC_SCORES[seed], SYNC_SOLVE[seed]))
    for seed in range(5):
        cfg = {"env": "CartPole-v1", "scheduler": "async", "runtime": "serial", "algo": "a2c"}
        cfg |= {"workers": 8, "seed": seed, "total_env_steps": STEPS, "staleness_bound": 4}
        # Four runs mostly fresh, one always 3 behind: seed-averaged histogram is
        # (4 * [0.5, 0.3, 0.2, 0] + [0, 0, 0, 1]) / 5 = [0.4, 0.24, 0.16, 0.2].
        hist = (5, 3, 2) if seed < 4 else (0, 0, 0, 10)
        dirs.append(
            make_run(
                root,
                f"async_{seed}",
                cfg,
                ASYNC_SCORES[seed],
                ASYNC_SOLVE[seed],
                hist,
                virtual=True,
            )
        )
    return dirs


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, Path, list[Path]]:
    root = tmp_path_factory.mktemp("runs")
    dirs = make_runs(root)
    out = root / "report"
    return compare(dirs, out, reps=500), out, dirs


EXPECTED_FILES = [
    f"{stem}.{ext}"
    for stem in (
        "curves_env_steps",
        "curves_time",
        "staleness",
        "steps_to_solve",
        "solved_fraction",
        "profile",
    )
    for ext in ("png", "pdf")
] + ["table.md", "table.tex", "results.json"]


def test_compare_writes_every_file(report: tuple[Comparison, Path, list[Path]]) -> None:
    comp, out, _ = report
    for name in EXPECTED_FILES:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
        assert comp.paths[name] == path
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if name.endswith(".pdf"):
            assert path.read_bytes()[:5] == b"%PDF-"
    assert (out / "table.md").read_text() == comp.to_markdown() == comp.table_md


def test_results_json_hand_values(report: tuple[Comparison, Path, list[Path]]) -> None:
    _, out, _ = report
    res = json.loads((out / "results.json").read_text())
    sync, asyn = res["groups"]["sync"], res["groups"]["async"]
    assert list(res["groups"]) == ["async", "sync"]
    assert sync["iqm"]["value"] == pytest.approx(300.0)
    assert asyn["iqm"]["value"] == pytest.approx(30.0)
    assert sync["iqm"]["value"] == pytest.approx(iqm(np.array(SYNC_SCORES)))
    assert asyn["mean"]["value"] == pytest.approx(220.0)
    for g in (sync, asyn):
        low, high = g["iqm"]["ci"]
        assert low <= g["iqm"]["value"] <= high
        assert g["n_runs"] == 5
    assert (sync["n_solved"], asyn["n_solved"]) == (3, 5)
    # Kaplan-Meier over every run: sync's two unsolved runs are censored at 5,000 steps, so
    # its median is the third of five (3,000), not the median of the three that solved.
    assert sync["median_steps_to_solve"]["value"] == pytest.approx(3000.0)
    assert sync["solved_only"]["steps_to_solve_median"]["value"] == pytest.approx(2000.0)
    assert asyn["median_steps_to_solve"]["value"] == pytest.approx(900.0)
    assert [r["steps"] for r in sync["runs"]] == [1000, 2000, 3000, STEPS, STEPS]
    assert sync["staleness_histogram"] == pytest.approx([1.0])
    assert asyn["staleness_histogram"] == pytest.approx([0.4, 0.24, 0.16, 0.2])
    # async vs sync: only async's 1000 beats anything (all 5) -> 5/25
    poi = {(p["x"], p["y"]): p["p"]["value"] for p in res["probability_of_improvement"]}
    assert poi[("async", "sync")] == pytest.approx(0.2)
    assert poi[("sync", "async")] == pytest.approx(0.8)
    # Curves reach the final eval, where the IQM is that of the final scores.
    cs = res["curves"]["env_steps"]["sync"]
    assert cs["x"][-1] == pytest.approx(STEPS)
    assert cs["iqm"][-1] == pytest.approx(300.0)
    assert cs["iqm"][0] == pytest.approx(0.0)
    # Time axis: virtual clock where recorded, wall clock otherwise.
    assert res["curves"]["time"]["async"]["x_source"] == "virtual_s"
    assert res["curves"]["time"]["sync"]["x_source"] == "wall_s"
    # Every async run solved and stopped, so its final policy is carried to the axis end,
    # and the curve counts the carried runs there (drawn dashed); none on the shared end.
    time_end = max(STEPS / 1000.0, res["curves"]["time"]["sync"]["x"][-1])
    carried = res["curves"]["time"]["async"]
    assert carried["x"][-1] == pytest.approx(time_end)
    assert carried["carried"][-1] == 5
    assert carried["carried"][0] == 0
    assert set(res["curves"]["env_steps"]["async"]["carried"]) == {0}


def test_markdown_table(report: tuple[Comparison, Path, list[Path]]) -> None:
    comp, _, _ = report
    lines = comp.to_markdown().splitlines()
    assert lines[0].startswith("| group | runs | IQM [95% CI]")
    sync = next(line for line in lines if line.startswith("| sync |"))
    assert "| 5 | 300.0 [" in sync
    assert "| 3/5 | 3,000 [1,000, not reached] | 2,000 (3/5) | 500 |" in sync
    asyn = next(line for line in lines if line.startswith("| async |"))
    assert "| 5/5 | 900 [500, not reached] | 900 (5/5) | 1,000 |" in asyn
    assert any("P(row > column)" in line for line in lines)
    assert "| sync | 0.80 [" in comp.to_markdown()


def _unescaped(text: str, ch: str) -> int:
    return len(re.findall(r"(?<!\\)" + re.escape(ch), text))


def test_latex_table(tmp_path: Path) -> None:
    dirs = []
    for seed in range(2):
        for sched in ("bounded_staleness", "sync"):
            cfg = {"scheduler": sched, "seed": seed, "staleness_bound": 4}
            dirs.append(make_run(tmp_path, f"{sched}_{seed}", cfg, 100.0 + seed))
    comp = compare(dirs, tmp_path / "out", metric="final_eval_return", reps=200)
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert tex == comp.table_tex
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{tabular}"):
        assert tex.count(rule) == 1, rule
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert _unescaped(body, "{") == _unescaped(body, "}")
    assert r"bounded\_staleness" in body
    assert _unescaped(body, "_") == 0
    assert _unescaped(body, "%") == 0  # "95\% CI"
    assert r"95\% CI" in body
    # every row has the same number of cells
    rows = [line for line in body.splitlines() if line.endswith(r"\\")]
    assert len(rows) == 3
    assert len({_unescaped(r, "&") for r in rows}) == 1


def test_incomplete_run_is_skipped_with_warning(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    cfg = {"scheduler": "sync", "seed": 9}
    crashed = make_run(tmp_path, "crashed_run_9", cfg, 1.0, finished=False)
    with pytest.warns(AnalysisWarning, match="crashed_run_9"):
        comp = compare([*dirs, crashed], tmp_path / "out", reps=100)
    assert comp.skipped == [crashed]
    assert comp.groups["sync"].n_runs == 5
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["skipped"] == [str(crashed)]


def test_half_written_last_line(tmp_path: Path) -> None:
    d = make_run(tmp_path, "torn", {"scheduler": "sync", "seed": 0}, 50.0, 1000)
    metrics = d / "metrics.jsonl"
    full = len(metrics.read_text().splitlines())
    with metrics.open("a") as f:
        f.write('{"kind": "eval", "env_steps": 55')  # crash mid-line, no newline
    run = load_run(d)
    assert run.skipped_lines == 1
    assert sum(len(v) for v in run.rows.values()) == full
    assert run.column("eval", "eval/return_mean")[-1] == pytest.approx(50.0)
    rows, skipped = read_jsonl(metrics, kinds=("eval",))
    assert len(rows) == 6 and skipped == 1  # evals at 0, 1000, ..., 5000
    comp = compare([d], tmp_path / "out", reps=100)
    assert comp.groups["sync"].iqm.value == pytest.approx(50.0)


def test_group_by_two_fields(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    for seed in range(3):
        cfg = {"scheduler": "async", "seed": seed, "staleness_bound": 2}
        dirs.append(make_run(tmp_path, f"async_s2_{seed}", cfg, 60.0 + seed, 800))
    comp = compare(dirs, tmp_path / "out", group_by=("scheduler", "staleness_bound"), reps=100)
    # Numbers sort numerically, strings stay bare, non-strings read key=value.
    assert list(comp.groups) == ["async/s=2", "async/s=4", "sync/s=none"]
    assert comp.groups["async/s=2"].n_runs == 3
    assert comp.groups["async/s=2"].key == {"scheduler": "async", "staleness_bound": 2}
    assert comp.groups["async/s=2"].iqm.value == pytest.approx(61.0)  # n=3: plain mean
    assert comp.groups["async/s=4"].iqm.value == pytest.approx(30.0)
    assert len(comp.improvement) == 6  # 3 groups, both directions


def test_group_by_list_valued_field(tmp_path: Path) -> None:
    dirs = [
        make_run(tmp_path, f"net_{i}", {"scheduler": "sync", "hidden": h, "seed": i}, 10.0 * i)
        for i, h in enumerate([[64, 64], [64, 64], [256]])
    ]
    comp = compare(dirs, tmp_path / "out", group_by=("hidden",), x_axes=(), reps=100)
    assert {g: s.n_runs for g, s in comp.groups.items()} == {
        "hidden=[256]": 1,
        "hidden=[64, 64]": 2,
    }


def test_single_run_group_nan_metric_and_no_evals(tmp_path: Path) -> None:
    dirs = [
        make_run(tmp_path, "solo", {"scheduler": "solo", "seed": 0}, 42.0, 100),
        make_run(tmp_path, "nan_run", {"scheduler": "pair", "seed": 0}, None),
        make_run(tmp_path, "quiet_run", {"scheduler": "pair", "seed": 1}, 5.0, evals=False),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comp = compare(dirs, tmp_path / "out", reps=100)
    messages = " ".join(str(w.message) for w in caught)
    assert "nan_run" in messages and "quiet_run" in messages
    solo = comp.groups["solo"]
    assert solo.iqm == (42.0, 42.0, 42.0)
    pair = comp.groups["pair"]
    assert pair.n_runs == 2 and pair.valid_scores.tolist() == [5.0]
    assert pair.n_solved == 0 and np.isnan(pair.steps_to_solve_median.value)
    # neither run of pair wrote eval rows, so it has no curve
    assert set(comp.curves["env_steps"]) == {"solo"}
    for name in EXPECTED_FILES:
        assert (tmp_path / "out" / name).stat().st_size > 0
    json.loads((tmp_path / "out" / "results.json").read_text())  # strict JSON, no NaN


def test_compare_is_deterministic(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    a = compare(dirs, tmp_path / "a", reps=200, x_axes=("env_steps",))
    b = compare(dirs, tmp_path / "b", reps=200, x_axes=("env_steps",))
    assert a.table_md == b.table_md
    assert a.improvement == b.improvement
    assert not (tmp_path / "a" / "curves_time.png").exists()


def test_ks_distance_hand_values() -> None:
    from scipy.stats import ks_2samp

    from hybrid.stats import ks_distance

    assert ks_distance([5, 5], [1, 1]) == 0.0  # same shares, different totals
    assert ks_distance([1], [0, 1]) == 1.0  # no overlap
    # CDFs (0.5, 1, 1) and (0.25, 0.5, 1): the widest gap is 0.5 at tau = 1
    assert ks_distance([2, 2], [1, 1, 2]) == pytest.approx(0.5)
    # the two-sample KS statistic of the samples the histograms count
    a, b = [3, 0, 5, 2], [1, 4, 1, 1, 3]
    samples = [np.repeat(np.arange(len(h)), h) for h in (a, b)]
    assert ks_distance(a, b) == pytest.approx(ks_2samp(*samples).statistic)
    with pytest.raises(ValueError):
        ks_distance([0, 0], [1])


# ----------------------------------------------------------------------------- refusals


def _three_env_runs(root: Path) -> list[Path]:
    """Pendulum, Acrobot and CartPole runs of one scheduler: returns on different scales."""
    dirs = []
    for env, score in (("Pendulum-v1", -1200.0), ("Acrobot-v1", -90.0), ("CartPole-v1", 500.0)):
        for seed in range(2):
            cfg = {"env": env, "scheduler": "async", "seed": seed}
            dirs.append(make_run(root, f"{env}-{seed}", cfg, score))
    return dirs


def test_compare_refuses_to_pool_different_envs(tmp_path: Path) -> None:
    dirs = _three_env_runs(tmp_path)
    with pytest.raises(CompareError, match=r"3 envs .*Acrobot-v1.*group-by env"):
        compare(dirs, tmp_path / "out", reps=50)
    assert not (tmp_path / "out").exists()  # refused before writing anything
    comp = compare(dirs, tmp_path / "out", group_by=("env", "scheduler"), reps=50, x_axes=())
    assert sorted(g.key["env"] for g in comp.groups.values()) == [
        "Acrobot-v1",
        "CartPole-v1",
        "Pendulum-v1",
    ]


def test_compare_refuses_an_unknown_group_by_field(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    with pytest.raises(CompareError, match=r"'nosuchfield'.*valid fields: .*scheduler") as err:
        compare(dirs, tmp_path / "out", group_by=("nosuchfield",), reps=50)
    assert "\n" not in str(err.value)


def test_corrupt_summary_is_reported_as_corrupt_not_missing(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    (dirs[0] / "summary.json").write_text('{"solved": tru')  # torn by a crash or an editor
    with pytest.warns(AnalysisWarning, match="corrupt") as caught:
        comp = compare(dirs, tmp_path / "out", reps=50, x_axes=())
    message = " ".join(str(w.message) for w in caught)
    assert str(dirs[0] / "summary.json") in message and "no summary.json" not in message
    assert comp.skipped == [dirs[0]]


def test_compare_cli_refusals_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    from hybrid.cli import main

    runs = tmp_path / "runs"
    _three_env_runs(runs)
    a_file = tmp_path / "report.txt"
    a_file.write_text("not a folder")
    cases = {
        "envs": [str(runs), "--out", str(tmp_path / "r1")],
        "nosuchfield": [str(runs), "--out", str(tmp_path / "r2"), "--group-by", "nosuchfield"],
        "is a file": [str(runs), "--out", str(a_file), "--group-by", "env"],
    }
    for expected, argv in cases.items():
        assert main(["compare", *argv]) == 2, expected
        err = capsys.readouterr().err.strip()
        assert expected in err and "Traceback" not in err, err
        assert len(err.splitlines()) == 1, err
    assert a_file.read_text() == "not a folder"


# ------------------------------------------------------------------------ data frames


def test_frame_kinds_and_config_columns(tmp_path: Path) -> None:
    d = make_runs(tmp_path)[5]  # async seed 0: 11 train, 11 span and 6 eval rows
    (d / "spans.jsonl").write_text(
        '{"worker": 0, "start": 0.0, "upload_start": 0.5, "end": 1.0, "staleness": 0}\n'
        '{"worker": 1, "start": 0.0, "upload_start": 0.7, "end": 1.5, "staleness": 1}\n{"tor'
    )
    metrics = frame(d)
    assert len(metrics) == 28 and list(metrics.columns[:2]) == ["run", "kind"]
    assert set(metrics["run"]) == {str(d)}
    ev = frame(d, "eval")
    assert ev["env_steps"].tolist() == [0, 1000, 2000, 3000, 4000, 5000]
    assert ev["eval/return_mean"].iloc[-1] == pytest.approx(ASYNC_SCORES[0])
    # Every config field is a column, constant over the run's rows.
    assert (ev["scheduler"] == "async").all() and (ev["staleness_bound"] == 4).all()
    assert len(frame(d, "train")) == 11
    spans = frame(d, "spans")
    assert spans["staleness"].tolist() == [0, 1]  # the torn last line is skipped
    summary = frame(d, "summary")
    assert len(summary) == 1 and summary["final_eval_return"].iloc[0] == ASYNC_SCORES[0]
    assert list(frame(d, "config").columns) == ["run", *json.loads((d / "config.json").read_text())]
    assert "scheduler" not in frame(d, "eval", config=False).columns
    assert list(frame(d, "eval", config=["seed"]).columns)[-1] == "seed"
    with pytest.raises(ValueError, match=r"kind: 'evals' is not one of metrics, train, eval"):
        frame(d, "evals")
    with pytest.raises(FileNotFoundError, match="kind='spans'"):
        frame(make_runs(tmp_path / "other")[0], "spans")


def test_frame_config_field_never_hides_a_logged_value(tmp_path: Path) -> None:
    d = make_run(tmp_path, "r", {"env": "CartPole-v1", "env_steps": -1}, 10.0)
    ev = frame(d, "eval")
    assert ev["env_steps"].iloc[-1] == STEPS
    assert (ev["config/env_steps"] == -1).all()


def test_load_runs_paths_globs_folders_results(tmp_path: Path) -> None:
    dirs = make_runs(tmp_path)
    assert len(load_runs(tmp_path, "config")) == 10  # a folder is searched
    syncs = load_runs(str(tmp_path / "sync_*"), "config")
    assert syncs["run"].tolist() == [str(d) for d in dirs[:5]]
    # Duplicates collapse; a Result-like object is read from its run_dir.
    result = type("R", (), {"run_dir": dirs[0]})()
    assert len(load_runs([dirs[0], str(dirs[0]), result], "summary")) == 1
    ev = load_runs(tmp_path, "eval")
    last = ev[ev["env_steps"] == STEPS].groupby("scheduler")["eval/return_mean"].mean()
    assert last["sync"] == pytest.approx(np.mean(SYNC_SCORES))
    make_run(tmp_path, "unfinished", {"env": "CartPole-v1"}, 5.0, finished=False)
    with pytest.warns(AnalysisWarning, match="unfinished: no data for kind='summary'"):
        assert len(load_runs(tmp_path, "summary")) == 10
    assert len(load_runs(tmp_path, "eval")) == 11 * 6
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_runs(tmp_path / "nope")
    assert load_runs([], "eval").empty


def test_result_frame_reads_its_run_dir(tmp_path: Path) -> None:
    from hybrid.trainer import Result

    d = make_runs(tmp_path)[0]
    result = Result(run_dir=d, config=None, summary={}, params=None)  # type: ignore[arg-type]
    assert result.frame("eval").equals(frame(d, "eval"))
    assert len(result.frame()) == len(result.metrics())


def test_compare_returns_the_report_without_writing(
    report: tuple[Comparison, Path, list[Path]], tmp_path: Path
) -> None:
    comp, out, dirs = report
    again = compare(dirs, reps=500)  # no out: nothing written
    assert again.paths == {}
    assert again.to_markdown() == comp.to_markdown()
    table = again.table
    assert table.index.tolist() == ["async", "sync"]
    assert table.loc["sync", "iqm"] == pytest.approx(300.0)
    assert table.loc["async", "mean"] == pytest.approx(220.0)
    assert table.loc["sync", "iqm_low"] <= 300.0 <= table.loc["sync", "iqm_high"]
    assert table.loc["sync", "solved"] == 3 and table.loc["async", "runs"] == 5
    assert table.loc["async", "scheduler"] == "async"  # the grouping fields are columns
    p = again.improvement_table
    assert p.loc["sync", "async"] == pytest.approx(comp.improvement["sync", "async"].value)
    assert p.loc["sync", "async"] + p.loc["async", "sync"] == pytest.approx(1.0)
    assert set(again.figures) == {
        "curves_env_steps",
        "curves_time",
        "staleness",
        "steps_to_solve",
        "solved_fraction",
        "profile",
    }
    # save() writes what compare(..., out) and the CLI write, byte for byte.
    paths = again.save(tmp_path / "saved")
    assert sorted(paths) == sorted(EXPECTED_FILES)
    for name in EXPECTED_FILES:
        if name == "results.json":
            a, b = (json.loads((o / name).read_text()) for o in (out, tmp_path / "saved"))
            assert a.pop("files") != b.pop("files")
            assert a == b
        elif not name.endswith(".png"):  # PNGs embed nothing variable either, but are big
            assert (out / name).read_bytes() == (tmp_path / "saved" / name).read_bytes(), name


def test_compare_accepts_globs_and_renders_html(tmp_path: Path) -> None:
    make_runs(tmp_path)
    comp = compare(str(tmp_path / "*_[0-2]"), group_by="scheduler", reps=50, x_axes=())
    assert [g.n_runs for g in comp.groups.values()] == [3, 3]
    html = comp._repr_html_()
    assert "<table" in html and ">async<" in html and ">sync<" in html
    assert "P(row &gt; column)" in html
    with pytest.raises(CompareError, match=r"runs: '.*nope' does not exist"):
        compare(tmp_path / "nope")


def test_start_up_does_not_import_pandas() -> None:
    import subprocess
    import sys

    code = (
        "import sys, hybrid, hybrid.analysis, hybrid.cli, hybrid.core.loop; "
        "hybrid.compare, hybrid.load_runs; "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
