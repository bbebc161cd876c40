"""Replay buffers for Ape-X style n-step Q-learning (Horgan et al. 2018).

Transitions are already n-step: ``reward`` is the discounted n-step return and ``discount`` is
``gamma**n * (1 - terminated)``, so the learner's target is
``reward + discount * max_a Q(next_obs)``.

``PrioritizedReplay`` samples proportionally to ``p_i = (|delta_i| + eps)**alpha`` with importance
weights (Schaul et al. 2016); ``UniformReplay`` has the same interface for the ablation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

_FIELDS = ("obs", "action", "reward", "next_obs", "discount")


def _check_unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"replay: {name} must be in [0, 1], got {value}")


def beta_schedule(step: int, total_steps: int, beta0: float) -> float:
    """Importance-sampling exponent annealed linearly from ``beta0`` to 1 over ``total_steps``."""
    _check_unit_interval("beta0", beta0)
    if total_steps < 1:
        raise ValueError(f"replay: total_steps must be >= 1, got {total_steps}")
    frac = min(max(step / total_steps, 0.0), 1.0)
    return beta0 + frac * (1.0 - beta0)


class SumTree:
    """Binary sum tree over ``capacity`` non-negative priorities, in one float64 array.

    ``nodes`` is heap-ordered: node ``i`` has children ``2i`` and ``2i + 1``, the root is node 1
    and leaf ``j`` is node ``leaves + j`` (``leaves`` is capacity rounded up to a power of two,
    so every leaf sits at the same depth and updates/searches loop over levels, not items).
    Padding leaves stay at zero and are never returned by ``find``.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.depth = int(np.ceil(np.log2(capacity))) if capacity > 1 else 0
        self.leaves = 1 << self.depth
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)
        # Largest priority ever written; new transitions enter at this value (Schaul et al.).
        self.max_priority = 0.0

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise ValueError(f"replay: indices must be in [0, {self.capacity})")
        return indices

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set leaf priorities; with duplicate indices the last write wins."""
        indices = self._check_indices(indices).ravel()
        priorities = np.asarray(priorities, dtype=np.float64).ravel()
        if priorities.shape != indices.shape:
            raise ValueError(
                f"replay: priorities has {priorities.size} entries for {indices.size} indices"
            )
        if not np.all(np.isfinite(priorities) & (priorities >= 0)):
            raise ValueError("replay: priorities must be finite and >= 0")
        if indices.size == 0:
            return
        # numpy leaves the winner of repeated fancy-index writes unspecified, so dedupe first:
        # the first hit in the reversed array is the last write.
        uniq, first_in_reversed = np.unique(indices[::-1], return_index=True)
        self.nodes[uniq + self.leaves] = priorities[::-1][first_in_reversed]
        self.max_priority = max(self.max_priority, float(priorities.max()))

        # Recompute parents from their children, level by level. Siblings give the same parent
        # twice, but both writes store the same sum, so no dedupe is needed above the leaves;
        # recomputing (not adding deltas) also keeps float error from accumulating.
        nodes = uniq + self.leaves
        for _ in range(self.depth):
            nodes //= 2
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Leaf index ``j`` with ``cumsum[j-1] <= s < cumsum[j]`` for each prefix sum ``s``."""
        prefix = np.array(prefix_sums, dtype=np.float64)  # copied: it is consumed below
        nodes = np.ones(prefix.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sum = self.nodes[left]
            # Never step into an empty right subtree: rounding can leave s a hair above the
            # left sum at the far end, and a zero-priority leaf must not be drawn.
            go_right = (prefix >= left_sum) & (self.nodes[left + 1] > 0)
            prefix = np.where(go_right, prefix - left_sum, prefix)
            nodes = left + go_right
        return nodes - self.leaves

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[self._check_indices(indices) + self.leaves]

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        return self.priorities(indices)


class _TransitionStorage:
    """Preallocated circular storage shared by both buffers."""

    def __init__(
        self, capacity: int, obs_shape: tuple[int, ...], obs_dtype: npt.DTypeLike = np.float32
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.obs_shape = tuple(obs_shape)
        self.obs = np.zeros((capacity, *self.obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((capacity, *self.obs_shape), dtype=obs_dtype)
        # int64 rather than the smallest type that fits: the buffer does not know the action
        # count, torch.gather wants int64 indices (a narrower store means a cast per batch),
        # and at 8 bytes per transition it is ~12% of a 1M CartPole buffer.
        self.action = np.zeros(capacity, dtype=np.int64)
        self.reward = np.zeros(capacity, dtype=np.float32)
        self.discount = np.zeros(capacity, dtype=np.float32)
        self._next = 0  # slot the next transition goes to
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in _FIELDS)

    def _write(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        discount: np.ndarray,
    ) -> tuple[np.ndarray, slice]:
        """Store a batch; return the slots written and which part of the batch they hold."""
        n = len(obs)
        expected = {
            "obs": (n, *self.obs_shape),
            "action": (n,),
            "reward": (n,),
            "next_obs": (n, *self.obs_shape),
            "discount": (n,),
        }
        batch = {
            "obs": obs,
            "action": action,
            "reward": reward,
            "next_obs": next_obs,
            "discount": discount,
        }
        for name, shape in expected.items():
            got = np.shape(batch[name])
            if got != shape:
                raise ValueError(f"replay: {name} must have shape {shape}, got {got}")

        # A batch longer than the buffer would overwrite its own head: keep only its tail.
        keep = slice(max(n - self.capacity, 0), n)
        slots = (self._next + np.arange(n)[keep]) % self.capacity
        for name in _FIELDS:
            getattr(self, name)[slots] = np.asarray(batch[name])[keep]
        self._next = (self._next + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return slots, keep

    def _check_batch_size(self, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"replay: batch_size must be >= 1, got {batch_size}")
        if batch_size > self._size:
            raise ValueError(
                f"replay: batch_size {batch_size} exceeds the {self._size} transitions stored"
            )

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {name: getattr(self, name)[indices] for name in _FIELDS}

    def state_dict(self) -> dict[str, Any]:
        """Copies of the arrays plus counters; every value saves with ``np.savez`` as is."""
        state: dict[str, Any] = {name: getattr(self, name).copy() for name in _FIELDS}
        state.update(next=self._next, size=self._size)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Check everything before copying anything, so a mismatched state leaves us intact.
        for name in _FIELDS:
            mine, theirs = getattr(self, name), np.shape(state[name])
            if theirs != mine.shape:
                raise ValueError(
                    f"replay: state {name} has shape {theirs}, buffer has {mine.shape}"
                )
        # int() also accepts the 0-d arrays that np.load gives back for the counters.
        size, next_slot = int(state["size"]), int(state["next"])
        if not (0 <= size <= self.capacity and 0 <= next_slot < self.capacity):
            raise ValueError(f"replay: state size {size} / next {next_slot} do not fit capacity")
        for name in _FIELDS:
            np.copyto(getattr(self, name), state[name], casting="same_kind")
        self._size, self._next = size, next_slot


class PrioritizedReplay(_TransitionStorage):
    """Proportional prioritized replay (Schaul et al. 2016) over n-step transitions."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: npt.DTypeLike = np.float32,
        alpha: float = 0.6,
        beta0: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        _check_unit_interval("alpha", alpha)
        _check_unit_interval("beta0", beta0)
        if eps < 0:
            raise ValueError(f"replay: eps must be >= 0, got {eps}")
        super().__init__(capacity, obs_shape, obs_dtype)
        self.alpha = alpha
        self.beta0 = beta0  # kept for callers: beta = beta_schedule(step, total, buffer.beta0)
        self.eps = eps
        self.tree = SumTree(capacity)

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.tree.nodes.nbytes

    def _priority(self, td_errors: np.ndarray) -> np.ndarray:
        return (np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps) ** self.alpha

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        discount: np.ndarray,
        priority: np.ndarray | None = None,
    ) -> None:
        """Add a batch of transitions.

        ``priority`` is a raw |TD error| per transition, as Ape-X actors compute it, and goes
        through the same ``(|delta| + eps)**alpha`` as ``update_priorities``. Without it, new
        transitions get the largest priority seen so far so each is likely replayed once.
        """
        if priority is not None:
            # Checked before anything is written, so a bad batch leaves the buffer untouched.
            if np.shape(priority) != (len(obs),):
                raise ValueError(
                    f"replay: priority must have shape ({len(obs)},), got {np.shape(priority)}"
                )
            if not np.all(np.isfinite(priority)):
                raise ValueError("replay: priority must be finite")
        slots, keep = self._write(obs, action, reward, next_obs, discount)
        if priority is None:
            new = np.full(len(slots), self.tree.max_priority or 1.0)
        else:
            new = self._priority(priority)[keep]
        self.tree.update(slots, new)

    def sample(
        self, batch_size: int, beta: float, rng: np.random.Generator
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Draw ``batch_size`` transitions with P(i) = p_i / sum p, with replacement.

        Returns the batch, the indices (for ``update_priorities``) and float32 importance
        weights ``(N * P(i))**-beta`` divided by the batch maximum so they only scale down.
        """
        self._check_batch_size(batch_size)
        _check_unit_interval("beta", beta)
        total = self.tree.total
        if total <= 0:
            raise ValueError("replay: every stored priority is zero (eps = 0 and zero TD errors)")
        # Stratified: one uniform draw per equal slice of the total spreads the batch over the
        # priority mass (lower variance than batch_size independent draws, same marginals).
        segment = total / batch_size
        prefix = (np.arange(batch_size) + rng.random(batch_size)) * segment
        indices = self.tree.find(prefix)

        probs = self.tree.priorities(indices) / total
        weights = (self._size * probs) ** -beta
        weights /= weights.max()
        return self._gather(indices), indices, weights.astype(np.float32)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set p = (|td_error| + eps)**alpha for sampled transitions.

        A slot overwritten since it was sampled gets the old transition's priority; Ape-X
        accepts this staleness rather than tracking versions.
        """
        indices = np.asarray(indices, dtype=np.int64)
        if np.shape(td_errors) != indices.shape:
            raise ValueError(
                f"replay: td_errors must have shape {indices.shape}, got {np.shape(td_errors)}"
            )
        if indices.size and (indices.min() < 0 or indices.max() >= self._size):
            raise ValueError(f"replay: indices must be in [0, {self._size})")
        self.tree.update(indices, self._priority(td_errors))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(tree=self.tree.nodes.copy(), max_priority=self.tree.max_priority)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        tree_shape = np.shape(state["tree"])
        if tree_shape != self.tree.nodes.shape:
            raise ValueError(
                f"replay: state tree has shape {tree_shape}, buffer has {self.tree.nodes.shape}"
            )
        super().load_state_dict(state)
        np.copyto(self.tree.nodes, state["tree"])
        self.tree.max_priority = float(state["max_priority"])


class UniformReplay(_TransitionStorage):
    """Uniform replay with ``PrioritizedReplay``'s interface: unit weights, priorities ignored."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: npt.DTypeLike = np.float32,
        alpha: float = 0.6,
        beta0: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        # alpha/beta0/eps are accepted (and ignored) so the ablation is a one-word class swap.
        super().__init__(capacity, obs_shape, obs_dtype)
        self.alpha, self.beta0, self.eps = alpha, beta0, eps

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        discount: np.ndarray,
        priority: np.ndarray | None = None,
    ) -> None:
        self._write(obs, action, reward, next_obs, discount)

    def sample(
        self, batch_size: int, beta: float, rng: np.random.Generator
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Draw ``batch_size`` transitions uniformly with replacement; ``beta`` is unused."""
        self._check_batch_size(batch_size)
        _check_unit_interval("beta", beta)
        indices = rng.integers(0, self._size, size=batch_size)
        return self._gather(indices), indices, np.ones(batch_size, dtype=np.float32)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """No-op, so training loops need no branch for the ablation."""
