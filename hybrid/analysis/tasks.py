"""One score across tasks: returns normalized per env by a random and a reference score.

Returns of different envs are on different scales (Pendulum about −1,000, CartPole 500), so
[`compare`][hybrid.analysis.compare] never pools them raw. Normalized, 0 at a random policy
and 1 at a reference score, they can be: the across-tasks aggregate of Agarwal et al.
(NeurIPS 2021) with a bootstrap stratified by task
([`aggregate_across_tasks`][hybrid.stats.aggregate_across_tasks]) and performance profiles.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from hybrid.analysis.loading import CompareError
from hybrid.stats import Estimate, aggregate_across_tasks, normalize_scores


def seeded_stream(seed: int, *names: str) -> np.random.Generator:
    """One random stream per purpose, keyed by name: a group's CIs do not shift when other
    groups are added to the comparison."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


class Reference(NamedTuple):
    """The scores that normalize one env's returns to 0 (``random``) and 1 (``reference``)."""

    random: float
    reference: float
    source: str = ""


REFERENCE_SCORES: dict[str, Reference] = {
    "CartPole-v1": Reference(
        22.0, 500.0, "random: a uniform policy's mean return, about 22; reference: the maximum"
    ),
    "Acrobot-v1": Reference(
        -500.0,
        -100.0,
        "random: docs/performance.md (benchmarks/envs.py); reference: Gymnasium's threshold",
    ),
    "MountainCar-v0": Reference(
        -200.0, -110.0, "random: a uniform policy never reaches the goal; reference: Gymnasium's"
    ),
    "MountainCarContinuous-v0": Reference(
        -33.6, 90.0, "random: docs/performance.md (benchmarks/envs.py); reference: Gymnasium's"
    ),
    "LunarLander-v3": Reference(
        -271.1, 200.0, "random: docs/performance.md (benchmarks/envs.py); reference: Gymnasium's"
    ),
    "InvertedPendulum-v5": Reference(
        4.8, 1000.0, "random: docs/performance.md (benchmarks/envs.py); reference: the maximum"
    ),
}
"""Built-in random and reference scores per env id for the across-tasks aggregate. Random
scores are a uniformly random policy's mean return (measured here where the source says so);
references are Gymnasium's ``reward_threshold`` or the maximum return. Pass
``references={env: (random, reference)}`` to [`compare`][hybrid.analysis.compare] for other envs
or to use your own (e.g. a published score)."""


@dataclass
class TaskAggregate:
    """Normalized scores of one method over several tasks (envs), with the four aggregates."""

    label: str  # the group's label without the env
    key: dict[str, Any]  # the grouping fields other than env
    tasks: list[str]  # env ids, sorted
    references: dict[str, Reference]
    normalized: dict[str, list[float]]  # env id -> each run's normalized score
    iqm: Estimate
    mean: Estimate  # of the per-task means
    median: Estimate  # of the per-task means
    optimality_gap: Estimate  # mean over tasks of how far runs fall short of 1

    @property
    def n_runs(self) -> dict[str, int]:
        return {t: len(v) for t, v in self.normalized.items()}


def _reference(env: str, given: Any) -> Reference:
    """A user's reference entry, checked: (random, reference) or a Reference."""
    try:
        random, reference = float(given[0]), float(given[1])
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        raise CompareError(
            f"references: {env!r} must map to (random score, reference score), got {given!r}"
        ) from None
    source = given.source if isinstance(given, Reference) else "given by the user"
    return Reference(random, reference, source)


def resolve_references(
    envs: Sequence[str], references: Mapping[str, Any] | None
) -> dict[str, Reference] | str:
    """The reference of every env (the user's over the built-ins), or why there is none."""
    table: dict[str, Reference] = dict(REFERENCE_SCORES)
    for env, given in (references or {}).items():
        table[str(env)] = _reference(str(env), given)
    missing = [e for e in envs if e not in table]
    if missing:
        return (
            f"no random/reference score for {', '.join(missing)}; pass "
            "references={env: (random, reference)}"
        )
    for env in envs:
        r = table[env]
        if not (math.isfinite(r.random) and math.isfinite(r.reference)) or r.random == r.reference:
            raise CompareError(
                f"references: {env!r} needs finite random and reference scores that differ, "
                f"got {r.random} and {r.reference}"
            )
    return {e: table[e] for e in envs}


def across_tasks(
    scores: Mapping[str, Mapping[str, Sequence[float]]],
    references: Mapping[str, Any] | None = None,
    *,
    keys: Mapping[str, dict[str, Any]] | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, TaskAggregate]:
    """Aggregate each method's returns over tasks: ``scores[method][env]`` lists run scores.

    Every method must cover the same envs, each with at least one finite score, and every env
    needs a random and a reference score (``references`` over
    [`REFERENCE_SCORES`][hybrid.analysis.REFERENCE_SCORES]); anything else raises a one-line
    [`CompareError`][hybrid.analysis.CompareError] rather than aggregate mismatched inputs.
    Each method's bootstrap is seeded from ``seed`` and its name.
    """
    if not scores:
        raise CompareError("across tasks: no method to aggregate")
    task_sets = {m: sorted(by_env) for m, by_env in scores.items()}
    tasks = next(iter(task_sets.values()))
    if len(tasks) < 2:
        raise CompareError(f"across tasks: needs at least 2 envs, got {', '.join(tasks) or 'none'}")
    for method, envs in task_sets.items():
        if envs != tasks:
            raise CompareError(
                f"across tasks: {method!r} covers {', '.join(envs)} but "
                f"{next(iter(task_sets))!r} covers {', '.join(tasks)}; every method needs the "
                "same envs"
            )
    refs = resolve_references(tasks, references)
    if isinstance(refs, str):
        raise CompareError(f"references: {refs}")
    out: dict[str, TaskAggregate] = {}
    for method, by_env in scores.items():
        normalized: dict[str, list[float]] = {}
        for env in tasks:
            raw = np.asarray(by_env[env], dtype=float).reshape(-1)
            raw = raw[np.isfinite(raw)]
            if not raw.size:
                raise CompareError(f"across tasks: {method!r} has no finite score on {env}")
            normalized[env] = normalize_scores(raw, refs[env].random, refs[env].reference).tolist()
        agg = aggregate_across_tasks(
            list(normalized.values()), reps, confidence, seeded_stream(seed, "tasks", method)
        )
        out[method] = TaskAggregate(
            label=method,
            key=dict((keys or {}).get(method, {})),
            tasks=list(tasks),
            references=refs,
            normalized=normalized,
            iqm=agg["iqm"],
            mean=agg["mean"],
            median=agg["median"],
            optimality_gap=agg["optimality_gap"],
        )
    return out
