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
returns and their statistics travel in ``Worker.state_dict`` for exact resume.
The scaled reward is what the loss sees; episode returns are always logged raw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

OBS_MEAN, OBS_VAR = "obs_mean", "obs_var"
"""Snapshot extras that carry the global observation statistics."""

EPS = 1e-8


class RunningMeanStd:
    """Count, mean and sum of squared deviations (M2) of a stream of vectors, in float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.count = 0.0
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    @property
    def var(self) -> np.ndarray:
        # Before any data the variance is 1, so normalizing is the identity (mean 0).
        return self.m2 / self.count if self.count > 0 else np.ones_like(self.m2)

    def update(self, batch: np.ndarray) -> None:
        """Add the rows of ``batch`` ([n, *shape])."""
        batch = np.asarray(batch, dtype=np.float64)
        n = batch.shape[0]
        if n == 0:
            return
        mean = batch.mean(axis=0)
        m2 = ((batch - mean) ** 2).sum(axis=0)
        self.merge(float(n), mean, m2)

    def merge(self, count: float, mean: np.ndarray, m2: np.ndarray) -> None:
        """Chan, Golub & LeVeque's pairwise combination of two (count, mean, M2) summaries."""
        if count <= 0:
            return
        total = self.count + count
        delta = np.asarray(mean, dtype=np.float64) - self.mean
        self.mean = self.mean + delta * (count / total)
        correction = delta**2 * (self.count * count / total)
        self.m2 = self.m2 + np.asarray(m2, dtype=np.float64) + correction
        self.count = total

    def summary(self) -> dict[str, Any]:
        """Plain data (what an ``Update`` carries and a checkpoint stores)."""
        return {"count": self.count, "mean": self.mean.copy(), "m2": self.m2.copy()}

    def load_summary(self, summary: dict[str, Any]) -> None:
        self.count = float(summary["count"])
        self.mean = np.asarray(summary["mean"], dtype=np.float64).copy()
        self.m2 = np.asarray(summary["m2"], dtype=np.float64).copy()


def is_finite_summary(summary: dict[str, Any]) -> bool:
    return bool(
        np.isfinite(summary["count"])
        and np.isfinite(summary["mean"]).all()
        and np.isfinite(summary["m2"]).all()
    )


class GlobalObsStats:
    """The global model's observation statistics: merged from updates, sent in snapshots."""

    def __init__(self, dim: int) -> None:
        self.rms = RunningMeanStd((dim,))

    def extras(self) -> dict[str, torch.Tensor]:
        return {
            OBS_MEAN: torch.from_numpy(self.rms.mean.astype(np.float32)),
            OBS_VAR: torch.from_numpy(self.rms.var.astype(np.float32)),
        }

    def observe(self, summary: dict[str, Any] | None) -> None:
        # A worker's summary is data about the env, not a direction: it is merged whatever
        # the scheduler does with the update, unless it is not finite.
        if summary is not None and is_finite_summary(summary):
            self.rms.merge(float(summary["count"]), summary["mean"], summary["m2"])

    def state_dict(self) -> dict[str, Any]:
        return self.rms.summary()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_summary(state)


class ObsNormalizer:
    """A worker's (or the evaluator's) view: normalize with given statistics, count raw data."""

    def __init__(self, dim: int, clip: float) -> None:
        self.clip = clip
        self.mean = np.zeros(dim, dtype=np.float32)
        self.inv_std = np.ones(dim, dtype=np.float32)
        self.task = RunningMeanStd((dim,))

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

    def observe(self, raw: np.ndarray) -> None:
        self.task.update(raw.reshape(-1, raw.shape[-1]))

    def take(self) -> dict[str, Any] | None:
        """The summary of the raw observations seen since the last call, then start afresh."""
        if self.task.count == 0:
            return None
        summary = self.task.summary()
        self.task = RunningMeanStd(self.task.mean.shape)
        return summary


class RewardScaler:
    """Divide rewards by the running std of the discounted return (per worker, per env)."""

    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.gamma = gamma
        self.clip = clip
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.rms = RunningMeanStd(())

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + reward
        self.rms.update(self.returns)
        scaled = reward / np.sqrt(self.rms.var + EPS)
        self.returns[done] = 0.0
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "rms": self.rms.summary()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = np.asarray(state["returns"], dtype=np.float64).copy()
        self.rms.load_summary(state["rms"])


__all__ = [
    "OBS_MEAN",
    "OBS_VAR",
    "GlobalObsStats",
    "ObsNormalizer",
    "RewardScaler",
    "RunningMeanStd",
]
