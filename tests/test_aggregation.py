"""Robust aggregation against references written from the papers, and their breakdown points.

References (plain Python, one coordinate or one pair at a time, as the papers define them):
Yin et al. 2018 (coordinate-wise median, Def. 1; trimmed mean, Def. 2), Blanchard et al.
2017 (Krum, Multi-Krum), Sun et al. 2019 (norm bounding).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from hybrid.aggregation import (
    AGGREGATORS,
    AggregationSettings,
    aggregate,
    bound_norms,
    coordinate_median,
    krum_scores,
    krum_selection,
    multi_krum,
    trimmed_mean,
    weighted_mean,
)
from hybrid.config import TrainConfig
from hybrid.errors import ConfigError
from hybrid.protocol import Payload, Update
from hybrid.scheduler_settings import FedAvgSettings
from hybrid.schedulers import make_settings, resolve_scheduler
from hybrid.schedulers.fedavg import FedAvg

FEDBUFF = f"{Path(__file__).parents[1] / 'examples' / 'schedulers' / 'fedbuff.py'}:FedBuff"


def rows(n: int, d: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- references from the papers ------------------------------------------------------------------


def median_reference(x: torch.Tensor) -> list[float]:
    return [statistics.median(x[:, j].tolist()) for j in range(x.shape[1])]


def trimmed_reference(x: torch.Tensor, beta: float) -> list[float]:
    n, out = x.shape[0], []
    b = int(beta * n)  # ⌊βn⌋ removed from each end (Yin et al., Def. 2)
    for j in range(x.shape[1]):
        kept = sorted(x[:, j].tolist())[b : n - b]
        out.append(sum(kept) / len(kept))
    return out


def krum_reference(x: torch.Tensor, f: int, m: int) -> list[int]:
    vs = x.tolist()
    n = len(vs)
    scores = []
    for i in range(n):
        dists = sorted(
            sum((a - b) ** 2 for a, b in zip(vs[i], vs[j], strict=True)) for j in range(n) if j != i
        )
        scores.append(sum(dists[: n - f - 2]))  # the n − f − 2 closest (Blanchard et al.)
    return sorted(sorted(range(n), key=lambda i: (scores[i], i))[:m])


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_median_is_yins_coordinate_wise_median(n):
    x = rows(n)
    assert coordinate_median(x).tolist() == pytest.approx(median_reference(x), abs=1e-12)


@pytest.mark.parametrize(("n", "beta"), [(5, 0.0), (5, 0.2), (10, 0.1), (10, 0.25), (9, 0.45)])
def test_trimmed_mean_is_yins_definition(n, beta):
    x = rows(n, seed=n)
    assert trimmed_mean(x, beta).tolist() == pytest.approx(trimmed_reference(x, beta), abs=1e-12)


@pytest.mark.parametrize(("n", "f", "m"), [(5, 1, 1), (7, 2, 1), (10, 3, 4), (9, 1, 3)])
def test_krum_and_multi_krum_select_blanchards_rows(n, f, m):
    x = rows(n, seed=10 + n)
    chosen = krum_reference(x, f, m)
    assert krum_selection(x, f, m) == chosen
    assert multi_krum(x, f, m).tolist() == pytest.approx(x[chosen].mean(0).tolist(), abs=1e-12)


def test_norm_bounding_scales_only_the_long_rows_and_keeps_their_direction():
    x = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], dtype=torch.float64)
    bounded = bound_norms(x, 1.0)
    assert bounded[0].tolist() == pytest.approx([0.6, 0.8])
    assert bounded[1].tolist() == pytest.approx([0.3, 0.4])
    assert bounded[2].tolist() == [0.0, 0.0]


def test_the_mean_is_sample_weighted():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    out = aggregate(x, [3.0, 1.0], AggregationSettings("mean"))
    assert out.tolist() == pytest.approx([0.75, 0.25])


# --- breakdown points ----------------------------------------------------------------------------


def poisoned(n: int, bad: int, value: float = 1e6) -> tuple[torch.Tensor, torch.Tensor]:
    honest = rows(n - bad, seed=3)
    attackers = torch.full((bad, honest.shape[1]), value, dtype=torch.float64)
    return torch.cat([attackers, honest]), honest


def within_honest_range(out: torch.Tensor, honest: torch.Tensor) -> bool:
    return bool(((out >= honest.min(0).values) & (out <= honest.max(0).values)).all())


def test_the_mean_breaks_with_one_arbitrary_row():
    x, honest = poisoned(9, 1)
    assert not within_honest_range(aggregate(x, [1.0] * 9, AggregationSettings()), honest)


@pytest.mark.parametrize("n", [7, 8, 9])
def test_the_median_holds_below_half_and_breaks_at_half(n):
    most = (n - 1) // 2  # the largest count that is < n/2
    x, honest = poisoned(n, most)
    assert within_honest_range(coordinate_median(x), honest)
    x, honest = poisoned(n, most + 1)
    assert not within_honest_range(coordinate_median(x), honest)


def test_the_trimmed_mean_holds_up_to_beta_n_rows():
    n, beta = 10, 0.2
    x, honest = poisoned(n, 2)  # ⌊βn⌋ = 2
    assert within_honest_range(trimmed_mean(x, beta), honest)
    x, honest = poisoned(n, 3)
    assert not within_honest_range(trimmed_mean(x, beta), honest)


def test_krum_picks_an_honest_row_when_n_exceeds_2f_plus_2():
    n, f = 9, 3  # 9 > 2·3 + 2
    x, _ = poisoned(n, f)
    assert all(i >= f for i in krum_selection(x, f, 1))
    assert all(i >= f for i in krum_selection(x, f, n - f))  # Multi-Krum's m ≤ n − f
    # f colluding rows placed together: still the honest cluster wins
    x[:f] = 50.0 + 0.001 * torch.arange(f, dtype=torch.float64)[:, None]
    assert all(i >= f for i in krum_selection(x, f, 2))


# --- settings: one-line errors before anything runs ---------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"aggregator": "bulyan"}, "aggregator"),
        ({"aggregator": "trimmed_mean", "trim_beta": 0.5}, "trim_beta"),
        ({"aggregator": "trimmed_mean", "trim_beta": -0.1}, "trim_beta"),
        ({"aggregator": "krum", "krum_f": 5}, "krum_f"),  # 10 per round: f < n/2 is not enough
        ({"aggregator": "krum", "krum_f": 4}, "krum_f"),  # n = 10 = 2f + 2
        ({"aggregator": "multi_krum", "krum_f": 1, "krum_m": 10}, "krum_m"),
        ({"norm_bound": -1.0}, "norm_bound"),
        ({"scheduler": "sync", "aggregator": "median"}, "aggregator"),
    ],
)
def test_bad_aggregation_settings_are_one_clear_error(changes, field):
    cfg = TrainConfig(scheduler="fedavg", clients=20, client_fraction=0.5).replace(**changes)
    with pytest.raises(ConfigError, match=rf"^{field}: ") as caught:
        cfg.validate()
    assert "\n" not in str(caught.value)


def test_krum_accepts_n_above_2f_plus_2():
    TrainConfig(
        scheduler="fedavg", clients=20, client_fraction=0.5, aggregator="krum", krum_f=3
    ).validate()


# --- fedavg and FedBuff use them ------------------------------------------------------------------


def _fedavg(clients: int, **settings) -> FedAvg:
    """fedavg sampling every client, bound to a seeded stream as the loop binds it."""
    scheduler = FedAvg(clients, FedAvgSettings(client_fraction=1.0, **settings))
    scheduler.bind(None, np.random.default_rng(0))
    return scheduler


def _delta(worker: int, values: list[float]) -> Update:
    return Update(worker, 0, torch.tensor(values), env_steps=10, kind=Payload.DELTA)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean", "krum"])
def test_fedavg_rounds_hold_under_a_rule_where_the_mean_breaks(rule):
    """5 clients per round, one of them sends a huge Δ: the mean follows it, the rules do not."""

    def round_direction(settings: AggregationSettings) -> torch.Tensor:
        s = _fedavg(5, aggregation=settings)
        started = s.ready(list(range(5)), 0)
        for w in started:
            s.admit(_delta(w, [1e6, -1e6] if w == 0 else [1.0 + 0.1 * w, 2.0]), 0)
        assert s.full()
        step = s.combine()
        assert step is not None and step.clip is False
        return step.direction

    mean = round_direction(AggregationSettings("mean"))
    robust = round_direction(AggregationSettings(rule, trim_beta=0.2, krum_f=1))
    assert mean[0] > 1e5
    assert 1.0 <= robust[0] <= 1.5 and robust[1] == pytest.approx(2.0)


def test_the_plain_mean_leaves_fedavg_bit_for_bit_unchanged():
    a, b = _fedavg(4), _fedavg(4, aggregation=AggregationSettings())
    for s in (a, b):
        for w in s.ready(list(range(4)), 0):
            s.admit(_delta(w, [0.1 * w, 1.0 / (w + 3)]), 0)
    assert not b.hostile_combine
    assert torch.equal(a.combine().direction, b.combine().direction)


def test_fedbuff_takes_a_robust_rule_through_its_settings():
    fedbuff = resolve_scheduler(FEDBUFF).cls
    settings = make_settings(
        fedbuff, {"buffer_size": "5", "staleness_exponent": "0", "aggregator": "median"}
    )
    s = fedbuff(5, settings)
    for w in range(5):
        s.admit(_delta(w, [1e6] if w == 0 else [float(w)]), 0)
    assert s.full()
    assert s.combine().direction.tolist() == [3.0]
    with pytest.raises(ConfigError, match="krum_f: "):
        make_settings(fedbuff, {"buffer_size": "4", "aggregator": "krum", "krum_f": "1"})


# --- the rules' edges and messages, as mutation testing pins them --------------------------------


def test_aggregation_settings_take_their_lower_bounds_and_name_what_is_allowed():
    assert AggregationSettings(aggregator="trimmed_mean", trim_beta=0.0).trim_beta == 0.0
    assert AggregationSettings(aggregator="krum", krum_f=0).krum_f == 0
    with pytest.raises(ConfigError, match="choose one of " + ", ".join(AGGREGATORS) + "$"):
        AggregationSettings(aggregator="mode")
    with pytest.raises(ConfigError, match=r"^krum_f: -1 must be >= 0$"):
        AggregationSettings(krum_f=-1)
    with pytest.raises(ConfigError, match=r"^krum_m: 0 must be >= 1$"):
        AggregationSettings(krum_m=0)


def test_client_counts_are_checked_for_krum_and_multi_krum_only():
    multi = AggregationSettings(aggregator="multi_krum", krum_f=1, krum_m=4)
    multi.check_clients(5)  # n - f = 4 rows to average: just enough
    with pytest.raises(ConfigError, match=r"^krum_m: 5 is more than n - f = 4 \(n = 5 Δs"):
        AggregationSettings(aggregator="multi_krum", krum_f=1, krum_m=5).check_clients(5)
    with pytest.raises(ConfigError, match=r"^krum_f: 1 needs more than 2\*f\+2 = 4 Δs per .* 4$"):
        AggregationSettings(aggregator="multi_krum", krum_f=1).check_clients(4)
    AggregationSettings(aggregator="mean", krum_f=3, krum_m=9).check_clients(2)


def test_weighted_mean_keeps_the_rows_dtype_and_refuses_bad_weights():
    deltas = torch.tensor([[1.0, 2.0], [4.0, -1.0]], dtype=torch.float64)
    mean = weighted_mean(deltas, [0.1, 0.3])
    assert mean.dtype == torch.float64
    torch.testing.assert_close(mean, (0.1 * deltas[0] + 0.3 * deltas[1]) / 0.4, rtol=0, atol=0)
    assert weighted_mean(deltas, [0.25, 0.25]).tolist() == [2.5, 0.5]  # a total below 1
    message = r"^weighted_mean needs one weight per row and a positive total$"
    with pytest.raises(ValueError, match=message):
        weighted_mean(deltas, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=message):
        weighted_mean(deltas, [0.0, 0.0])


def test_trimmed_mean_refuses_half():
    with pytest.raises(ValueError, match=r"^trim_beta: 0.5 is outside \[0, 0.5\)$"):
        trimmed_mean(torch.zeros(4, 2), 0.5)


def _krum_scores_by_hand(rows: list[list[float]], f: int) -> list[float]:
    n = len(rows)
    scores = []
    for i in range(n):
        others = sorted(
            sum((a - b) ** 2 for a, b in zip(rows[i], rows[j], strict=True))
            for j in range(n)
            if j != i
        )
        scores.append(sum(others[: max(n - f - 2, 1)]))
    return scores


@pytest.mark.parametrize(("n", "f"), [(2, 0), (4, 1), (5, 1), (6, 0)])
def test_krum_scores_are_blanchards_sums_of_squared_distances(n, f):
    rows = [[float(3**k % 11), float(k * k)] for k in range(n)]
    expected = _krum_scores_by_hand(rows, f)
    assert krum_scores(torch.tensor(rows), f).tolist() == pytest.approx(expected, rel=1e-12)


def test_krum_scores_of_near_rows_far_from_the_origin_are_exact():
    """The matrix-product shortcut for distances (torch takes it past 25 rows) cancels here;
    the exact differences do not."""
    rows = torch.tensor([[1e6 + 1e-3 * k, 0.0] for k in range(30)], dtype=torch.float64)
    expected = _krum_scores_by_hand(rows.tolist(), 0)
    assert krum_scores(rows, 0).tolist() == pytest.approx(expected, rel=1e-6)


def test_krum_breaks_ties_by_row_and_handles_one_or_two_rows():
    tied = torch.eye(17, 5 * 17)  # every pair at distance √2: every score equal
    assert krum_selection(tied, 0, 3) == [0, 1, 2]
    assert krum_selection(tied, 0) == [0]
    torch.testing.assert_close(multi_krum(tied, 0), tied[0])
    torch.testing.assert_close(multi_krum(tied, 0, 3), tied[:3].mean(dim=0))
    one = torch.tensor([[1.0, 2.0, 3.0]])
    assert krum_selection(one, 0) == [0]
    assert krum_scores(one, 0).tolist() == [0.0]  # no other row: nothing to sum
    torch.testing.assert_close(multi_krum(one, 0), one[0])
    two = torch.tensor([[0.0, 0.0, 0.0], [2.0, 4.0, 6.0]])
    torch.testing.assert_close(multi_krum(two, 0, 2), two.mean(dim=0))
    assert krum_selection(two, 0, 2) == [0, 1]


def test_aggregate_takes_n_by_d_rows_and_bounds_norms_first():
    with pytest.raises(
        ValueError, match=r"^aggregate needs an \[n, d\] tensor with n >= 1, got \(3,\)$"
    ):
        aggregate(torch.ones(3), [1.0], AggregationSettings())
    with pytest.raises(ValueError, match=r"got \(0, 3\)$"):
        aggregate(torch.ones(0, 3), [], AggregationSettings())
    row = torch.tensor([[3.0, 4.0]])
    torch.testing.assert_close(aggregate(row, [1.0], AggregationSettings()), row[0])
    bounded = aggregate(row, [1.0], AggregationSettings(norm_bound=0.5))
    torch.testing.assert_close(bounded, torch.tensor([0.3, 0.4]))
    torch.testing.assert_close(bound_norms(row * 2, 2.0), torch.tensor([[1.2, 1.6]]))


def test_krum_counts_rows_not_columns():
    column = torch.tensor([[1.0], [2.0], [4.0]])  # 3 rows of 1 number
    torch.testing.assert_close(multi_krum(column, 0, 3), column.mean(dim=0))
    assert krum_selection(column, 0, 2) == [0, 1]


def test_aggregate_runs_the_rule_its_settings_name_with_their_f_and_m():
    deltas = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    deltas[0] += 5
    assert not torch.equal(multi_krum(deltas, 2, 1), multi_krum(deltas, 1, 1))  # f matters
    settings = {"krum_f": 2, "krum_m": 3, "trim_beta": 0.25}
    expected = {
        "trimmed_mean": trimmed_mean(deltas, 0.25),
        "krum": multi_krum(deltas, 2, 1),  # krum_m is multi_krum's: Krum keeps one row
        "multi_krum": multi_krum(deltas, 2, 3),
        "median": coordinate_median(deltas),
    }
    for rule, direction in expected.items():
        got = aggregate(deltas, [1.0] * 8, AggregationSettings(aggregator=rule, **settings))
        assert torch.equal(got, direction), rule
