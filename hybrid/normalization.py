"""Running statistics for observation normalization and reward scaling.

Observation statistics are *global-model state*. A worker normalizes with the
mean and variance delivered in its snapshot (``Snapshot.extras``), counts the
raw observations of its task (count, mean, M2) and sends that summary with its
``Update`` (``Update.obs_stats``); the global model merges the summaries as they
arrive (``GlobalModel.observe``, Chan et al.'s parallel algorithm). So every
scheduler and every runtime sees one set of statistics, evaluation uses them,
and checkpoints hold them. A worker keeps nothing of them between tasks.

Reward scaling is worker state: each worker divides its rewards by the running
standard deviation of its own discounted returns (the rule of baselines'
VecNormalize), so the scale follows the worker's own episodes; the running
returns and their statistics travel in the runner's ``state_dict`` for exact
resume. The scaled reward is what the loss sees; episode returns are always logged raw.

Both belong to the runner (``hybrid.algorithms.rollout``, ``multiagent.pettingzoo``),
which builds them from ``NormalizationSettings``. A multi-agent runner keeps
statistics of shape ``[N, D]``, one row per agent slot, each row with its own count
(``RunningMeanStd`` counts per row when its shape has two axes), so agents that are
absent are not counted and agents with different observations are not mixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

OBS_MEAN, OBS_VAR = "obs_mean", "obs_var"
"""Snapshot extras that carry the global observation statistics."""

EPS = 1e-8


@dataclass(frozen=True)
class NormalizationSettings:
    """What a runner normalizes (its own settings, not the whole ``TrainConfig``)."""

    normalize_obs: bool = False
    normalize_reward: bool = False
    obs_clip: float = 10.0
    reward_clip: float = 10.0
    gamma: float = 0.99


class RunningMeanStd:
    """Count, mean and sum of squared deviations (M2) of a stream of vectors, in float64.

    With a shape of two axes ``[N, D]`` (a multi-agent runner's agent slots) each row
    has its own count, shaped ``[N, 1]``: a row is only counted where it is present.
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.count: float | np.ndarray = (
            0.0 if len(shape) < 2 else np.zeros((*shape[:-1], 1), dtype=np.float64)
        )
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    @property
    def var(self) -> np.ndarray:
        # Before any data the variance is 1, so normalizing is the identity (mean 0).
        if np.ndim(self.count) == 0:
            return self.m2 / self.count if self.count > 0 else np.ones_like(self.m2)
        seen = np.broadcast_to(self.count > 0, self.m2.shape)
        return np.divide(self.m2, self.count, out=np.ones_like(self.m2), where=seen)

    def update(self, batch: np.ndarray, present: np.ndarray | None = None) -> None:
        """Add the rows of ``batch`` ([n, *shape]); per-row counts take a ``present`` mask
        ([n, *shape[:-1]]) of the rows to count (all when None)."""
        batch = np.asarray(batch, dtype=np.float64)
        n = batch.shape[0]
        if n == 0:
            return
        if np.ndim(self.count) == 0:
            mean = batch.mean(axis=0)
            m2 = ((batch - mean) ** 2).sum(axis=0)
            self.merge(float(n), mean, m2)
            return
        weight = np.ones(batch.shape[:-1]) if present is None else present.astype(np.float64)
        weight = weight[..., None]
        count = weight.sum(axis=0)
        mean = np.divide(
            (batch * weight).sum(axis=0),
            count,
            out=np.zeros_like(self.mean),
            where=np.broadcast_to(count > 0, self.mean.shape),
        )
        m2 = (((batch - mean) ** 2) * weight).sum(axis=0)
        self.merge(count, mean, m2)

    def merge(self, count: float | np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        """Chan, Golub & LeVeque's pairwise combination of two (count, mean, M2) summaries."""
        if np.ndim(self.count) > 0:
            self._merge_rows(np.asarray(count, dtype=np.float64), mean, m2)
            return
        if count <= 0:
            return
        total = self.count + count
        delta = np.asarray(mean, dtype=np.float64) - self.mean
        self.mean = self.mean + delta * (count / total)
        correction = delta**2 * (self.count * count / total)
        self.m2 = self.m2 + np.asarray(m2, dtype=np.float64) + correction
        self.count = total

    def _merge_rows(self, count: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        """``merge`` with a count per row; rows neither side has seen stay empty."""
        total = self.count + count
        safe_total = np.where(total > 0, total, 1.0)
        delta = np.asarray(mean, dtype=np.float64) - self.mean
        self.mean = self.mean + delta * (count / safe_total)
        correction = delta**2 * (self.count * count / safe_total)
        self.m2 = self.m2 + np.asarray(m2, dtype=np.float64) + correction
        self.count = total

    @property
    def empty(self) -> bool:
        return not np.any(np.asarray(self.count) > 0)

    def summary(self) -> dict[str, Any]:
        """Plain data (what an ``Update`` carries and a checkpoint stores)."""
        count = self.count if np.ndim(self.count) == 0 else np.array(self.count)
        return {"count": count, "mean": self.mean.copy(), "m2": self.m2.copy()}

    def load_summary(self, summary: dict[str, Any]) -> None:
        self.count = _count(summary["count"])
        self.mean = np.asarray(summary["mean"], dtype=np.float64).copy()
        self.m2 = np.asarray(summary["m2"], dtype=np.float64).copy()


def _count(count: Any) -> float | np.ndarray:
    """A summary's count: a float, or an array of per-row counts."""
    return float(count) if np.ndim(count) == 0 else np.asarray(count, dtype=np.float64).copy()


def is_finite_summary(summary: dict[str, Any]) -> bool:
    return bool(
        np.isfinite(summary["count"]).all()
        and np.isfinite(summary["mean"]).all()
        and np.isfinite(summary["m2"]).all()
    )


class GlobalObsStats:
    """The global model's observation statistics: merged from updates, sent in snapshots."""

    def __init__(self, shape: int | tuple[int, ...]) -> None:
        self.rms = RunningMeanStd(_shape(shape))

    def extras(self) -> dict[str, torch.Tensor]:
        return {
            OBS_MEAN: torch.from_numpy(self.rms.mean.astype(np.float32)),
            OBS_VAR: torch.from_numpy(self.rms.var.astype(np.float32)),
        }

    def observe(self, summary: dict[str, Any] | None) -> None:
        # A worker's summary is data about the env, not a direction: it is merged whatever
        # the scheduler does with the update, unless it is not finite.
        if summary is not None and is_finite_summary(summary):
            self.rms.merge(_count(summary["count"]), summary["mean"], summary["m2"])

    def state_dict(self) -> dict[str, Any]:
        return self.rms.summary()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_summary(state)


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


class ObsNormalizer:
    """A runner's (or the evaluator's) view: normalize with given statistics, count raw data.

    ``shape`` is ``obs_dim`` (one vector per env) or ``(N, D)`` (one row per agent slot).
    """

    def __init__(self, shape: int | tuple[int, ...], clip: float) -> None:
        self.shape = _shape(shape)
        self.clip = clip
        self.mean = np.zeros(self.shape, dtype=np.float32)
        self.inv_std = np.ones(self.shape, dtype=np.float32)
        self.task = RunningMeanStd(self.shape)

    def load(self, extras: dict[str, torch.Tensor]) -> None:
        """Take the statistics of a snapshot (absent before the first merge: identity)."""
        if OBS_MEAN in extras:
            self.set_stats(np.asarray(extras[OBS_MEAN]), np.asarray(extras[OBS_VAR]))

    def set_stats(self, mean: np.ndarray, var: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float32)
        self.inv_std = (1.0 / np.sqrt(np.asarray(var, dtype=np.float64) + EPS)).astype(np.float32)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        out = (obs - self.mean) * self.inv_std
        return np.clip(out, -self.clip, self.clip, out=out).astype(np.float32, copy=False)

    def observe(self, raw: np.ndarray, present: np.ndarray | None = None) -> None:
        """Count raw observations (``present``: which agent rows to count, per row)."""
        rows = raw.reshape(-1, *self.shape)
        if present is None:
            self.task.update(rows)
        else:
            self.task.update(rows, present.reshape(-1, *self.shape[:-1]))

    def take(self) -> dict[str, Any] | None:
        """The summary of the raw observations seen since the last call, then start afresh."""
        if self.task.empty:
            return None
        summary = self.task.summary()
        self.task = RunningMeanStd(self.shape)
        return summary

    def state_dict(self) -> dict[str, Any]:
        """The statistics in use and what the current task has counted so far."""
        return {
            "mean": self.mean.copy(),
            "inv_std": self.inv_std.copy(),
            "task": self.task.summary(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.asarray(state["mean"], dtype=np.float32).copy()
        self.inv_std = np.asarray(state["inv_std"], dtype=np.float32).copy()
        self.task.load_summary(state["task"])


class RewardScaler:
    """Divide rewards by the running std of the discounted return (per worker, per env).

    ``num_envs`` may be a shape: ``(E, N)`` keeps a return per env and agent slot, and
    one statistic over all of them.
    """

    def __init__(self, num_envs: int | tuple[int, ...], gamma: float, clip: float) -> None:
        self.gamma = gamma
        self.clip = clip
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.rms = RunningMeanStd(())

    def __call__(
        self, reward: np.ndarray, done: np.ndarray, present: np.ndarray | None = None
    ) -> np.ndarray:
        """Scaled rewards; ``present`` marks the returns to count (agents that acted)."""
        self.returns = self.returns * self.gamma + reward
        self.rms.update(self.returns if present is None else self.returns[present])
        scaled = reward / np.sqrt(self.rms.var + EPS)
        self.returns[done] = 0.0
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "rms": self.rms.summary()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = np.asarray(state["returns"], dtype=np.float64).copy()
        self.rms.load_summary(state["rms"])


class RunnerNormalization:
    """The normalization half of a runner (``hybrid.algorithms.rollout.Runner``), shared by
    the single- and multi-agent runners: they set ``obs_norm`` and ``reward_scaler``."""

    obs_norm: ObsNormalizer | None
    reward_scaler: RewardScaler | None

    def load_obs_stats(self, extras: dict[str, torch.Tensor]) -> None:
        """Normalize the next task's observations with a snapshot's statistics."""
        if self.obs_norm is not None and OBS_MEAN in extras:
            self.obs_norm.load(extras)

    def take_obs_stats(self) -> dict[str, Any] | None:
        """The raw-observation summary of the task just run (for ``Update.obs_stats``)."""
        return self.obs_norm.take() if self.obs_norm is not None else None

    def normalization_state(self) -> dict[str, Any]:
        return {
            "reward_scaler": self.reward_scaler.state_dict()
            if self.reward_scaler is not None
            else {},
            "obs_norm": self.obs_norm.state_dict() if self.obs_norm is not None else {},
        }

    def load_normalization_state(self, state: dict[str, Any]) -> None:
        # Checkpoints from before a setting was on (or before the runner kept the
        # normalizer) lack the entry: the fresh one is what they would have restored.
        if self.reward_scaler is not None and state.get("reward_scaler"):
            self.reward_scaler.load_state_dict(state["reward_scaler"])
        if self.obs_norm is not None and state.get("obs_norm"):
            self.obs_norm.load_state_dict(state["obs_norm"])


__all__ = [
    "OBS_MEAN",
    "OBS_VAR",
    "GlobalObsStats",
    "NormalizationSettings",
    "ObsNormalizer",
    "RewardScaler",
    "RunnerNormalization",
    "RunningMeanStd",
]
