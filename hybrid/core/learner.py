"""Learners: what turns a scheduler's combined step into directions for the global model.

For gradient-pushing schedulers the step already is a direction (``Learner``
passes it through). For actor-learner schedulers the step is a batch of
trajectories: ``TrajectoryLearner`` computes one gradient of an off-policy loss
over it (IMPALA); ``ReplayLearner`` stores transitions in a (prioritized)
replay and takes sampled minibatch steps (Ape-X). A learner reads the global
parameters afresh before each direction it yields, so consecutive steps build
on each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from hybrid.algorithms.rollout import Rollout, concat_rollouts
from hybrid.core.global_model import GlobalModel
from hybrid.nets import FlatParams
from hybrid.protocol import Step
from hybrid.replay import PrioritizedReplay, UniformReplay, beta_schedule


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (dataclass fields, dicts, lists) on ``device``.

    The learner's batch arrives from the workers on CPU. On CPU nothing is copied: ``.to``
    returns the very tensor, so a CPU run computes exactly what it did before devices.
    """
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: to_device(getattr(value, f.name), device) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    return value


class Learner:
    """Pass-through: gradients and pseudo-gradients are applied as they are."""

    device = torch.device("cpu")

    def to(self, device: torch.device) -> Learner:
        """Compute on ``device`` (the global model's): the model moves, batches follow it."""
        self.device = device
        model = getattr(self, "model", None)
        if model is not None:
            model.to(device)
            self.flat = FlatParams(model)  # .to replaced the views of the old flat buffer
        return self

    def steps(self, step: Step, model: GlobalModel, progress: float) -> Iterator[Step]:
        yield step

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self, with_replay: bool = False) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class _LagWindow:
    """Policy lag (versions) of the trajectories learned from since the last log row."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.low: list[int] = []
        self.mean: list[float] = []
        self.high: list[int] = []

    def add(self, lags: list[int] | None) -> None:
        if lags:
            self.low.append(min(lags))
            self.mean.append(float(np.mean(lags)))
            self.high.append(max(lags))

    def state_dict(self) -> dict[str, Any]:
        return {"low": list(self.low), "mean": list(self.mean), "high": list(self.high)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """A checkpoint from before the window was saved restores an empty one."""
        state = state or {}
        self.low = [int(v) for v in state.get("low", [])]
        self.mean = [float(v) for v in state.get("mean", [])]
        self.high = [int(v) for v in state.get("high", [])]

    def drain(self) -> dict[str, float]:
        if not self.mean:
            return {}
        row = {
            "sched/policy_lag_min": float(min(self.low)),
            "sched/policy_lag_mean": float(np.mean(self.mean)),
            "sched/policy_lag_max": float(max(self.high)),
        }
        self.clear()
        return row


class TrajectoryLearner(Learner):
    """One gradient per batch of B trajectories, of a loss that corrects the policy lag."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[[Any, Rollout], tuple[torch.Tensor, dict[str, float]]],
    ) -> None:
        self.model = model
        self.flat = FlatParams(model)
        self.loss_fn = loss_fn
        self.lags = _LagWindow()
        self.losses: dict[str, list[float]] = {}

    def steps(self, step: Step, model: GlobalModel, progress: float) -> Iterator[Step]:
        assert step.batch is not None
        self.lags.add(step.lags)
        self.flat.load(model.params)
        self.flat.zero_grad()
        loss, stats = self.loss_fn(self.model, to_device(concat_rollouts(step.batch), self.device))
        loss.backward()
        for name, value in stats.items():
            self.losses.setdefault(name, []).append(value)
        yield Step(self.flat.grad(), step.lr_scale)

    def metrics(self) -> dict[str, float]:
        row = {name: float(np.mean(v)) for name, v in self.losses.items()}
        self.losses = {}
        return row | self.lags.drain()

    # The window since the last log row is checkpointed: a resumed run's next row must
    # average the same steps as the uninterrupted run's.
    def state_dict(self, with_replay: bool = False) -> dict[str, Any]:
        return {
            "losses": {k: list(v) for k, v in self.losses.items()},
            "lags": self.lags.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses = {str(k): [float(x) for x in v] for k, v in state.get("losses", {}).items()}
        self.lags.load_state_dict(state.get("lags"))


class ReplayLearner(Learner):
    """Ape-X learner: actors' n-step transitions go into a replay; minibatches come out."""

    def __init__(
        self,
        model: nn.Module,
        replay: PrioritizedReplay | UniformReplay,
        loss_fn: Callable[[Any, dict[str, np.ndarray], np.ndarray], tuple[torch.Tensor, Any]],
        batch_size: int,
        updates_per_batch: int,
        learning_starts: int,
        beta0: float,
        seed: np.random.SeedSequence,
    ) -> None:
        self.model = model
        self.flat = FlatParams(model)
        self.replay = replay
        self.loss_fn = loss_fn
        self.batch_size = batch_size
        self.updates_per_batch = updates_per_batch
        self.learning_starts = max(learning_starts, batch_size)
        self.beta0 = beta0
        self.rng = np.random.default_rng(seed)
        self.lags = _LagWindow()
        self.losses: list[float] = []

    def steps(self, step: Step, model: GlobalModel, progress: float) -> Iterator[Step]:
        assert step.batch is not None
        self.lags.add(step.lags)
        for transitions in step.batch:
            self.replay.add(
                transitions["obs"],
                transitions["action"],
                transitions["reward"],
                transitions["next_obs"],
                transitions["discount"],
                transitions["priority"],
            )
        if len(self.replay) < self.learning_starts:
            return
        beta = beta_schedule(int(progress * 1000), 1000, self.beta0)
        for _ in range(self.updates_per_batch):
            self.flat.load(model.params)
            if model.target is not None:
                self.model.load_extras({"target": model.target})
            batch, indices, weights = self.replay.sample(self.batch_size, beta, self.rng)
            self.flat.zero_grad()
            loss, td_errors = self.loss_fn(self.model, batch, weights)
            loss.backward()
            self.replay.update_priorities(indices, td_errors.cpu().numpy())
            self.losses.append(float(loss.detach()))
            yield Step(self.flat.grad(), step.lr_scale)

    def state_dict(self, with_replay: bool = False) -> dict[str, Any]:
        # The replay can be large (hundreds of MB): it travels only when asked for; without
        # it a resumed learner refills from fresh experience before it learns again.
        state: dict[str, Any] = {
            "rng": self.rng,
            "losses": list(self.losses),  # the window since the last log row
            "lags": self.lags.state_dict(),
        }
        if with_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng = state["rng"]
        self.losses = [float(x) for x in state.get("losses", [])]
        self.lags.load_state_dict(state.get("lags"))
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])

    def metrics(self) -> dict[str, float]:
        row = {"losses/q": float(np.mean(self.losses))} if self.losses else {}
        self.losses = []
        return row | self.lags.drain() | {"perf/replay_size": float(len(self.replay))}
