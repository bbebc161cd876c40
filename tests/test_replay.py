"""Sum tree and replay buffers: sampling law, tree invariants, IS weights, storage, checkpoints."""

from __future__ import annotations

import io

import numpy as np
import pytest
from scipy.stats import chisquare

from hybrid.replay import PrioritizedReplay, SumTree, UniformReplay, beta_schedule


def _transitions(ids: np.ndarray, obs_dim: int = 2) -> dict[str, np.ndarray]:
    """Transitions whose every field encodes its id, so storage order can be read back."""
    ids = np.asarray(ids)
    return {
        "obs": np.repeat(ids[:, None], obs_dim, axis=1).astype(np.float32),
        "action": ids.astype(np.int64),
        "reward": ids.astype(np.float32),
        "next_obs": np.repeat(ids[:, None] + 0.5, obs_dim, axis=1).astype(np.float32),
        "discount": np.full(len(ids), 0.99, dtype=np.float32),
    }


def _filled(capacity: int, n: int, **kwargs: float) -> PrioritizedReplay:
    buf = PrioritizedReplay(capacity, (2,), **kwargs)
    buf.add(**_transitions(np.arange(n)))
    return buf


# --- SumTree -----------------------------------------------------------------------------


def test_tree_invariants_after_many_random_updates() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(1000)  # not a power of two: 24 padding leaves
    for _ in range(300):
        idx = rng.integers(0, 1000, size=64)  # duplicates within a batch are common
        tree.update(idx, rng.exponential(size=64))
    leaves = tree.nodes[tree.leaves :]
    assert np.isclose(tree.total, leaves.sum(), rtol=1e-12)
    # Every internal node is exactly the float sum of its two children.
    internal = np.arange(1, tree.leaves)
    np.testing.assert_array_equal(
        tree.nodes[internal], tree.nodes[2 * internal] + tree.nodes[2 * internal + 1]
    )
    assert np.all(leaves[1000:] == 0)
    np.testing.assert_array_equal(tree.priorities(np.arange(1000)), leaves[:1000])


def test_tree_duplicate_indices_last_write_wins() -> None:
    tree = SumTree(8)
    tree.update(np.array([3, 5, 3, 3]), np.array([1.0, 2.0, 7.0, 5.0]))
    assert tree[np.array([3])][0] == 5.0
    assert tree.total == 7.0
    assert tree.max_priority == 7.0  # the overwritten 7.0 was still seen


def test_tree_find_skips_zero_priority_and_padding() -> None:
    tree = SumTree(5)  # 8 leaves, 3 of them padding
    tree.update(np.arange(5), np.array([1.0, 0.0, 2.0, 3.0, 0.0]))
    # cumulative sums: [1, 1, 3, 6, 6]
    prefix = np.array([0.0, 0.999, 1.0, 2.5, 3.0, 5.999, 6.0, 7.0])
    np.testing.assert_array_equal(tree.find(prefix), [0, 0, 2, 2, 3, 3, 3, 3])


def test_tree_of_capacity_one() -> None:
    tree = SumTree(1)
    tree.update(np.array([0]), np.array([2.5]))
    assert tree.total == 2.5
    np.testing.assert_array_equal(tree.find(np.array([0.0, 2.4])), [0, 0])


def test_tree_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SumTree(0)
    tree = SumTree(4)
    with pytest.raises(ValueError, match="indices"):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="priorities"):
        tree.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(ValueError, match="priorities"):
        tree.update(np.array([0, 1]), np.array([1.0]))


# --- PrioritizedReplay -------------------------------------------------------------------


def test_sampling_frequencies_match_priorities() -> None:
    rng = np.random.default_rng(1)
    buf = _filled(16, 10, alpha=0.6)
    td = np.array([0.01, 0.1, 0.5, 1.0, 2.0, -3.0, 0.05, 4.0, 1.5, 0.7])
    buf.update_priorities(np.arange(10), td)
    counts = np.zeros(10)
    for _ in range(10_000):  # 100k draws
        _, idx, _ = buf.sample(10, beta=0.4, rng=rng)
        counts += np.bincount(idx, minlength=10)
    p = (np.abs(td) + 1e-6) ** 0.6
    expected = p / p.sum() * counts.sum()
    assert chisquare(counts, expected).pvalue > 0.001


def test_uniform_frequencies_are_uniform() -> None:
    rng = np.random.default_rng(2)
    buf = UniformReplay(16, (2,))
    buf.add(**_transitions(np.arange(10)))
    counts = np.zeros(10)
    for _ in range(10_000):
        _, idx, weights = buf.sample(10, beta=0.4, rng=rng)
        counts += np.bincount(idx, minlength=10)
        assert np.all(weights == 1.0)
    assert chisquare(counts).pvalue > 0.001


def test_new_transitions_get_max_priority_seen() -> None:
    buf = _filled(16, 4, alpha=1.0, eps=0.0)
    np.testing.assert_array_equal(buf.tree.priorities(np.arange(4)), 1.0)  # nothing seen yet
    buf.update_priorities(np.array([0, 1]), np.array([3.0, -0.5]))
    buf.add(**_transitions(np.arange(4, 6)))
    np.testing.assert_array_equal(buf.tree.priorities(np.array([4, 5])), 3.0)
    # Lowering every priority does not lower the entry priority: it is the max *seen*.
    buf.update_priorities(np.arange(6), np.full(6, 0.1))
    buf.add(**_transitions(np.array([6])))
    assert buf.tree.priorities(np.array([6]))[0] == 3.0


def test_given_priority_goes_through_alpha() -> None:
    buf = PrioritizedReplay(8, (2,), alpha=0.5, eps=0.0)
    buf.add(**_transitions(np.arange(2)), priority=np.array([4.0, -9.0]))
    np.testing.assert_allclose(buf.tree.priorities(np.arange(2)), [2.0, 3.0])


def test_importance_weights_by_hand() -> None:
    # alpha = 1, eps = 0: priorities are [1, 1, 2], total 4, so P = [1/4, 1/4, 1/2] and N = 3.
    # N * P = [3/4, 3/4, 3/2].  With batch_size 2 the strata are [0, 2) and [2, 4): the first
    # draws index 0 or 1, the second always index 2.
    # beta = 1:   w = 1 / (N P) = [4/3, 4/3, 2/3] -> / max (4/3) -> [1, 1, 0.5]
    # beta = 0.5: w = (N P)^-0.5 -> / max -> [1, 1, sqrt(0.75 / 1.5)] = [1, 1, 0.70710678]
    # beta = 0:   all ones.
    buf = PrioritizedReplay(4, (2,), alpha=1.0, eps=0.0)
    buf.add(**_transitions(np.arange(3)), priority=np.array([1.0, 1.0, 2.0]))
    for seed in range(5):
        rng = np.random.default_rng(seed)
        for beta, second in [(1.0, 0.5), (0.5, 0.70710678), (0.0, 1.0)]:
            batch, idx, weights = buf.sample(2, beta=beta, rng=rng)
            assert idx[0] in (0, 1) and idx[1] == 2
            np.testing.assert_allclose(weights, [1.0, second], rtol=1e-6)
            assert weights.dtype == np.float32
            np.testing.assert_array_equal(batch["action"], idx)


def test_batch_fields_and_dtypes() -> None:
    buf = _filled(32, 20)
    batch, idx, _ = buf.sample(8, beta=0.4, rng=np.random.default_rng(0))
    assert set(batch) == {"obs", "action", "reward", "next_obs", "discount"}
    assert batch["obs"].shape == (8, 2) and batch["obs"].dtype == np.float32
    assert batch["action"].dtype == np.int64
    assert batch["reward"].dtype == np.float32 and batch["discount"].dtype == np.float32
    np.testing.assert_array_equal(batch["obs"][:, 0], idx)
    np.testing.assert_array_equal(batch["next_obs"][:, 0], idx + 0.5)


def test_partial_buffer_never_samples_empty_slots() -> None:
    buf = _filled(100, 10)  # slots 10..99 and the tree's padding leaves hold priority 0
    rng = np.random.default_rng(0)
    for _ in range(50):
        _, idx, _ = buf.sample(10, beta=0.4, rng=rng)
        assert idx.max() < 10


@pytest.mark.parametrize("cls", [PrioritizedReplay, UniformReplay])
def test_circular_wrap_around(cls: type[PrioritizedReplay] | type[UniformReplay]) -> None:
    buf = cls(5, (2,))
    buf.add(**_transitions(np.arange(3)))  # ids 0..2 -> slots 0..2
    buf.add(**_transitions(np.arange(3, 5)))  # ids 3, 4 -> slots 3, 4
    buf.add(**_transitions(np.arange(5, 7)))  # ids 5, 6 -> slots 0, 1
    assert len(buf) == 5
    np.testing.assert_array_equal(buf.action, [5, 6, 2, 3, 4])
    # A batch longer than the buffer keeps its tail: ids 7..13 start at slot 2, the last five
    # (9..13) land on slots 4, 0, 1, 2, 3.
    buf.add(**_transitions(np.arange(7, 14)))
    np.testing.assert_array_equal(buf.action, [10, 11, 12, 13, 9])
    np.testing.assert_array_equal(buf.obs[:, 1], [10, 11, 12, 13, 9])
    assert len(buf) == 5


def test_overwritten_slot_takes_new_priority() -> None:
    buf = _filled(4, 4, alpha=1.0, eps=0.0)
    buf.update_priorities(np.arange(4), np.array([0.1, 0.2, 5.0, 0.3]))
    buf.add(**_transitions(np.array([4])), priority=np.array([0.7]))  # replaces slot 0
    np.testing.assert_allclose(buf.tree.priorities(np.arange(4)), [0.7, 0.2, 5.0, 0.3])
    assert np.isclose(buf.tree.total, 6.2)


@pytest.mark.parametrize("cls", [PrioritizedReplay, UniformReplay])
def test_state_dict_round_trip(cls: type[PrioritizedReplay] | type[UniformReplay]) -> None:
    data_rng = np.random.default_rng(3)
    src = cls(64, (2,), alpha=0.7)
    src.add(**_transitions(np.arange(50)), priority=data_rng.exponential(size=50))
    src.update_priorities(np.arange(0, 50, 3), data_rng.normal(size=17))

    # Through np.savez, as a checkpoint would carry it.
    blob = io.BytesIO()
    np.savez(blob, **src.state_dict())
    blob.seek(0)
    dst = cls(64, (2,), alpha=0.7)
    dst.load_state_dict(dict(np.load(blob)))

    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    for step in range(5):
        batch_a, idx_a, w_a = src.sample(16, beta=0.5, rng=rng_a)
        batch_b, idx_b, w_b = dst.sample(16, beta=0.5, rng=rng_b)
        np.testing.assert_array_equal(idx_a, idx_b)
        np.testing.assert_array_equal(w_a, w_b)
        for key in batch_a:
            np.testing.assert_array_equal(batch_a[key], batch_b[key])
        # Counters came across too: both wrap and reprioritize identically from here on.
        new = _transitions(np.arange(100 + 10 * step, 110 + 10 * step))
        src.add(**new)
        dst.add(**new)
        src.update_priorities(idx_a, np.full(16, step + 1.0))
        dst.update_priorities(idx_b, np.full(16, step + 1.0))


def test_state_dict_is_a_copy() -> None:
    buf = _filled(8, 4)
    state = buf.state_dict()
    buf.add(**_transitions(np.array([99])))
    assert state["action"][4] == 0 and state["size"] == 4


def test_load_state_dict_rejects_other_shapes() -> None:
    with pytest.raises(ValueError, match="obs"):
        PrioritizedReplay(8, (3,)).load_state_dict(_filled(8, 4).state_dict())
    with pytest.raises(ValueError, match="tree"):
        PrioritizedReplay(16, (2,)).load_state_dict(_filled(8, 4).state_dict())
    buf = _filled(8, 4)
    state = {**_filled(8, 6).state_dict(), "size": 9}
    with pytest.raises(ValueError, match="size"):
        buf.load_state_dict(state)
    assert len(buf) == 4 and buf.action[5] == 0  # nothing was copied


# --- validation and schedule -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"beta0": 1.2}, "beta0"),
        ({"eps": -1.0}, "eps"),
        ({"capacity": 0}, "capacity"),
    ],
)
def test_constructor_errors(kwargs: dict[str, float], name: str) -> None:
    args = {"capacity": 8, "obs_shape": (2,), **kwargs}
    with pytest.raises(ValueError, match=name):
        PrioritizedReplay(**args)


@pytest.mark.parametrize("cls", [PrioritizedReplay, UniformReplay])
def test_sample_errors(cls: type[PrioritizedReplay] | type[UniformReplay]) -> None:
    buf = cls(100, (2,))
    buf.add(**_transitions(np.arange(10)))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="replay: batch_size 64 exceeds the 10 transitions stored"):
        buf.sample(64, beta=0.4, rng=rng)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0, beta=0.4, rng=rng)
    with pytest.raises(ValueError, match="beta"):
        buf.sample(4, beta=1.5, rng=rng)
    with pytest.raises(ValueError, match="beta"):
        buf.sample(4, beta=-0.1, rng=rng)


def test_add_and_update_errors() -> None:
    buf = _filled(16, 4)
    bad = _transitions(np.arange(2))
    bad["obs"] = bad["obs"][:, :1]
    with pytest.raises(ValueError, match="obs"):
        buf.add(**bad)
    with pytest.raises(ValueError, match="priority"):
        buf.add(**_transitions(np.arange(2)), priority=np.array([1.0]))
    with pytest.raises(ValueError, match="priority"):
        buf.add(**_transitions(np.arange(2)), priority=np.array([1.0, np.nan]))
    assert len(buf) == 4  # rejected batches write nothing
    with pytest.raises(ValueError, match="td_errors"):
        buf.update_priorities(np.arange(3), np.ones(2))
    with pytest.raises(ValueError, match="indices"):
        buf.update_priorities(np.array([4]), np.ones(1))  # slot 4 holds nothing yet


def test_beta_schedule() -> None:
    assert beta_schedule(0, 100, 0.4) == 0.4
    assert beta_schedule(50, 100, 0.4) == pytest.approx(0.7)
    assert beta_schedule(100, 100, 0.4) == 1.0
    assert beta_schedule(1000, 100, 0.4) == 1.0
    with pytest.raises(ValueError, match="beta0"):
        beta_schedule(0, 100, 1.5)
    with pytest.raises(ValueError, match="total_steps"):
        beta_schedule(0, 0, 0.4)
