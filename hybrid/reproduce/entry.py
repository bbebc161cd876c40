"""What a published result is, as a paper check runs it: the source, its numbers, the settings.

An :class:`Entry` holds everything a reader needs to judge a comparison without opening the
source: where the number comes from (with its URL), the number exactly as the source gives
it, the env id and version, the budget, the number of parallel envs, how the source
evaluated, the return convention, its seeds, the hybrid settings that match it and the
deviations hybrid still has. The verdict rules live here too, so that the tests check them
on hand-made numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid.stats import iqm, stratified_bootstrap_ci

KINDS = ("return", "direction", "time_ratio", "speedup")
"""``return``: hybrid's final return against a published mean ± spread (or CI).
``direction``: arm A at least as good as arm B (a published ordering, not a number).
``time_ratio``: virtual time to a target of arm B over arm A (a published speedup ratio).
``speedup``: throughput at N workers over one worker, against a published speedup row."""


@dataclass(frozen=True)
class Published:
    """The source's figure, as the source prints it, and the numbers a verdict uses."""

    text: str
    """Exactly as the source gives it, e.g. ``"-83.353 ± 17.213"``."""
    mean: float | None = None
    spread: float | None = None
    """The ± the source prints (a standard deviation over episodes or over seeds)."""
    spread_of: str = ""
    """What the ± is taken over, in words (``"300 evaluation episodes of one run"``)."""
    ci: tuple[float, float] | None = None
    """A confidence interval, where the source gives one (then the verdict is CI overlap)."""
    values: tuple[float, ...] = ()
    """A published row of several numbers (A3C's speedups at 1/2/4/8/16 workers)."""


@dataclass(frozen=True)
class Arm:
    """One setting of a comparison: a label and the config fields that make it."""

    label: str
    config: Mapping[str, Any] = field(default_factory=dict)
    series: str = ""
    """A speedup entry's row this arm belongs to. Each series is a speedup over its own first
    arm; the first series is judged against the published row, the others are printed
    beside it (A3C's real runs beside the clock's prediction)."""


@dataclass(frozen=True)
class Entry:
    """One published result and how hybrid runs it."""

    name: str
    title: str
    source: str
    url: str
    published: Published
    env_id: str
    """The env hybrid runs (its id carries the version)."""
    source_env_id: str
    """The env the source ran; differs from ``env_id`` where Gymnasium moved on a version."""
    budget: int
    """Env steps per run at the source (hybrid's runs at ``--budget-scale 1``)."""
    parallel_envs: str
    """The source's parallel envs (and hybrid's layout of them)."""
    evaluation: str
    """How the source evaluated: deterministic or sampled, how many episodes."""
    return_convention: str
    source_seeds: int | None
    """Seeds (runs) behind the published figure; None when the source does not say."""
    config: Mapping[str, Any]
    """Hybrid's settings that match the source (``TrainConfig`` fields)."""
    deviations: tuple[str, ...]
    """What hybrid still does differently from the source, each in one sentence."""
    kind: str = "return"
    arms: tuple[Arm, ...] = (Arm("hybrid"),)
    metric: Callable[[Mapping[str, Any]], float] | None = None
    """A run's figure from its summary.json (default: ``final_eval_return``)."""
    metric_name: str = "final eval return"
    prepare: Callable[[str, float], Mapping[str, Mapping[str, Any]]] | None = None
    """``(out_dir, budget_scale) -> {arm label: extra config}``, run once before the runs
    (A3C's entry calibrates this machine there)."""
    default_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    notes: str = ""
    """What the verdict means for this entry, where its kind alone does not say."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(KINDS)}")
        least = max(5, self.source_seeds or 0)
        if len(self.default_seeds) < least:
            raise ValueError(f"{self.name}: default_seeds: at least {least} seeds")
        if self.kind == "return" and self.published.mean is None:
            raise ValueError(f"{self.name}: a return entry needs the published mean")

    def figure(self, summary: Mapping[str, Any]) -> float:
        """This entry's figure of one run."""
        if self.metric is not None:
            return float(self.metric(summary))
        value = summary.get("final_eval_return")
        return float("nan") if value is None else float(value)

    def run_config(self, arm: Arm, seed: int, budget_scale: float) -> dict[str, Any]:
        """The ``TrainConfig`` fields of one run (before ``prepare``'s extras).

        The entry states every setting the source fixes; ``env_defaults`` is off so that no
        recipe of hybrid/defaults.py fills in anything else. Evaluations (besides the
        final one) come once, halfway, unless the entry says otherwise: only the final
        return is compared, and on a shared machine evaluation time is training time lost.
        """
        budget = scaled_budget(self.budget, budget_scale)
        return {
            "env_defaults": False,
            "eval_every": max(1_000, budget // 2),
            **self.config,
            **arm.config,
            "seed": seed,
            "total_env_steps": budget,
            "progress": False,
        }


def scaled_budget(budget: int, budget_scale: float) -> int:
    """The env steps of a run at ``budget_scale`` (at least one thousand)."""
    return max(1_000, round(budget * budget_scale))


# --- statistics over seeds -------------------------------------------------------------------


@dataclass(frozen=True)
class ArmStats:
    """One arm's figures over its seeds."""

    label: str
    values: tuple[float, ...]
    solved: int | None
    """Runs that reached the env's reward threshold (None: the env has none)."""
    failed: int = 0
    """Runs that ended without a result (an error, a crash): counted, never dropped."""

    @property
    def n(self) -> int:
        return len(self.values)

    def finite(self) -> np.ndarray:
        a = np.asarray(self.values, dtype=float)
        return a[np.isfinite(a)]

    @property
    def iqm(self) -> float:
        a = self.finite()
        return float(iqm(a)) if len(a) else float("nan")

    @property
    def mean(self) -> float:
        a = self.finite()
        return float(a.mean()) if len(a) else float("nan")

    @property
    def std(self) -> float:
        """Sample standard deviation over seeds (NaN with fewer than two)."""
        a = self.finite()
        return float(a.std(ddof=1)) if len(a) > 1 else float("nan")

    def iqm_ci(self, seed: int = 0) -> tuple[float, float]:
        """95% stratified-bootstrap CI of the IQM (one task, so a plain bootstrap over runs)."""
        a = self.finite()
        if len(a) == 0:
            return float("nan"), float("nan")
        if len(a) == 1:
            return float(a[0]), float(a[0])
        return stratified_bootstrap_ci(a[:, None], iqm, reps=2000, rng=seed)


# --- verdicts ----------------------------------------------------------------------------------

NOT_COMPARABLE = "not comparable"
INCOMPLETE = "incomplete"


def verdict(entry: Entry, arms: Sequence[ArmStats], budget_scale: float) -> str:
    """The verdict on hybrid's runs against the published figure.

    A scaled-down budget is never judged against a figure trained on the full budget:
    ``not comparable`` says so, whatever the numbers, and then says what the rule finds
    at the budget that ran.
    """
    judged = _judge(entry, arms)
    failed = sum(arm.failed for arm in arms)
    if failed:  # a run without a result could have gone either way: nothing is judged
        judged = f"{INCOMPLETE} ({failed} run{'s' * (failed > 1)} failed); without them: {judged}"
    if budget_scale < 1.0:
        return f"{NOT_COMPARABLE} (budget ×{budget_scale:g}); at this budget: {judged}"
    return judged


def _judge(entry: Entry, arms: Sequence[ArmStats]) -> str:
    if entry.kind == "return":
        return return_verdict(entry.published, arms[0])
    if entry.kind == "direction":
        return direction_verdict(arms[0], arms[1])
    if entry.kind == "time_ratio":
        return time_ratio_verdict(arms[0], arms[1], entry.published)
    return speedup_verdict(series(entry, arms)[entry.arms[0].series], entry.published)


def return_verdict(published: Published, hybrid: ArmStats) -> str:
    """Within the source's spread (its mean ± its ±), or CI overlap where it gives a CI."""
    if hybrid.n == 0 or not math.isfinite(hybrid.mean):
        return "no runs"
    if published.ci is not None:
        low, high = hybrid.iqm_ci()
        overlap = low <= published.ci[1] and published.ci[0] <= high
        return "CIs overlap" if overlap else "CIs disjoint"
    assert published.mean is not None
    spread = published.spread or 0.0
    low, high = published.mean - spread, published.mean + spread
    if low - 1e-9 <= hybrid.mean <= high + 1e-9:
        return "within spread"
    return "below spread" if hybrid.mean < low else "above spread"


def direction_verdict(a: ArmStats, b: ArmStats) -> str:
    """A's IQM at least B's (the published ordering), judged with both 95% CIs."""
    if a.n == 0 or b.n == 0:
        return "no runs"
    if len(a.finite()) < 2 or len(b.finite()) < 2:
        ahead = a.label if a.iqm >= b.iqm else b.label
        return f"too few seeds for CIs ({ahead} ahead)"
    a_low, a_high = a.iqm_ci()
    b_low, b_high = b.iqm_ci()
    if a_low > b_high:
        return f"agrees ({a.label} > {b.label}, CIs disjoint)"
    if b_low > a_high:
        return f"disagrees ({b.label} > {a.label}, CIs disjoint)"
    ahead = a.label if a.iqm >= b.iqm else b.label
    return f"inconclusive (CIs overlap; {ahead} ahead)"


def median_time(values: Sequence[float]) -> float:
    """The median of times to a target, unsolved runs counted as infinitely late (censored):
    infinite when half or more never reached it."""
    a = np.sort(np.asarray(values, dtype=float))
    return float(np.median(a)) if len(a) else float("nan")


def time_ratio_verdict(slow: ArmStats, fast: ArmStats, published: Published) -> str:
    """Median time to target of ``slow`` over ``fast`` (> 1: ``fast`` is faster)."""
    ratio = time_ratio(slow, fast)
    if math.isnan(ratio):
        return f"not reached ({fast.label} median time to target is censored)"
    where = f"ratio {ratio:.2f}" if math.isfinite(ratio) else "ratio ∞"
    if ratio > 1:
        return f"agrees ({fast.label} faster, {where})"
    return f"disagrees ({fast.label} not faster, {where})"


def time_ratio(slow: ArmStats, fast: ArmStats) -> float:
    """Median time of ``slow`` over ``fast``; NaN when ``fast``'s median is not reached."""
    t_slow, t_fast = median_time(slow.values), median_time(fast.values)
    if not math.isfinite(t_fast):
        return float("nan")
    return t_slow / t_fast if t_fast > 0 else float("nan")


SPEEDUP_TOLERANCE = 0.25
"""A measured speedup within this fraction of the published one counts as close."""


def speedups(arms: Sequence[ArmStats]) -> list[float]:
    """Each arm's mean throughput over the first arm's (one worker)."""
    base = arms[0].mean
    return [a.mean / base if base > 0 else float("nan") for a in arms]


def series(entry: Entry, arms: Sequence[ArmStats]) -> dict[str, list[ArmStats]]:
    """``arms`` (one per arm of ``entry``, in order) grouped by their arm's series, in order."""
    grouped: dict[str, list[ArmStats]] = {}
    for arm, stats in zip(entry.arms, arms, strict=True):
        grouped.setdefault(arm.series, []).append(stats)
    return grouped


def speedup_verdict(arms: Sequence[ArmStats], published: Published) -> str:
    measured = speedups(arms)
    close = [
        abs(m - p) <= SPEEDUP_TOLERANCE * p
        for m, p in zip(measured, published.values, strict=False)
        if math.isfinite(m)
    ]
    if not close:
        return "no runs"
    return f"close at {sum(close)}/{len(close)} worker counts (±{SPEEDUP_TOLERANCE:.0%})"
