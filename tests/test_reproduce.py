"""Paper checks (``hybrid reproduce``): entries load, verdict rules, tables, CLI, one smoke run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hybrid.cli import main
from hybrid.reproduce import all_entries, get_entry
from hybrid.reproduce.entry import (
    Arm,
    ArmStats,
    Entry,
    Published,
    direction_verdict,
    return_verdict,
    speedup_verdict,
    time_ratio_verdict,
    verdict,
)
from hybrid.reproduce.run import Report, latex_escape, reproduce, to_latex, to_markdown

# --- entries -----------------------------------------------------------------------------------


def test_at_least_eight_entries_each_with_its_source_and_settings() -> None:
    entries = all_entries()
    assert len(entries) >= 8
    for name, entry in entries.items():
        assert entry.name == name
        assert entry.url.startswith("https://"), name
        assert entry.published.text and entry.evaluation and entry.return_convention, name
        assert entry.deviations, f"{name} lists no deviation"
        assert len(entry.default_seeds) >= max(5, entry.source_seeds or 0), name
        assert entry.config.get("env") == entry.env_id, name
        assert len(entry.arms) >= (1 if entry.kind == "return" else 2), name


def test_every_entry_builds_a_valid_config_for_every_arm() -> None:
    from hybrid import TrainConfig
    from hybrid.config import check_flags_take_effect

    for entry in all_entries().values():
        for arm in entry.arms:
            fields = entry.run_config(arm, seed=0, budget_scale=0.01)
            cfg = TrainConfig(**fields)
            assert cfg.env_defaults is False  # the entry states its settings itself
            assert cfg.total_env_steps >= 1_000
            # what `hybrid train` would refuse before training, refused here: bad values,
            # and a setting the arm gives that takes no part in its run
            cfg.validate()
            check_flags_take_effect(cfg, set(fields))


def test_published_numbers_are_the_sources() -> None:
    acrobot = get_entry("rlzoo-a2c-acrobot").published
    assert (acrobot.mean, acrobot.spread) == (-83.353, 17.213)
    cleanrl = get_entry("cleanrl-ppo-cartpole").published
    assert (cleanrl.mean, cleanrl.spread, cleanrl.text) == (492.40, 13.05, "492.40 ± 13.05")
    assert get_entry("a3c-speedup").published.values == (1.0, 2.1, 3.7, 6.9, 12.5)
    lunar = get_entry("rlzoo-ppo-lunarlander")
    assert (lunar.source_env_id, lunar.env_id) == ("LunarLander-v2", "LunarLander-v3")


def test_an_entry_with_fewer_seeds_than_its_source_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 5 seeds"):
        Entry(
            name="x",
            title="x",
            source="x",
            url="https://example.org",
            published=Published("1 ± 0", 1.0, 0.0),
            env_id="CartPole-v1",
            source_env_id="CartPole-v1",
            budget=1_000,
            parallel_envs="1",
            evaluation="x",
            return_convention="x",
            source_seeds=3,
            config={"env": "CartPole-v1"},
            deviations=("x",),
            default_seeds=(0, 1, 2),
        )


# --- verdicts ----------------------------------------------------------------------------------


def _arm(values: list[float], label: str = "hybrid") -> ArmStats:
    return ArmStats(label, tuple(values), None)


def test_return_verdict_is_the_sources_spread_around_its_mean() -> None:
    published = Published("-83.353 ± 17.213", -83.353, 17.213)
    assert return_verdict(published, _arm([-80.0, -90.0, -70.0, -95.0, -85.0])) == "within spread"
    assert return_verdict(published, _arm([-150.0] * 5)) == "below spread"
    assert return_verdict(published, _arm([-60.0] * 5)) == "above spread"
    # 500 ± 0: only exactly 500 is within
    perfect = Published("500.000 ± 0.000", 500.0, 0.0)
    assert return_verdict(perfect, _arm([500.0] * 5)) == "within spread"
    assert return_verdict(perfect, _arm([500.0] * 4 + [499.0])) == "below spread"


def test_return_verdict_uses_ci_overlap_where_the_source_gives_a_ci() -> None:
    published = Published("10 [8, 12]", 10.0, ci=(8.0, 12.0))
    assert return_verdict(published, _arm([11.0, 12.0, 13.0, 14.0, 15.0])) == "CIs overlap"
    assert return_verdict(published, _arm([20.0, 21.0, 22.0, 23.0, 24.0])) == "CIs disjoint"


def test_direction_verdict_needs_disjoint_cis_to_agree_or_disagree() -> None:
    high = _arm([10.0, 11.0, 12.0, 13.0, 14.0], "vtrace")
    low = _arm([1.0, 2.0, 3.0, 4.0, 5.0], "none")
    assert direction_verdict(high, low).startswith("agrees")
    assert direction_verdict(low, high).startswith("disagrees")
    close = _arm([4.0, 5.0, 6.0, 7.0, 8.0], "none")
    assert direction_verdict(_arm([5.0, 6.0, 7.0, 8.0, 9.0], "vtrace"), close).startswith(
        "inconclusive"
    )
    assert direction_verdict(_arm([5.0], "a"), _arm([1.0], "b")).startswith("too few seeds")


def test_time_ratio_counts_unsolved_runs_as_never_arriving() -> None:
    published = Published("up to 3.3x", values=(3.3,))
    slow = _arm([300.0, 400.0, math.inf, math.inf, 500.0], "fedavg")
    fast = _arm([100.0, 200.0, 150.0, math.inf, 250.0], "fedbuff")
    # medians with inf counted: 500 and 200
    assert time_ratio_verdict(slow, fast, published) == "agrees (fedbuff faster, ratio 2.50)"
    never = _arm([math.inf, math.inf, math.inf, 1.0, 2.0], "fedbuff")
    assert time_ratio_verdict(slow, never, published).startswith("not reached")


def test_speedup_verdict_counts_worker_counts_within_tolerance() -> None:
    published = Published("1/2.1/3.7", values=(1.0, 2.1, 3.7))
    arms = [_arm([100.0]), _arm([210.0]), _arm([200.0])]
    assert speedup_verdict(arms, published) == "close at 2/3 worker counts (±25%)"


def test_a_scaled_budget_is_never_judged_against_the_full_one() -> None:
    entry = get_entry("rlzoo-a2c-cartpole")
    arms = [_arm([500.0] * 5)]
    assert verdict(entry, arms, 1.0) == "within spread"
    scaled = verdict(entry, arms, 0.1)
    assert scaled.startswith("not comparable (budget ×0.1)")
    assert "at this budget: within spread" in scaled


# --- tables ------------------------------------------------------------------------------------


def _report(name: str, arms: list[ArmStats], scale: float = 0.5) -> Report:
    entry = get_entry(name)
    return Report(entry, tuple(arms), (0, 1, 2, 3, 4), scale, 12.0, verdict(entry, arms, scale))


def test_tables_show_hybrid_beside_the_published_figure() -> None:
    reports = [
        _report("rlzoo-a2c-acrobot", [_arm([-80.0, -90.0, -70.0, -95.0, -85.0])]),
        _report("mappo-vs-ippo-spread", [_arm([-20.0] * 5, "mappo"), _arm([-22.0] * 5, "ippo")]),
    ]
    md = to_markdown(reports)
    assert "| rlzoo-a2c-acrobot | hybrid | Acrobot-v1 | 250,000 (500,000) |" in md
    assert "-83.353 ± 17.213" in md
    assert "not comparable (budget ×0.5)" in md
    assert "team sum over 3 agents | -60.0" in md  # both return conventions
    tex = to_latex(reports)
    assert tex.startswith(r"\begin{tabular}") and tex.rstrip().endswith(r"\end{tabular}")
    assert r"$\pm$" in tex and "±" not in tex
    assert latex_escape("a_b & 50%") == r"a\_b \& 50\%"


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_lists_the_entries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == len(all_entries())
    assert "rlzoo-a2c-cartpole" in out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["reproduce", "no-such-entry"], "name: unknown entry 'no-such-entry'"),
        (["reproduce"], "NAME:"),
        (["reproduce", "rlzoo-a2c-cartpole", "--jobs", "0"], "jobs:"),
        (["reproduce", "rlzoo-a2c-cartpole", "--budget-scale", "0"], "budget_scale:"),
        (["reproduce", "rlzoo-a2c-cartpole", "--seeds", "1", "1"], "seeds:"),
        (["reproduce", "rlzoo-a2c-cartpole", "--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # the flag parser exits itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert field in err and len(err.splitlines()) == 1 and "Traceback" not in err


# --- one smoke run -------------------------------------------------------------------------------


def test_smoke_one_entry_writes_its_tables(tmp_path: Path) -> None:
    """A tiny budget of one entry, two seeds: the table is produced (not the verdict)."""
    entry = get_entry("rlzoo-a2c-cartpole")
    messages: list[str] = []
    report = reproduce(entry, (0, 1), tmp_path, jobs=1, budget_scale=0.002, say=messages.append)
    assert [a.n for a in report.arms] == [2]
    assert report.verdict.startswith("not comparable")
    md = (tmp_path / "reproduce.md").read_text()
    assert "rlzoo-a2c-cartpole" in md and "500.000 ± 0.000" in md
    assert (tmp_path / "reproduce.tex").read_text().startswith(r"\begin{tabular}")
    assert any(m.startswith("[2/2]") for m in messages)  # progress while it runs
    # a second call keeps the finished runs instead of training again
    again: list[str] = []
    reproduce(entry, (0, 1), tmp_path, jobs=1, budget_scale=0.002, say=again.append)
    assert any("done before, kept" in m for m in again)


def test_arm_labels_name_their_run_directories() -> None:
    from hybrid.reproduce.run import _slug

    assert _slug(Arm("fedbuff K=4").label) == "fedbuff-K-4"


def test_a_run_that_fails_is_counted_and_nothing_is_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run without a result is not dropped: its arm says how many failed, and the verdict
    says it is incomplete (the run could have gone either way)."""
    import hybrid.reproduce.run as run

    real_train_one = run.train_one

    def second_seed_crashes(fields: dict) -> dict:
        if fields["seed"] == 1:
            raise RuntimeError("worker lost\nsecond line")
        return real_train_one(fields)

    monkeypatch.setattr(run, "train_one", second_seed_crashes)
    messages: list[str] = []
    entry = get_entry("rlzoo-a2c-cartpole")
    report = reproduce(entry, (0, 1), tmp_path, jobs=1, budget_scale=0.002, say=messages.append)
    assert [(a.n, a.failed) for a in report.arms] == [(1, 1)]
    assert "incomplete (1 run failed)" in report.verdict
    assert any("failed (RuntimeError: worker lost)" in m for m in messages)
    assert "1 + 1 failed" in (tmp_path / "reproduce.md").read_text()
