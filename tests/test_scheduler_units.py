"""The built-in schedulers' edge cases, driven by hand-made updates (no training).

Each test pins a behaviour that tests/test_schedulers.py leaves open: the exact bounds
(a lag equal to the limit, a batch exactly full, a total weight of exactly one), what a
scheduler holds before its first round and after a step, and what a step carries besides
its direction (the updates it combines, whether it is clipped).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_update

from hybrid.protocol import Payload
from hybrid.schedulers import (
    ActorLearner,
    ActorLearnerSettings,
    Async,
    Bounded,
    BoundedSettings,
    Sync,
    Verdict,
)
from hybrid.schedulers.aggregate import weighted_mean

SIZE_MESSAGE = r"^weighted_mean needs as many weights as vectors, and at least one$"
WEIGHT_MESSAGE = r"^weighted_mean needs a positive total weight$"


def _same_updates(got, expected) -> bool:
    """The step carries exactly these updates, in this order (compared by identity: an
    Update holds tensors, whose == is elementwise)."""
    return len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))


# weighted_mean


def test_weighted_mean_refuses_a_weight_count_that_differs_from_the_vectors():
    one = [torch.tensor([1.0])]
    with pytest.raises(ValueError, match=SIZE_MESSAGE):
        weighted_mean(one, [1.0, 1.0])
    with pytest.raises(ValueError, match=SIZE_MESSAGE):
        weighted_mean(one * 2, [1.0])


def test_weighted_mean_refuses_no_vectors_for_their_count_not_their_weight():
    with pytest.raises(ValueError, match=SIZE_MESSAGE):
        weighted_mean([], [])


@pytest.mark.parametrize("weights", [[0.0], [2.0, -2.0], [-1.0]])
def test_weighted_mean_refuses_a_total_weight_that_is_not_positive(weights):
    vectors = [torch.tensor([1.0]) for _ in weights]
    with pytest.raises(ValueError, match=WEIGHT_MESSAGE):
        weighted_mean(vectors, weights)


@pytest.mark.parametrize("weights", [[0.25, 0.75], [0.1, 0.3], [1.0, 0.0]])
def test_weighted_mean_accepts_a_total_weight_of_one_or_less(weights):
    a, b = torch.tensor([4.0, 0.0]), torch.tensor([0.0, 8.0])
    total = sum(weights)
    expected = a * (weights[0] / total) + b * (weights[1] / total)
    torch.testing.assert_close(weighted_mean([a, b], weights), expected)


def test_weighted_mean_of_three_uses_every_vector_and_leaves_the_inputs_alone():
    vectors = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([3.0, 3.0])]
    out = weighted_mean(vectors, [2.0, 1.0, 1.0])
    torch.testing.assert_close(out, torch.tensor([1.25, 1.25]))
    torch.testing.assert_close(vectors[0], torch.tensor([1.0, 0.0]))  # not summed in place


def test_weighted_mean_of_one_vector_is_that_vector():
    torch.testing.assert_close(
        weighted_mean([torch.tensor([2.0, -6.0])], [0.5]), torch.tensor([2.0, -6.0])
    )


# ActorLearner


def test_actor_learner_defaults_batch_eight_and_keep_a_lag_of_one_hundred():
    s = ActorLearner(2)
    assert s.workers == 2
    assert s.admit(make_update(0, 0, [0.0]), staleness=101) is Verdict.DROP
    for i in range(7):
        assert s.admit(make_update(i % 2, 0, [float(i)]), staleness=100) is Verdict.BUFFER
        assert not s.full()
    s.admit(make_update(1, 0, [7.0]), staleness=0)
    assert s.full()
    assert len(s.combine().batch) == 8


def test_actor_learner_keeps_a_trajectory_exactly_at_the_lag_limit():
    s = ActorLearner(3, ActorLearnerSettings(learner_batch=2, max_policy_lag=3))
    at_limit, too_old = make_update(0, 1, [1.0]), make_update(1, 0, [2.0])
    assert s.admit(at_limit, staleness=3) is Verdict.BUFFER
    assert s.admit(too_old, staleness=4) is Verdict.DROP
    assert not s.full()  # the dropped trajectory takes no place in the batch


def test_actor_learner_with_zero_lag_keeps_only_fresh_trajectories():
    s = ActorLearner(2, ActorLearnerSettings(learner_batch=1, max_policy_lag=0))
    assert s.admit(make_update(0, 4, [1.0]), staleness=1) is Verdict.DROP
    assert not s.full()
    assert s.admit(make_update(1, 5, [1.0]), staleness=0) is Verdict.BUFFER
    assert s.full()


def test_actor_learner_batch_carries_payloads_lags_and_updates_in_arrival_order():
    s = ActorLearner(3, ActorLearnerSettings(learner_batch=3, max_policy_lag=10))
    updates = [make_update(2, 0, [2.0]), make_update(0, 1, [0.5]), make_update(1, 2, [1.0])]
    for update, lag in zip(updates, [7, 0, 3], strict=True):
        assert s.admit(update, staleness=lag) is Verdict.BUFFER
    assert s.full()
    step = s.combine()
    assert step.direction is None  # trajectories, not a direction: the learner makes that
    assert [p is u.payload for p, u in zip(step.batch, updates, strict=True)] == [True] * 3
    assert step.lags == [7, 0, 3]
    assert _same_updates(step.updates, updates)
    assert s.buffer == []
    assert not s.full()


def test_actor_learner_is_full_from_exactly_the_batch_size():
    s = ActorLearner(2, ActorLearnerSettings(learner_batch=2, max_policy_lag=5))
    s.admit(make_update(0, 0, [1.0]), staleness=0)
    assert not s.full()
    s.admit(make_update(1, 0, [1.0]), staleness=0)
    assert s.full()
    s.admit(make_update(0, 1, [1.0]), staleness=0)  # past the batch: still full
    assert s.full()
    assert len(s.combine().batch) == 3  # and nothing buffered is left out of the step


def test_actor_learner_combines_nothing_into_no_step():
    s = ActorLearner(2, ActorLearnerSettings(learner_batch=1, max_policy_lag=0))
    assert s.combine() is None
    s.admit(make_update(0, 0, [1.0]), staleness=5)  # dropped: still nothing to combine
    assert s.combine() is None


def test_actor_learner_actors_never_wait():
    s = ActorLearner(4, ActorLearnerSettings(learner_batch=2, max_policy_lag=0))
    assert s.ready((3, 0, 2), version=11) == [3, 0, 2]
    assert s.ready([], version=11) == []


# Bounded


def test_bounded_defaults_to_a_bound_of_four_without_scaling():
    s = Bounded(2)
    s.ready([0, 1], 0)
    for _ in range(4):
        s.admit(make_update(0, 0, [1.0]), staleness=3)
        assert s.combine().lr_scale == 1.0  # staleness-aware step size is off by default
    assert s.ready([0], 4) == [0]  # 4 clocks ahead of the slowest: still within s = 4
    s.admit(make_update(0, 0, [1.0]), staleness=0)
    assert s.ready([0], 5) == []  # 5 ahead: gated


def test_bounded_clock_state_round_trips_exactly():
    s = Bounded(2, BoundedSettings(staleness_bound=1))
    assert s.state_dict() == {"clocks": [0, 0]}
    s.admit(make_update(1, 0, [1.0]), 0)
    s.reject(make_update(1, 1, [float("nan")]))
    assert s.state_dict() == {"clocks": [0, 2]}
    restored = Bounded(2, BoundedSettings(staleness_bound=1))
    restored.load_state_dict({"clocks": [0.0, 2.0]})  # stored as any number type: read back as ints
    assert restored.clocks == [0, 2] and all(type(c) is int for c in restored.clocks)
    assert restored.ready([0, 1], 0) == [0]  # the restored clocks gate as the saved ones did


# Sync


def test_sync_holds_no_round_before_the_first_and_after_each_step():
    s = Sync(2)
    assert s.full() is False
    assert s.state_dict() == {"round_open": False, "pending": []}
    # An update rejected before any round opened (a stray) changes nothing.
    assert s.reject(make_update(0, 0, [1.0])) is Verdict.DROP
    assert s.ready([0, 1], 0) == [0, 1]
    assert s.state_dict() == {"round_open": True, "pending": [0, 1]}
    s.admit(make_update(1, 0, [1.0]), 0)
    s.admit(make_update(0, 0, [3.0]), 0)
    assert s.full() is True
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert s.full() is False
    assert s.state_dict() == {"round_open": False, "pending": []}


def test_sync_restores_a_round_from_its_state():
    s = Sync(3)
    s.load_state_dict({"round_open": 1, "pending": [2.0, 0.0]})
    assert s.round_open is True
    assert s.pending == {0, 2} and all(type(w) is int for w in s.pending)
    assert s.ready([0, 1, 2], 1) == [0, 2]  # the open round's owed workers start again
    s.load_state_dict({"round_open": False, "pending": []})
    assert s.ready([0, 1, 2], 1) == [0, 1, 2]  # a closed round: the next one opens


@pytest.mark.parametrize(
    "make",
    [
        lambda: Sync(2),
        lambda: Async(2),
        lambda: Bounded(2, BoundedSettings(staleness_bound=3)),
        lambda: ActorLearner(2, ActorLearnerSettings(learner_batch=2, max_policy_lag=5)),
    ],
    ids=["sync", "async", "bounded", "hybrid"],
)
def test_a_buffered_update_keeps_its_staleness_for_the_checkpoint(make):
    """The loop checkpoints the buffer as (update, staleness) pairs (``scheduler_buffer``)
    and a resume refuses a staleness that is not a count: even a scheduler whose step
    ignores it must keep the real one."""
    s = make()
    s.ready([0, 1], 0)
    update = make_update(1, 0, [1.0])
    assert s.admit(update, staleness=2) is Verdict.BUFFER
    assert len(s.buffer) == 1
    kept, staleness = s.buffer[0]
    assert kept is update
    assert staleness == 2 and type(staleness) is int


# Scheduler (base)


def test_one_worker_is_a_valid_scheduler():
    for scheduler in (Sync(1), Async(1), Bounded(1), ActorLearner(1)):
        assert scheduler.workers == 1
    s = Sync(1)
    assert s.ready([0], 0) == [0]
    s.admit(make_update(0, 0, [5.0]), 0)
    assert s.full()
    torch.testing.assert_close(s.combine().direction, torch.tensor([5.0]))


def test_bind_hands_the_scheduler_the_model_and_its_stream():
    class Model:
        params = torch.zeros(2)
        version = 3

    s = Async(2)
    model, rng = Model(), np.random.default_rng(0)
    s.bind(model, rng)
    assert s.model is model
    assert s.rng is rng


def test_a_lone_update_is_its_own_step():
    s = Async(2)
    update = make_update(0, 0, [1.0, 2.0])
    s.admit(update, 0)
    step = s.combine()
    assert step.direction is update.payload  # not copied
    assert _same_updates(step.updates, [update])


def test_a_combined_step_carries_its_updates_in_arrival_order():
    s = Sync(3)
    s.ready([0, 1, 2], 0)
    updates = [make_update(2, 0, [3.0]), make_update(0, 0, [0.0]), make_update(1, 0, [6.0])]
    for update in updates:
        s.admit(update, 0)
    step = s.combine()
    torch.testing.assert_close(step.direction, torch.tensor([3.0]))
    assert _same_updates(step.updates, updates)


@pytest.mark.parametrize(
    ("kinds", "clip"),
    [
        ([Payload.GRADIENT], True),
        ([Payload.DELTA], False),
        ([Payload.DELTA, Payload.DELTA], False),
        ([Payload.DELTA, Payload.GRADIENT], True),
        ([Payload.GRADIENT, Payload.GRADIENT], True),
    ],
)
def test_a_step_is_clipped_unless_every_update_is_a_model_difference(kinds, clip):
    s = Sync(len(kinds))
    s.ready(list(range(len(kinds))), 0)
    for worker, kind in enumerate(kinds):
        s.admit(make_update(worker, 0, [1.0], kind=kind), 0)
    assert s.combine().clip is clip


def test_built_in_schedulers_never_finish_early_and_keep_no_counters():
    for scheduler in (Sync(2), Async(2), Bounded(2), ActorLearner(2)):
        assert scheduler.finished() is False
        assert scheduler.metrics() == {}
    assert Async(2).state_dict() == {}
    Async(2).load_state_dict({})  # nothing to restore, and no error
