"""PPO: the clipped surrogate (Schulman et al. 2017), for single-agent tasks and as MAPPO's base.

How PPO fits a core where a task returns one payload
----------------------------------------------------
PPO's gain over A2C is that it takes many minibatch steps on one batch of data;
the clipped ratio π_θ/π_old keeps those steps near the policy that collected
the batch. One gradient of the clipped loss taken at θ_old is worth nothing
more than A2C's (the ratio is 1 and nothing is clipped), so the epochs must
happen somewhere. They happen where the schedule already allows several steps
per batch of experience:

- ``sync`` / ``async`` / ``bounded`` (payload: a direction). The worker runs
  ``ppo_epochs × ppo_minibatches`` steps of its own local Adam on its rollout
  and sends the pseudo-gradient Δ = θ_snapshot − θ_local (``Payload.DELTA``),
  which the loop applies through the server optimizer like any direction. With
  ``--optimizer sgd --lr 1`` the server applies Δ as it is: one worker then
  takes CleanRL's PPO update on its rollout (clipped surrogate and value loss,
  advantages normalized per minibatch, global-norm clipping), ``sync``
  averages the workers' local results (FedAvg's rule) and ``async`` adds each
  worker's displacement to the current θ. Not CleanRL in two defaults: value
  normalization is on (``--no-value-norm``) and the local Adam's learning rate
  does not anneal. With ``adam`` (torch's) the server treats Δ as a direction
  of its own step size — slower, but stable; ``fedadam`` is Reddi et al.'s
  rule for such a Δ. The local Adam state is worker state, kept across tasks
  as a single PPO process keeps it across iterations.
- ``hybrid`` (payload: trajectories). ``PPOLearner`` takes the epochs on the
  learner, each minibatch one server step; the ratio is taken against the
  actors' behaviour log-probabilities, so the clip also bounds the policy lag.
- ``fedavg`` (local steps on fresh rollouts): each local step is one gradient
  of ``PPOLoss`` — the clipped loss at the current local θ.

Advantage normalization (``ppo_advantage_norm``) happens where the loss is
computed: per minibatch, as CleanRL does (the single-agent default), or once per
batch, as MAPPO does (the multi-agent default), or not at all. With one
minibatch the two are the same numbers.

Value normalization (MAPPO's "ValueNorm"): the critic predicts values in units of
a running mean and standard deviation of the value targets. Those statistics
are not trainable and a gradient cannot carry them, so they cannot live in the
flat θ a gradient-pushing server updates. They live with whoever computes
targets: each worker (gradient and Δ paths) or the learner (``hybrid``). Every
worker samples the same task, so the workers' statistics estimate the same
quantity and agree ever more closely; they are independent of the scheduler and
the runtime (each worker's are a function of its own data), so serial,
processes and ray runs stay identical. A restarted worker starts them afresh.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from hybrid.algorithms.a2c import gae
from hybrid.algorithms.rollout import Rollout, concat_rollouts
from hybrid.checkpoint import check_optimizer_state
from hybrid.core.global_model import GlobalModel
from hybrid.core.learner import Learner
from hybrid.nets import FlatParams
from hybrid.protocol import Step

if TYPE_CHECKING:
    from hybrid.algorithms import AlgoSettings


class ValueNorm:
    """Running mean and variance of value targets, as a debiased exponential average.

    ``beta`` close to 1 averages over (almost) all batches seen so far, which is
    what MAPPO's ValueNorm does (beta = 0.99999): the statistics move slowly, so
    the critic's targets keep their meaning from one batch to the next.
    """

    def __init__(self, beta: float = 0.99999, eps: float = 1e-5) -> None:
        self.beta, self.eps = beta, eps
        self.mean = 0.0
        self.mean_sq = 0.0
        self.weight = 0.0

    def update(self, x: torch.Tensor) -> None:
        if x.numel() == 0:
            return
        x = x.double()
        b = self.beta
        self.mean = b * self.mean + (1 - b) * float(x.mean())
        self.mean_sq = b * self.mean_sq + (1 - b) * float((x * x).mean())
        self.weight = b * self.weight + (1 - b)

    def stats(self) -> tuple[float, float]:
        if self.weight <= 0:
            return 0.0, 1.0
        mean = self.mean / max(self.weight, self.eps)
        var = max(self.mean_sq / max(self.weight, self.eps) - mean * mean, 1e-2)
        return mean, var**0.5

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats()
        return (x - mean) / std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats()
        return x * std + mean

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "mean_sq": self.mean_sq, "weight": self.weight}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean = float(state["mean"])
        self.mean_sq = float(state["mean_sq"])
        self.weight = float(state["weight"])


def _value_norm_state(value_norm: ValueNorm | None) -> dict[str, float]:
    return value_norm.state_dict() if value_norm is not None else {}


def _load_value_norm(value_norm: ValueNorm | None, state: dict[str, Any]) -> None:
    if value_norm is not None and state.get("value_norm"):
        value_norm.load_state_dict(state["value_norm"])


@dataclass
class PPOBatch:
    """Samples of one rollout ready for the clipped loss, indexable along the first axis.

    Single-agent: ``[B, ...]`` with B = T·E. Multi-agent: ``[B, N, ...]`` with B
    joint steps and ``mask`` marking the agents that acted.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    old_logp: torch.Tensor
    old_values: torch.Tensor
    """Critic outputs when the batch was prepared (normalized units under ValueNorm)."""
    advantages: torch.Tensor
    targets: torch.Tensor
    """Value targets, in the critic's units."""
    mask: torch.Tensor | None = None
    state: torch.Tensor | None = None
    """Centralized critic input ``[B, S]`` (MAPPO)."""
    returns: torch.Tensor | None = None
    """Raw value targets, kept when the value normalization is updated per minibatch (the
    targets are then normalized in the loss, with the statistics after that update)."""

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    def take(self, index: torch.Tensor | None) -> PPOBatch:
        if index is None:
            return self
        values = {}
        for f in fields(self):
            tensor = getattr(self, f.name)
            values[f.name] = None if tensor is None else tensor[index]
        return PPOBatch(**values)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def evaluate(model: Any, batch: PPOBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log π(a|s), entropy, value) of the batch under the model's current parameters."""
    logp, entropy = model.log_prob_entropy(batch.obs, batch.actions)
    values = model.value(batch.obs) if batch.state is None else model.value(batch.obs, batch.state)
    return logp, entropy, values


def ppo_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    batch: PPOBatch,
    clip_coef: float = 0.2,
    clip_vloss: bool = True,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    value_loss: str = "mse",
    huber_delta: float = 10.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate, the (optionally clipped) value loss and the entropy bonus.

    ``value_loss`` ``huber`` takes MAPPO's released code's Huber loss (quadratic within
    ``huber_delta``, linear beyond) in place of half the squared error.
    """
    log_ratio = logp - batch.old_logp
    ratio = log_ratio.exp()
    adv = batch.advantages
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv)
    policy_loss = -masked_mean(surrogate, batch.mask)

    def error(prediction: torch.Tensor) -> torch.Tensor:
        if value_loss == "huber":  # torch's is 0.5·e² within δ: twice it matches e² there
            return 2.0 * nn.functional.huber_loss(
                prediction, batch.targets, reduction="none", delta=huber_delta
            )
        return (prediction - batch.targets).pow(2)

    value_error = error(values)
    if clip_vloss:
        # Keep the critic, too, near the values it predicted when the batch was collected.
        clipped = batch.old_values + (values - batch.old_values).clamp(-clip_coef, clip_coef)
        value_error = torch.max(value_error, error(clipped))
    value_loss_mean = 0.5 * masked_mean(value_error, batch.mask)
    entropy_mean = masked_mean(entropy, batch.mask)
    loss = policy_loss + vf_coef * value_loss_mean - ent_coef * entropy_mean
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1) - log_ratio, batch.mask)
        clipfrac = masked_mean(((ratio - 1).abs() > clip_coef).float(), batch.mask)
    return loss, {
        "losses/policy": float(policy_loss.detach()),
        "losses/value": float(value_loss_mean.detach()),
        "losses/entropy": float(entropy_mean.detach()),
        "losses/approx_kl": float(approx_kl),
        "losses/clipfrac": float(clipfrac),
    }


def normalize_advantages(advantages: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero mean, unit (sample) standard deviation over the agents that acted; masked
    slots keep their (meaningless) values: the loss weighs them by the mask."""
    valid = advantages if mask is None else advantages[mask > 0]
    if valid.numel() < 2:
        return advantages
    return (advantages - valid.mean()) / (valid.std() + 1e-8)


ADVANTAGE_NORMS = ("auto", "minibatch", "batch", "none")


def resolve_advantage_norm(setting: str, multiagent: bool) -> str:
    """``auto``: per minibatch on single-agent tasks (CleanRL), per batch on multi-agent
    ones (MAPPO, which normalizes over the whole buffer before its minibatches)."""
    if setting != "auto":
        return setting
    return "batch" if multiagent else "minibatch"


# --- single-agent rollouts -------------------------------------------------------------------


def prepare_rollout(
    model: Any,
    rollout: Rollout,
    gamma: float,
    gae_lambda: float,
    value_norm: ValueNorm | None,
    normalize_adv: bool = True,
    with_old_logp: bool = True,
) -> PPOBatch:
    """GAE advantages and value targets of a single-agent rollout, at the model's θ."""
    T, E = rollout.rewards.shape
    obs = rollout.obs.reshape(T * E, -1)
    finals = list(rollout.final_obs.items())
    # The model may be on a learner's device; GAE runs on CPU (numpy), as the rollout is.
    device = next(model.parameters()).device
    with torch.no_grad():
        inputs = [obs, rollout.last_obs] + [o.unsqueeze(0) for _, o in finals]
        raw = model.value(torch.cat(inputs).to(device)).cpu()
        v = value_norm.denormalize(raw) if value_norm is not None else raw
        rewards = rollout.rewards.numpy().copy()
        final_v = v[(T + 1) * E :].numpy()
        # A time limit is not a terminal state: bootstrap from the state it cut off.
        for k, ((t, i), _) in enumerate(finals):
            rewards[t, i] += gamma * float(final_v[k])
        values = v[: T * E].numpy().reshape(T, E)
        next_values = v[E : (T + 1) * E].numpy().reshape(T, E)
        not_done = (~(rollout.terminated | rollout.truncated)).numpy().astype(np.float32)
        adv = torch.from_numpy(gae(rewards, values, next_values, not_done, gamma, gae_lambda))
        returns = (adv + torch.from_numpy(values)).reshape(-1)
        if value_norm is not None:
            value_norm.update(returns)
            targets = value_norm.normalize(returns)
        else:
            targets = returns
        actions = rollout.actions.reshape(T * E, *rollout.actions.shape[2:])
        if rollout.behaviour_logp is not None:
            old_logp = rollout.behaviour_logp.reshape(-1)
        elif with_old_logp:
            old_logp, _ = model.log_prob_entropy(obs.to(device), actions.to(device))
            old_logp = old_logp.cpu()
        else:
            old_logp = torch.zeros(T * E)
        advantages = adv.reshape(-1)
        if normalize_adv:
            advantages = normalize_advantages(advantages, None)
    return PPOBatch(obs, actions, old_logp, raw[: T * E], advantages, targets.float())


# --- where the epochs run ----------------------------------------------------------------------

Prepare = Callable[[Any, Any, ValueNorm | None, bool, bool], PPOBatch]
"""(model, rollout, value_norm, normalize_adv, with_old_logp) -> PPOBatch."""


@dataclass(frozen=True)
class PPOSettings:
    epochs: int
    minibatches: int
    clip_coef: float
    clip_vloss: bool
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    lr: float
    adam_eps: float
    value_norm: bool
    advantage_norm: str
    """minibatch (in ``loss``), batch (when the batch is prepared) or none."""
    value_loss: str = "mse"
    """mse (half the squared error) or huber (MAPPO's released code)."""
    huber_delta: float = 10.0
    separate_clipping: bool = False
    """Clip the actor's and the critic's gradients each to ``max_grad_norm`` (MAPPO's two
    optimizers); the model names its parts of θ with ``clip_groups()``: per part, the
    slices of the flat vector it spans."""
    value_norm_per_minibatch: bool = False
    """Update the value normalization with each minibatch's returns, in the loss."""

    @property
    def batch_normalizes(self) -> bool:
        """Whether ``prepare`` normalizes the advantages of the whole batch."""
        return self.advantage_norm == "batch"

    def loss(
        self,
        model: Any,
        batch: PPOBatch,
        old_from_current: bool = False,
        value_norm: ValueNorm | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if self.value_norm_per_minibatch and value_norm is not None and batch.returns is not None:
            # MAPPO's released code: statistics updated with this minibatch, then applied
            returns = batch.returns if batch.mask is None else batch.returns[batch.mask > 0]
            value_norm.update(returns)
            targets = value_norm.normalize(batch.returns).float()
            if batch.mask is not None:
                targets = targets * batch.mask
            batch = dataclasses.replace(batch, targets=targets)
        if self.advantage_norm == "minibatch":  # a new batch: the prepared one stays raw
            advantages = normalize_advantages(batch.advantages, batch.mask)
            if batch.mask is not None:
                advantages = advantages * batch.mask
            batch = dataclasses.replace(batch, advantages=advantages)
        logp, entropy, values = evaluate(model, batch)
        if old_from_current:  # one step at θ_old: the ratio is 1 by definition
            batch.old_logp, batch.old_values = logp.detach(), values.detach()
        return ppo_loss(
            logp,
            entropy,
            values,
            batch,
            self.clip_coef,
            self.clip_vloss,
            self.ent_coef,
            self.vf_coef,
            self.value_loss,
            self.huber_delta,
        )


def minibatches(n: int, count: int, epochs: int, generator: torch.Generator) -> Iterator[Any]:
    """Index sets of ``epochs`` shuffled passes over ``n`` samples in ``count`` minibatches
    (``None``: the whole batch, which needs no shuffle)."""
    if count == 1:
        yield from (None for _ in range(epochs))
        return
    size = max(1, n // count)
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, size * count, size):
            yield order[start : start + size]


class _StatsWindow:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, stats: dict[str, float]) -> None:
        for name, value in stats.items():
            self.values.setdefault(name, []).append(value)

    def drain(self) -> dict[str, float]:
        row = {name: float(np.mean(v)) for name, v in self.values.items()}
        self.values = {}
        return row


class PPOLoss:
    """One gradient of the clipped loss on a fresh rollout (the worker's ``loss``).

    At the parameters that collected the rollout the ratio is 1, so this is the
    A2C gradient with PPO's advantage and value handling; it is what A2C on a
    multi-agent task uses, and what each ``fedavg`` local step uses.
    """

    def __init__(self, settings: PPOSettings, prepare: Prepare) -> None:
        self.settings = settings
        self.prepare = prepare
        self.value_norm = ValueNorm() if settings.value_norm else None

    def __call__(self, model: Any, rollout: Any) -> tuple[torch.Tensor, dict[str, float]]:
        s = self.settings
        batch = self.prepare(model, rollout, self.value_norm, s.batch_normalizes, False)
        return self.settings.loss(model, batch, old_from_current=True, value_norm=self.value_norm)

    def state_dict(self) -> dict[str, Any]:
        """The value normalization's statistics: worker state that a resume restores."""
        return {"value_norm": _value_norm_state(self.value_norm)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _load_value_norm(self.value_norm, state)


class LocalPPO:
    """The worker's PPO epochs on a local Adam; returns Δ = θ_snapshot − θ_local."""

    def __init__(self, settings: PPOSettings, prepare: Prepare) -> None:
        self.settings = settings
        self.prepare = prepare
        self.value_norm = ValueNorm() if settings.value_norm else None
        self.optimizer: torch.optim.Optimizer | None = None
        self.param: nn.Parameter | None = None
        self.pending_optimizer_state: dict[str, Any] | None = None
        """A restored local Adam's state, loaded when the optimizer is built."""

    def __call__(
        self, model: nn.Module, flat: FlatParams, rollout: Any, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, float]]:
        s = self.settings
        if self.optimizer is None:
            self.build(flat)
        assert self.param is not None and self.optimizer is not None
        start = flat.flat.clone()
        batch = self.prepare(model, rollout, self.value_norm, s.batch_normalizes, True)
        window = _StatsWindow()
        groups = model.clip_groups() if s.separate_clipping else [[slice(None)]]
        for index in minibatches(len(batch), s.minibatches, s.epochs, generator):
            loss, stats = s.loss(model, batch.take(index), value_norm=self.value_norm)
            flat.zero_grad()
            loss.backward()
            grad = flat.grad()
            if s.max_grad_norm > 0:
                # Adam works per element: one Adam per part is one Adam clipped per part
                for part in groups:
                    norm = float(torch.linalg.vector_norm(torch.cat([grad[i] for i in part])))
                    if norm > s.max_grad_norm:
                        for i in part:
                            grad[i].mul_(s.max_grad_norm / (norm + 1e-6))
            self.param.grad = grad
            self.optimizer.step()
            window.add(stats)
        self.param.grad = None
        delta = start - flat.flat
        return delta, window.drain()

    def build(self, flat: FlatParams, where: str = "the local optimizer") -> None:
        """Make the local Adam over ``flat`` (on the first task, or at once on a resume) and
        load a restored state into it, checked first (a CheckpointError naming ``where``)."""
        s = self.settings
        # Adam over the one flat buffer the model's parameters are views of: a single
        # tensor per step instead of one per layer (the step is a large share of PPO's cost).
        self.param = nn.Parameter(flat.flat, requires_grad=False)
        optimizer = torch.optim.Adam([self.param], lr=s.lr, eps=s.adam_eps)
        if self.pending_optimizer_state is not None:
            check_optimizer_state(self.pending_optimizer_state, optimizer, where)
            optimizer.load_state_dict(self.pending_optimizer_state)
            self.pending_optimizer_state = None
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        """Worker state that persists across tasks: the value normalization's statistics
        and the local Adam's moments."""
        optimizer = self.optimizer.state_dict() if self.optimizer is not None else None
        if optimizer is None and self.pending_optimizer_state is not None:
            optimizer = self.pending_optimizer_state  # restored, not yet used
        return {"value_norm": _value_norm_state(self.value_norm), "optimizer": optimizer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _load_value_norm(self.value_norm, state)
        if state.get("optimizer") is not None:
            if self.optimizer is not None:
                check_optimizer_state(state["optimizer"], self.optimizer, "the local optimizer")
                self.optimizer.load_state_dict(state["optimizer"])
            else:  # loaded by ``build``, which the worker calls next on a resume
                self.pending_optimizer_state = state["optimizer"]


class PPOLearner(Learner):
    """PPO epochs on the learner of the ``hybrid`` scheduler: one server step per minibatch.

    The batch's advantages and targets are computed once, at the learner's θ
    when the batch arrives; the ratio is taken against the actors' behaviour
    log-probabilities, so the clip bounds how far each step moves from the
    (possibly lagging) policy that acted.
    """

    def __init__(
        self,
        model: nn.Module,
        settings: PPOSettings,
        prepare: Prepare,
        concat: Callable[[list[Any]], Any] = concat_rollouts,
        seed: int = 0,
    ) -> None:
        from hybrid.core.learner import _LagWindow

        self.model = model
        self.flat = FlatParams(model)
        self.settings = settings
        self.prepare = prepare
        self.concat = concat
        self.value_norm = ValueNorm() if settings.value_norm else None
        self.generator = torch.Generator().manual_seed(seed)
        self.window = _StatsWindow()
        self.lags = _LagWindow()

    def steps(self, step: Step, model: GlobalModel, progress: float) -> Iterator[Step]:
        assert step.batch is not None
        self.lags.add(step.lags)
        s = self.settings
        self.flat.load(model.params)
        batch = self.prepare(
            self.model, self.concat(step.batch), self.value_norm, s.batch_normalizes, True
        )
        from hybrid.core.learner import to_device

        batch = to_device(batch, self.device)  # the epochs run where the model is
        for index in minibatches(len(batch), s.minibatches, s.epochs, self.generator):
            self.flat.load(model.params)  # each step builds on the last one applied
            self.flat.zero_grad()
            loss, stats = s.loss(self.model, batch.take(index), value_norm=self.value_norm)
            loss.backward()
            self.window.add(stats)
            yield Step(self.flat.grad(), step.lr_scale)

    def metrics(self) -> dict[str, float]:
        return self.window.drain() | self.lags.drain()

    def state_dict(self, with_replay: bool = False) -> dict[str, Any]:
        """Value normalization, the minibatch generator and the metrics not yet logged."""
        del with_replay
        return {
            "value_norm": _value_norm_state(self.value_norm),
            "generator": self.generator.get_state(),
            "window": self.window.values,
            "lags": vars(self.lags),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:  # a checkpoint from before the PPO learner saved its state
            return
        _load_value_norm(self.value_norm, state)
        self.generator.set_state(state["generator"])
        self.window.values = {k: list(v) for k, v in state["window"].items()}
        for name, values in state["lags"].items():
            setattr(self.lags, name, list(values))


# --- registry helpers (single-agent) ------------------------------------------------------------


def single_agent_prepare(settings: AlgoSettings) -> Prepare:
    gamma, gae_lambda = settings.a2c.gamma, settings.a2c.gae_lambda

    def prepare(
        model: Any,
        rollout: Rollout,
        value_norm: ValueNorm | None,
        normalize_adv: bool,
        with_old_logp: bool,
    ) -> PPOBatch:
        return prepare_rollout(
            model, rollout, gamma, gae_lambda, value_norm, normalize_adv, with_old_logp
        )

    return prepare


def _ppo(settings: AlgoSettings) -> PPOSettings:
    if settings.ppo is None:
        raise ValueError("AlgoSettings.ppo is unset: the assembly fills it for algo ppo")
    return settings.ppo


def ppo_loss_fn(settings: AlgoSettings) -> PPOLoss:
    return PPOLoss(_ppo(settings), single_agent_prepare(settings))


def ppo_local_update(settings: AlgoSettings) -> LocalPPO:
    return LocalPPO(_ppo(settings), single_agent_prepare(settings))


def ppo_learner(settings: AlgoSettings, model: nn.Module) -> PPOLearner:
    from hybrid.seeding import LEARNER, int_seed, stream

    return PPOLearner(
        model,
        _ppo(settings),
        single_agent_prepare(settings),
        seed=int_seed(stream(settings.seed, LEARNER)),
    )
