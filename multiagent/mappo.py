"""MAPPO and IPPO (and A2C) on PettingZoo tasks: the model, the targets, the registry entries.

- **MAPPO** (Yu et al. 2022): PPO with a shared actor and a centralized critic
  fed the agent-specific global state — ``state()`` ⊕ the agent's own
  observation ⊕ its one-hot id — with value normalization.
- **IPPO**: the same with each agent's critic on its local observation.
- **A2C** on a multi-agent task: one gradient per task of the same loss at
  θ_old (ratio 1), independent critics unless ``--critic central``.

The epochs of MAPPO/IPPO run where ``hybrid.algorithms.ppo`` explains (locally
with a Δ payload under sync/async/bounded, on the learner under ``hybrid``).
Every agent slot's samples are weighted by whether the agent acted, so agents
that leave mid-episode, join late, or are padding never enter a loss.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from hybrid.algorithms.a2c import gae
from hybrid.algorithms.ppo import (
    LocalPPO,
    PPOBatch,
    PPOLearner,
    PPOLoss,
    PPOSettings,
    ValueNorm,
    normalize_advantages,
)
from hybrid.errors import ConfigError
from hybrid.nets import mlp
from multiagent import MultiAgentSettings
from multiagent.pettingzoo import (
    MultiAgentRollout,
    MultiAgentSpec,
    concat_multiagent,
    describe_spec,
    parse_groups,
)

if TYPE_CHECKING:
    from hybrid.algorithms import AlgoSettings

MASKED = -1e9  # logit of an action an agent does not have (finite: no NaN in the entropy)


class MultiAgentActorCritic(nn.Module):
    """Actors and critics over ``[..., N, D]`` agent rows, one network per parameter group.

    With parameter sharing (one group) a single forward pass serves all E×N rows;
    the agent's one-hot id (``agent_id``) lets the shared network tell agents
    apart. Agents with fewer actions than the widest have the rest masked; with
    fewer observation features, the padding is zeros, which moves no weight.
    """

    def __init__(
        self,
        spec: MultiAgentSpec,
        groups: list[list[int]],
        hidden: int = 64,
        layers: int = 2,
        agent_id: bool = True,
        central: bool = False,
    ) -> None:
        super().__init__()
        n, d, a = spec.n_agents, spec.obs_pad, spec.action_pad
        if central and spec.state_dim is None:
            raise ConfigError(f"critic: {spec.env_id} has no state() for a centralized critic")
        self.discrete = spec.discrete
        self.central = central
        self.agent_id = agent_id
        self.n_agents = n
        actor_in = d + (n if agent_id else 0)
        critic_in = actor_in + ((spec.state_dim or 0) if central else 0)
        self.actors = nn.ModuleList(mlp(actor_in, a, hidden, layers, 0.01) for _ in groups)
        self.critics = nn.ModuleList(mlp(critic_in, 1, hidden, layers, 1.0) for _ in groups)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(len(groups), a))
        self.single_group = len(groups) == 1 and groups[0] == list(range(n))
        group_of = torch.empty(n, dtype=torch.long)
        for g, slots in enumerate(groups):
            group_of[slots] = g
        order = torch.tensor([j for slots in groups for j in slots], dtype=torch.long)
        widths = torch.tensor(spec.action_dims)
        valid = torch.arange(a).unsqueeze(0) < widths.unsqueeze(1)  # [N, A]
        # Buffers are constants of the task, not parameters: they never travel in θ.
        self.register_buffer("ids", torch.eye(n), persistent=False)
        self.register_buffer("group_of", group_of, persistent=False)
        self.register_buffer("inverse", torch.argsort(order), persistent=False)
        self.register_buffer("valid", valid.float(), persistent=False)
        self.register_buffer("logit_mask", (~valid).float() * MASKED, persistent=False)
        self.register_buffer("last_action", widths - 1, persistent=False)
        self.slots = [torch.tensor(s, dtype=torch.long) for s in groups]

    # inputs -------------------------------------------------------------------------------------
    def _actor_in(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.agent_id:
            return obs
        return torch.cat([obs, self.ids.expand(*obs.shape[:-1], self.n_agents)], -1)

    def _per_group(self, nets: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
        if self.single_group:
            return nets[0](x)
        outs = [net(x.index_select(-2, s)) for net, s in zip(nets, self.slots, strict=True)]
        return torch.cat(outs, -2).index_select(-2, self.inverse)

    def _head(self, obs: torch.Tensor) -> torch.Tensor:
        out = self._per_group(self.actors, self._actor_in(obs))
        return out + self.logit_mask if self.discrete else out

    # the interface of hybrid.nets.ActorCritic, with an agent axis --------------------------------
    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        x = self._actor_in(obs)
        if self.central:
            if state is None:
                raise ValueError("a centralized critic needs state()")
            x = torch.cat([state.unsqueeze(-2).expand(*x.shape[:-1], state.shape[-1]), x], -1)
        return self._per_group(self.critics, x).squeeze(-1)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Sampled actions ``[..., N]`` (``generator=None``: greedy, for evaluation)."""
        out = self._head(obs)
        if not self.discrete:
            if generator is None:
                return out * self.valid
            std = self.log_std[self.group_of].exp()
            return (out + torch.randn(out.shape, generator=generator) * std) * self.valid
        if generator is None:
            return out.argmax(-1)
        cdf = torch.softmax(out, -1).cumsum(-1)
        u = torch.rand((*out.shape[:-1], 1), generator=generator)
        return torch.minimum((cdf < u).sum(-1), self.last_action)

    def act_with_log_prob(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions = self.act(obs, generator)
        logp, _ = self.log_prob_entropy(obs, actions)
        return actions, logp

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._head(obs)
        if not self.discrete:
            log_std = self.log_std[self.group_of].expand_as(out)
            logp = -((actions - out) ** 2) / (2 * torch.exp(2 * log_std)) - log_std
            logp = (logp - 0.5 * math.log(2 * math.pi)) * self.valid
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std) * self.valid
            return logp.sum(-1), entropy.sum(-1)
        logits = torch.log_softmax(out, -1)
        logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logits.exp() * logits).sum(-1)
        return logp, entropy

    def clip_groups(self) -> list[list[slice]]:
        """The actor's and the critic's parts of the flat θ (``FlatParams`` order), each a
        list of slices: MAPPO's released code clips their gradients apart."""
        actor: list[slice] = []
        critic: list[slice] = []
        offset = 0
        for name, p in self.named_parameters():
            part = critic if name.startswith("critics.") else actor
            part.append(slice(offset, offset + p.numel()))
            offset += p.numel()
        return [actor, critic]


# --- building -----------------------------------------------------------------------------------


def _family(settings: AlgoSettings) -> MultiAgentSettings:
    family = settings.family
    if not isinstance(family, MultiAgentSettings):
        raise TypeError("AlgoSettings.family: the assembly sets MultiAgentSettings on PettingZoo")
    return family


def build_model(
    settings: AlgoSettings, info: Any = None, worker_id: int = -1
) -> MultiAgentActorCritic:
    del info, worker_id
    family = _family(settings)
    spec = describe_spec(settings.env)
    return MultiAgentActorCritic(
        spec,
        parse_groups(spec, family.param_sharing),
        settings.nets.hidden,
        settings.nets.layers,
        agent_id=family.agent_id,
        central=family.critic == "central",
    )


# --- targets ------------------------------------------------------------------------------------


def prepare_multiagent(
    model: MultiAgentActorCritic,
    rollout: MultiAgentRollout,
    gamma: float,
    gae_lambda: float,
    value_norm: ValueNorm | None,
    normalize_adv: bool = True,
    with_old_logp: bool = True,
    value_norm_per_minibatch: bool = False,
) -> PPOBatch:
    """Per-agent GAE over ``[T, E·N]`` columns, masked by who acted; joint steps as samples.

    With ``value_norm_per_minibatch`` the value normalization is not updated here: the
    batch keeps its raw returns and the loss updates the statistics per minibatch.

    Termination and truncation stay apart: a terminated agent's value is cut to
    zero; a truncated one is bootstrapped from what it observed last (and the
    state then, for a centralized critic). A slot that did not act has no
    reward, no value and breaks the recursion, so it never leaks into a
    neighbour's advantage.
    """
    T, E, N = rollout.rewards.shape
    D = rollout.obs.shape[-1]
    obs = rollout.obs.reshape(T * E, N, D)
    state = None if rollout.state is None else rollout.state.reshape(T * E, -1)
    active = rollout.active
    with torch.no_grad():
        all_obs = torch.cat([obs, rollout.last_obs])
        all_state = None if state is None else torch.cat([state, rollout.last_state])
        raw_all = model.value(all_obs, all_state)  # [(T+1)·E, N]
        v_all = value_norm.denormalize(raw_all) if value_norm is not None else raw_all
        rewards = rollout.rewards.clone()
        if len(rollout.final_index):
            # Each truncated agent is evaluated in its own slot (its id and its group).
            t, e, j = rollout.final_index.unbind(1)
            rows = torch.zeros(len(t), N, D)
            rows[torch.arange(len(t)), j] = rollout.final_obs
            final_raw = model.value(rows, rollout.final_state)[torch.arange(len(t)), j]
            final_v = value_norm.denormalize(final_raw) if value_norm is not None else final_raw
            rewards[t, e, j] += gamma * final_v
        values = (v_all[: T * E].reshape(T, E, N) * active).reshape(T, E * N)
        next_values = v_all[E:].reshape(T, E * N)
        not_done = (active & ~(rollout.terminated | rollout.truncated)).reshape(T, E * N)
        adv = gae(
            rewards.reshape(T, E * N).numpy(),
            values.numpy(),
            next_values.numpy(),
            not_done.numpy().astype(np.float32),
            gamma,
            gae_lambda,
        )
        mask = active.reshape(T * E, N).float()
        advantages = torch.from_numpy(adv).reshape(T * E, N) * mask
        returns = advantages + values.reshape(T * E, N)
        if value_norm is not None:
            if not value_norm_per_minibatch:
                value_norm.update(returns[mask > 0])
            targets = value_norm.normalize(returns) * mask
        else:
            targets = returns
        actions = rollout.actions.reshape(T * E, N, *rollout.actions.shape[3:])
        if rollout.behaviour_logp is not None:
            old_logp = rollout.behaviour_logp.reshape(T * E, N)
        elif with_old_logp:
            old_logp, _ = model.log_prob_entropy(obs, actions)
        else:
            old_logp = torch.zeros(T * E, N)
        if normalize_adv:
            advantages = normalize_advantages(advantages, mask) * mask
    return PPOBatch(
        obs,
        actions,
        old_logp,
        raw_all[: T * E],
        advantages,
        targets.float(),
        mask=mask,
        state=state,
        returns=returns.float() if value_norm_per_minibatch else None,
    )


def _prepare(settings: AlgoSettings) -> Any:
    gamma, gae_lambda = settings.a2c.gamma, settings.a2c.gae_lambda
    per_minibatch = _family(settings).ppo.value_norm_per_minibatch

    def prepare(
        model: Any,
        rollout: MultiAgentRollout,
        value_norm: ValueNorm | None,
        normalize_adv: bool,
        with_old_logp: bool,
    ) -> PPOBatch:
        return prepare_multiagent(
            model,
            rollout,
            gamma,
            gae_lambda,
            value_norm,
            normalize_adv,
            with_old_logp,
            per_minibatch,
        )

    return prepare


# --- registry entries (hybrid.algorithms.Algorithm fields) ------------------------------------


def worker_settings(settings: AlgoSettings) -> PPOSettings:
    """PPO's settings for a worker on a multi-agent task; A2C's one gradient normalizes
    advantages (per batch: it is one step) only with ``--normalize-advantages``."""
    ppo = _family(settings).ppo
    if settings.algo == "a2c":
        norm = "batch" if settings.a2c.normalize_advantages else "none"
        ppo = dataclasses.replace(ppo, advantage_norm=norm)
    return ppo


def loss(settings: AlgoSettings) -> PPOLoss:
    """One gradient of the clipped loss at the acting θ (A2C; each fedavg local step)."""
    return PPOLoss(worker_settings(settings), _prepare(settings))


def local_update(settings: AlgoSettings) -> LocalPPO:
    return LocalPPO(worker_settings(settings), _prepare(settings))


def trajectory(settings: AlgoSettings) -> Any:
    return lambda model, rollout: rollout


def learner(settings: AlgoSettings, info: Any) -> PPOLearner:
    from hybrid.seeding import LEARNER, int_seed, stream

    # A2C's learner keeps PPO's advantage normalization (per batch here), not
    # --normalize-advantages, as it always has.
    ppo = _family(settings).ppo
    if settings.algo == "a2c":  # one step per batch, as IMPALA's learner takes
        ppo = dataclasses.replace(ppo, epochs=1, minibatches=1)
    return PPOLearner(
        build_model(settings),
        ppo,
        _prepare(settings),
        concat=concat_multiagent,
        seed=int_seed(stream(settings.seed, LEARNER)),
    )


def _local_update(settings: AlgoSettings) -> LocalPPO | None:
    return None if settings.algo == "a2c" else local_update(settings)


def _multiagent_algorithm() -> Any:
    from hybrid.algorithms import Algorithm

    return Algorithm(
        model=build_model,
        loss=loss,
        actor_payload=trajectory,
        learner=learner,
        records_behaviour_logp=True,
        local_update=_local_update,
    )


MULTIAGENT = _multiagent_algorithm()
"""Every algorithm name's multi-agent form (``hybrid.algorithms`` picks it on PettingZoo ids)."""
