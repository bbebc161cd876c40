"""compare() counts every run: censored steps to solve in every table, carried-forward curves
marked, an across-tasks aggregate that refuses mismatched inputs, and hostile numbers."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid.analysis import (
    CARRIED_NOTE,
    NOT_REACHED,
    AnalysisWarning,
    CompareError,
    Reference,
    across_tasks,
    compare,
)

BUDGET = 50_000
HUGE = 10**400  # a 400-digit integer: valid JSON, too large for a float


def write_run(
    root: Path,
    name: str,
    config: dict[str, Any],
    final: Any,
    solve_at: Any = None,
    env_steps: Any = BUDGET,
    evals: list[tuple[Any, float]] | None = None,
    **summary: Any,
) -> Path:
    """A finished run directory; ``evals`` are (env_steps, return) eval rows."""
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    rows = [
        {"kind": "eval", "env_steps": x, "wall_s": i + 1.0, "eval/return_mean": y}
        for i, (x, y) in enumerate(evals or [(0, 10.0), (env_steps, final)])
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    content = {
        "solved": solve_at is not None,
        "env_steps_to_solve": solve_at,
        "env_steps": solve_at if solve_at is not None else env_steps,
        "final_eval_return": final,
        "env_steps_per_s": 1000.0,
        "staleness_mean": 0.0,
        "staleness_max": 0,
        "staleness_histogram": [10],
        **summary,
    }
    # json.dumps writes a 400-digit int as it is; Python's json reads it back as an int.
    (d / "summary.json").write_text(json.dumps(content))
    return d


def disagreeing_groups(root: Path) -> list[Path]:
    """A: one of five solves, early. B: all five solve, later.

    Over solved runs only, A looks faster (1,000 vs 25,000); counting every run, A's
    median is not reached and B's is 25,000.
    """
    dirs = []
    for seed in range(5):
        solved = 1000 if seed == 0 else None
        cfg = {"env": "CartPole-v1", "scheduler": "A", "seed": seed}
        dirs.append(write_run(root, f"A{seed}", cfg, 500.0 if solved else 100.0, solved))
    for seed in range(5):
        cfg = {"env": "CartPole-v1", "scheduler": "B", "seed": seed}
        dirs.append(write_run(root, f"B{seed}", cfg, 500.0, 20_000 + 2_500 * seed))
    return dirs


def test_every_table_shows_the_censored_median_and_ranks_b_ahead(tmp_path: Path) -> None:
    comp = compare(disagreeing_groups(tmp_path), tmp_path / "out", reps=200)
    a, b = comp.groups["A"], comp.groups["B"]
    # The solved-only statistic and the censored one disagree on these groups.
    assert a.steps_to_solve_iqm.value < b.steps_to_solve_iqm.value
    assert a.median_steps_to_solve.value == math.inf
    assert b.median_steps_to_solve.value == 25_000

    # Markdown: the censored median comes before the labeled solved-only column.
    md = (tmp_path / "out" / "table.md").read_text().splitlines()
    header = [c.strip() for c in md[0].strip("|").split("|")]
    km = header.index("median steps to solve, every run [95% CI]")
    solved_only = header.index("IQM steps over solved runs, k/n")
    assert km < solved_only

    def cells(label: str) -> list[str]:
        line = next(x for x in md if x.startswith(f"| {label} |"))
        return [c.strip() for c in line.strip("|").split("|")]

    assert cells("A")[km].startswith(f"{NOT_REACHED} [")
    assert cells("B")[km].startswith("25,000 [")
    assert cells("A")[solved_only] == "1,000 (1/5)"

    # LaTeX: the same cells, in the same order.
    tex = (tmp_path / "out" / "table.tex").read_text()
    rows = {r.split(" & ")[0]: r.split(" & ") for r in tex.splitlines() if r.endswith(r"\\")}
    assert rows["group"][km].startswith("median steps to solve, every run")
    assert rows["A"][km].startswith(NOT_REACHED) and rows["B"][km].startswith("25,000")

    # DataFrame: sorting by the censored median ranks B ahead; the solved-only one is apart.
    table = comp.table
    assert table.sort_values("median_steps_to_solve").index.tolist() == ["B", "A"]
    assert table.loc["A", "median_steps_to_solve"] == math.inf
    assert table.loc["A", "steps_to_solve_iqm_solved_only"] == 1000
    assert "steps_to_solve_median" not in table.columns  # no unlabeled solved-only column

    # results.json: the censored median at the group's top level, solved-only nested apart.
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    ga, gb = res["groups"]["A"], res["groups"]["B"]
    assert ga["median_steps_to_solve"]["value"] == NOT_REACHED
    assert gb["median_steps_to_solve"]["value"] == 25_000
    assert ga["solved_only"]["steps_to_solve_iqm"]["value"] == 1000
    assert "steps_to_solve_iqm" not in ga
    assert [r["steps"] for r in ga["runs"]] == [1000] + [BUDGET] * 4
    # Notebook view says how steps to solve were counted.
    assert "Kaplan" in comp._repr_html_()


def test_single_run_groups_never_get_a_zero_width_interval(tmp_path: Path) -> None:
    d = write_run(tmp_path, "solo", {"scheduler": "solo"}, 500.0, 25_000)
    comp = compare([d], reps=100, x_axes=())
    e = comp.groups["solo"].median_steps_to_solve
    assert e.value == 25_000 and e.high == math.inf
    assert f"25,000 [25,000, {NOT_REACHED}]" in comp.to_markdown()


def test_carried_forward_stretches_are_counted_and_drawn_dashed(tmp_path: Path) -> None:
    early = write_run(
        tmp_path,
        "early",
        {"scheduler": "s", "seed": 0},
        500.0,
        2000,
        evals=[(0, 10.0), (1000, 200.0), (2000, 500.0)],
    )
    late = write_run(
        tmp_path,
        "late",
        {"scheduler": "s", "seed": 1},
        300.0,
        None,
        env_steps=4000,
        evals=[(0, 10.0), (2000, 100.0), (4000, 300.0)],
    )
    comp = compare([early, late], reps=100, x_axes=("env_steps",), grid_points=5)
    cv = comp.curves["env_steps"]["s"]
    np.testing.assert_allclose(cv.x, [0, 1000, 2000, 3000, 4000])
    assert cv.carried.tolist() == [0, 0, 0, 1, 1]  # the early run stopped, solved, at 2,000
    ax = comp.figures["curves_env_steps"].axes[0]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert dashed and dashed[0].get_xdata()[0] == 2000  # joins the solid part at its end
    assert CARRIED_NOTE in [t.get_text() for t in ax.get_legend().get_texts()]


def test_huge_integers_are_invalid_values_not_a_crash(tmp_path: Path, capsys) -> None:
    from hybrid.cli import main

    runs = tmp_path / "runs"
    cfg = {"env": "CartPole-v1", "scheduler": "async"}
    write_run(runs, "ok", {**cfg, "seed": 0}, 400.0, 3000)
    write_run(runs, "huge_return", {**cfg, "seed": 1}, HUGE, None)
    write_run(
        runs, "huge_steps", {**cfg, "seed": 2}, 300.0, None, env_steps=HUGE, evals=[(HUGE, 1.0)]
    )
    write_run(runs, "huge_solve", {**cfg, "seed": 3}, 350.0, HUGE, staleness_histogram=[HUGE])
    with pytest.warns(AnalysisWarning) as caught:
        comp = compare(runs, reps=100, x_axes=("env_steps",))
    messages = " ".join(str(w.message) for w in caught)
    assert "huge_return" in messages and "final_eval_return" in messages
    assert "huge_steps" in messages and "huge_solve" in messages
    g = comp.groups["async"]
    assert sorted(g.valid_scores.tolist()) == [300.0, 350.0, 400.0]
    assert g.solve_curve is not None and g.solve_curve.n_runs == 2  # ok and huge_return
    # The CLI: warnings and the report, one line each, no traceback, exit 0.
    assert main(["compare", str(runs), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "OverflowError" not in err
    assert all(line.startswith("hybrid compare: warning:") for line in err.strip().splitlines())
    json.loads((tmp_path / "report" / "results.json").read_text())


# ----------------------------------------------------------------------------- across tasks


def two_env_runs(root: Path, methods: tuple[str, ...] = ("sync", "async")) -> list[Path]:
    """CartPole (random 22, reference 500) and Acrobot (random -500, reference -100)."""
    dirs = []
    finals = {"CartPole-v1": [261.0, 500.0, 22.0], "Acrobot-v1": [-100.0, -300.0, -500.0]}
    for m in methods:
        for env, scores in finals.items():
            for seed, score in enumerate(scores):
                cfg = {"env": env, "scheduler": m, "seed": seed}
                dirs.append(write_run(root, f"{m}-{env}-{seed}", cfg, score, None))
    return dirs


def test_compare_aggregates_normalized_scores_across_envs(tmp_path: Path) -> None:
    dirs = two_env_runs(tmp_path)
    comp = compare(dirs, tmp_path / "out", group_by=("env", "scheduler"), reps=200, x_axes=())
    assert list(comp.across_tasks) == ["async", "sync"]
    agg = comp.across_tasks["sync"]
    assert agg.tasks == ["Acrobot-v1", "CartPole-v1"]
    assert agg.normalized["CartPole-v1"] == pytest.approx([0.5, 1.0, 0.0])
    assert agg.normalized["Acrobot-v1"] == pytest.approx([1.0, 0.5, 0.0])
    assert agg.mean.value == pytest.approx(0.5)
    assert agg.optimality_gap.value == pytest.approx(0.5)  # shortfalls 0.5, 0, 1 per env
    assert agg.mean.low <= 0.5 <= agg.mean.high
    md = comp.to_markdown()
    assert "Across tasks" in md and "CartPole-v1: random 22.0, reference 500" in md
    assert comp.task_table.loc["sync", "optimality_gap"] == pytest.approx(0.5)
    assert (tmp_path / "out" / "profile_across_tasks.png").is_file()
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["across_tasks"]["sync"]["mean"]["value"] == pytest.approx(0.5)
    assert set(res["performance_profile_across_tasks"]) == {"async", "sync"}
    # Users' references replace the built-in ones.
    mine = compare(
        dirs,
        group_by=("env", "scheduler"),
        reps=100,
        x_axes=(),
        references={"CartPole-v1": (0.0, 1000.0)},
    )
    assert mine.across_tasks["sync"].normalized["CartPole-v1"] == pytest.approx([0.261, 0.5, 0.022])


def test_across_tasks_refuses_mismatched_inputs(tmp_path: Path) -> None:
    dirs = two_env_runs(tmp_path)
    # A method that covers only one of the envs.
    cfg = {"env": "CartPole-v1", "scheduler": "fedavg", "seed": 0}
    dirs.append(write_run(tmp_path, "fedavg-only-cartpole", cfg, 100.0, None))
    by_env = ("env", "scheduler")
    with pytest.raises(CompareError, match=r"'fedavg' covers CartPole-v1 but") as err:
        compare(dirs, tmp_path / "o1", group_by=by_env, reps=50, x_axes=(), across_tasks=True)
    assert "\n" not in str(err.value) and not (tmp_path / "o1").exists()
    # Asked for without an env grouping, or with an env of no known reference.
    with pytest.raises(CompareError, match="group by env"):
        compare(dirs[:3], group_by=("scheduler",), reps=50, x_axes=(), across_tasks=True)
    pendulum = write_run(tmp_path, "pend", {"env": "Pendulum-v1", "scheduler": "sync"}, -900.0)
    with pytest.raises(CompareError, match=r"no random/reference score for Pendulum-v1"):
        compare([*dirs[:6], pendulum], group_by=by_env, reps=50, x_axes=(), across_tasks=True)
    for bad in ((1.0,), (5.0, 5.0), ("x", 1.0), (float("nan"), 1.0)):
        with pytest.raises(CompareError, match="references: 'CartPole-v1'"):
            compare(
                dirs[:12],
                group_by=by_env,
                reps=50,
                x_axes=(),
                references={"CartPole-v1": bad},
            )
    # Built-in references are returns: another metric needs the user's own.
    with pytest.raises(CompareError, match="built-in references are eval returns"):
        compare(
            dirs[:12],
            group_by=by_env,
            metric="env_steps_per_s",
            reps=50,
            x_axes=(),
            across_tasks=True,
        )
    # Not asked for: compare still works, and says why there is no aggregate.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comp = compare(dirs, group_by=by_env, reps=50, x_axes=())
    assert comp.across_tasks == {}
    assert any("no across-tasks aggregate" in str(w.message) for w in caught)


def test_across_tasks_function_for_scores_in_hand() -> None:
    out = across_tasks(
        {"a": {"CartPole-v1": [500.0], "X-v0": [1.0, 3.0]}},
        {"X-v0": Reference(1.0, 3.0)},
        reps=50,
    )
    assert out["a"].normalized == {"CartPole-v1": [1.0], "X-v0": [0.0, 1.0]}
    with pytest.raises(CompareError, match="at least 2 envs"):
        across_tasks({"a": {"CartPole-v1": [500.0]}})
