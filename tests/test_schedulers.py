"""Schedulers as pure policies, driven by hand-made updates."""

from __future__ import annotations

import pytest
import torch
from conftest import make_update

from hybrid.schedulers import SCHEDULERS, Async, Bounded, BoundedSettings, Sync, Verdict
from hybrid.schedulers.aggregate import weighted_mean


def test_registry_names_match_classes():
    assert set(SCHEDULERS) >= {"sync", "async", "bounded", "hybrid"}


def test_weighted_mean_by_samples():
    out = weighted_mean([torch.tensor([1.0, 0.0]), torch.tensor([4.0, 3.0])], [1.0, 3.0])
    assert torch.allclose(out, torch.tensor([3.25, 2.25]))
    with pytest.raises(ValueError):
        weighted_mean([], [])


def test_sync_round_waits_for_every_worker_and_averages():
    s = Sync(3)
    assert s.ready([0, 1], version=0) == []  # not everyone is idle yet
    assert s.ready([2, 0, 1], version=0) == [0, 1, 2]
    assert s.ready([], version=0) == []
    for w, v in enumerate([[3.0], [6.0], [9.0]]):
        assert s.admit(make_update(w, 0, v, env_steps=10), staleness=0) is Verdict.BUFFER
        assert s.full() == (w == 2)
    step = s.combine()
    assert torch.allclose(step.direction, torch.tensor([6.0]))
    assert step.lr_scale == 1.0
    assert s.buffer == []
    assert s.ready([0, 1, 2], version=1) == [0, 1, 2]  # the next round opens


def test_sync_weights_by_env_steps():
    s = Sync(2)
    s.ready([0, 1], 0)
    s.admit(make_update(0, 0, [0.0], env_steps=30), 0)
    s.admit(make_update(1, 0, [4.0], env_steps=10), 0)
    assert torch.allclose(s.combine().direction, torch.tensor([1.0]))


def test_async_applies_each_update_alone():
    s = Async(4)
    assert s.ready([3, 1], version=7) == [3, 1]
    assert not s.full()
    s.admit(make_update(1, 5, [2.0, -2.0]), staleness=2)
    assert s.full()
    step = s.combine()
    assert torch.equal(step.direction, torch.tensor([2.0, -2.0]))
    assert not s.full()


def test_bounded_gates_fast_workers():
    s = Bounded(3, BoundedSettings(staleness_bound=1))
    assert s.ready([0, 1, 2], 0) == [0, 1, 2]
    # worker 0 finishes twice while 1 and 2 are still on their first task
    s.admit(make_update(0, 0, [1.0]), 0)
    s.combine()
    assert s.ready([0], 1) == [0]  # clock 1 − slowest 0 <= 1: may start
    s.admit(make_update(0, 1, [1.0]), 0)
    s.combine()
    assert s.clocks == [2, 0, 0]
    assert s.ready([0], 2) == []  # 2 ahead of the slowest: must wait
    s.admit(make_update(1, 0, [1.0]), 2)
    s.combine()
    assert s.ready([0, 1], 3) == [1]  # worker 2 still holds the minimum at 0
    s.admit(make_update(2, 0, [1.0]), 3)
    s.combine()
    assert s.ready([0, 1, 2], 4) == [0, 1, 2]


def test_bounded_zero_is_bulk_synchronous():
    s = Bounded(2, BoundedSettings(staleness_bound=0))
    assert s.ready([0, 1], 0) == [0, 1]
    s.admit(make_update(0, 0, [1.0]), 0)
    s.combine()
    assert s.ready([0], 1) == []  # worker 1 has not finished clock 1
    s.admit(make_update(1, 0, [1.0]), 1)
    s.combine()
    assert s.ready([0, 1], 2) == [0, 1]


def test_bounded_staleness_aware_step_size():
    s = Bounded(2, BoundedSettings(staleness_bound=10, staleness_aware_lr=True))
    s.ready([0, 1], 0)
    s.admit(make_update(0, 0, [1.0]), staleness=0)
    assert s.combine().lr_scale == 1.0
    s.admit(make_update(1, 0, [1.0]), staleness=4)
    assert s.combine().lr_scale == pytest.approx(0.25)
    plain = Bounded(2, BoundedSettings(staleness_bound=10))
    plain.ready([0, 1], 0)
    plain.admit(make_update(1, 0, [1.0]), staleness=4)
    assert plain.combine().lr_scale == 1.0


def test_bounded_with_huge_bound_decides_like_async():
    bounded, asynchronous = Bounded(3, BoundedSettings(staleness_bound=10**9)), Async(3)
    for idle in ([0, 1, 2], [2], [0, 2], [1]):
        assert bounded.ready(idle, 0) == asynchronous.ready(idle, 0)


def test_scheduler_state_round_trip():
    s = Bounded(3, BoundedSettings(staleness_bound=2))
    s.admit(make_update(2, 0, [1.0]), 0)
    restored = Bounded(3, BoundedSettings(staleness_bound=2))
    restored.load_state_dict(s.state_dict())
    assert restored.clocks == [0, 0, 1]
    sync = Sync(2)
    sync.ready([0, 1], 0)
    sync.admit(make_update(1, 0, [1.0]), 0)
    other = Sync(2)
    other.load_state_dict(sync.state_dict())
    assert other.pending == {0} and other.round_open
    assert not other.full()


def test_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        Async(0)
    with pytest.raises(ValueError, match="staleness_bound"):
        Bounded(2, BoundedSettings(staleness_bound=-1))


def test_sync_redispatches_a_lost_task_and_never_deadlocks():
    s = Sync(3)
    assert s.ready([0, 1, 2], 0) == [0, 1, 2]
    s.admit(make_update(0, 0, [1.0]), 0)
    # Worker 1 died mid-task and was restarted: it is idle but owes the round an update.
    assert s.ready([0, 1], 0) == [1]
    s.admit(make_update(1, 0, [2.0]), 0)
    s.admit(make_update(2, 0, [3.0]), 0)
    assert s.full()
    assert torch.allclose(s.combine().direction, torch.tensor([2.0]))


def test_sync_round_closes_without_a_rejected_update():
    s = Sync(2)
    s.ready([0, 1], 0)
    s.admit(make_update(0, 0, [4.0]), 0)
    assert s.reject(make_update(1, 0, [float("nan")])) is Verdict.DROP
    assert s.full()
    assert torch.equal(s.combine().direction, torch.tensor([4.0]))
    s.ready([0, 1], 1)
    s.reject(make_update(0, 1, [1.0]))
    s.reject(make_update(1, 1, [1.0]))
    assert s.full()
    assert s.combine() is None  # nothing survived: no step, the next round opens
    assert s.ready([0, 1], 1) == [0, 1]


def test_bounded_counts_a_rejected_task_on_the_clock():
    s = Bounded(2, BoundedSettings(staleness_bound=0))
    s.ready([0, 1], 0)
    s.reject(make_update(0, 0, [1.0]))
    assert s.clocks == [1, 0]
    assert not s.full()


def test_bounded_counts_a_rejected_later_task_on_top_of_the_earlier_ones():
    """A rejected task is a finished clock like any other: worker 0's second task, rejected,
    takes its clock from 1 to 2 (not back to 1), and SSP with s = 1 then holds worker 0
    until worker 1 has finished a task."""
    s = Bounded(2, BoundedSettings(staleness_bound=1))
    assert s.ready([0, 1], 0) == [0, 1]
    s.admit(make_update(0, 0, [1.0]), 0)
    s.combine()
    assert s.reject(make_update(0, 1, [float("nan")])) is Verdict.DROP
    assert s.clocks == [2, 0]
    assert s.ready([0], 1) == []  # two clocks ahead of the slowest: s = 1 gates it
    s.admit(make_update(1, 0, [1.0]), 1)
    assert s.ready([0, 1], 2) == [0, 1]


def test_bounded_is_full_exactly_when_an_update_is_buffered():
    s = Bounded(2, BoundedSettings(staleness_bound=3))
    assert not s.full()
    assert s.combine() is None  # nothing buffered: no step, and no error
    s.admit(make_update(1, 0, [2.0]), 0)
    assert s.full()
    torch.testing.assert_close(s.combine().direction, torch.tensor([2.0]))
    assert not s.full()


def test_bounded_staleness_aware_scale_of_a_fresh_update_is_one():
    s = Bounded(2, BoundedSettings(staleness_bound=3, staleness_aware_lr=True))
    s.admit(make_update(0, 0, [1.0]), 0)
    assert s.combine().lr_scale == 1.0  # 1 / max(1, 0): a fresh update is not scaled up
    s.admit(make_update(1, 0, [1.0]), 4)
    assert s.combine().lr_scale == 0.25
