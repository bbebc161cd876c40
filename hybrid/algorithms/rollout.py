"""Stepping a worker's vector env with the current policy, batched over its envs.

A runner owns everything that lives between a worker's tasks on the env side: the
episodes in progress (current observations, returns, lengths), the envs' own state,
the reward scaler and the observation normalizer. ``state_dict`` / ``load_state_dict``
save and restore all of it, so a worker's checkpoint only adds its own generator,
codec and task counter (``hybrid.core.worker``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from hybrid.checkpoint import register_payload
from hybrid.env_state import load_vector_env_state, vector_env_state
from hybrid.envs import EnvInfo, env_family
from hybrid.nets import ActorCritic
from hybrid.normalization import (
    NormalizationSettings,
    ObsNormalizer,
    RewardScaler,
    RunnerNormalization,
)
from hybrid.plugins import resolve


@register_payload  # an actor's trajectory payload, restored from checkpoints by name
@dataclass
class Rollout:
    """T steps of E envs, time-major."""

    obs: torch.Tensor  # [T, E, obs_dim]
    actions: torch.Tensor  # [T, E] or [T, E, action_dim]
    rewards: torch.Tensor  # [T, E]
    terminated: torch.Tensor  # [T, E] bool
    truncated: torch.Tensor  # [T, E] bool
    last_obs: torch.Tensor  # [E, obs_dim], the observation after the last step
    final_obs: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    """(t, env) -> last observation of an episode cut by truncation, for bootstrapping."""
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    behaviour_logp: torch.Tensor | None = None
    """[T, E] log μ(a|s) of the acting policy, recorded when an actor-learner needs it."""

    @property
    def env_steps(self) -> int:
        return int(self.rewards.numel())


class Runner(Protocol):
    """What a worker needs of a runner (``EnvRunner``, ``multiagent.MultiAgentRunner``)."""

    num_envs: int
    obs_norm: ObsNormalizer | None
    reward_scaler: RewardScaler | None

    def collect(
        self, model: Any, steps: int, generator: torch.Generator, record_logp: bool = False
    ) -> Any: ...

    def load_obs_stats(self, extras: dict[str, torch.Tensor]) -> None: ...

    def take_obs_stats(self) -> dict[str, Any] | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], reseed: list[int]) -> None: ...

    def close(self) -> None: ...


class EnvRunner(RunnerNormalization):
    """Owns a worker's vector env and the episodes in progress across tasks."""

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        seed: int,
        info: EnvInfo,
        normalization: NormalizationSettings | None = None,
    ) -> None:
        self.envs = envs
        self.info = info
        self.obs_dtype = np.dtype(info.obs_dtype)  # uint8 for image observations
        obs, _ = envs.reset(seed=seed)
        self.obs = np.asarray(obs, dtype=self.obs_dtype)
        self.num_envs = envs.num_envs
        norm = normalization or NormalizationSettings()
        self.obs_norm = ObsNormalizer(info.obs_dim, norm.obs_clip) if norm.normalize_obs else None
        self.reward_scaler = (
            RewardScaler(self.num_envs, norm.gamma, norm.reward_clip)
            if norm.normalize_reward
            else None
        )
        self.episode_return = np.zeros(self.num_envs)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)

    def collect(
        self,
        model: ActorCritic,
        steps: int,
        generator: torch.Generator,
        record_logp: bool = False,
    ) -> Rollout:
        collection = self.start_collection(steps, record_logp)
        with torch.no_grad():  # entered once: per step it costs as much as a tiny layer
            for t in range(steps):
                obs_t = collection.policy_obs(t)
                if record_logp:
                    action_t, logp = model.act_with_log_prob(obs_t, generator)
                    collection.step(t, action_t.numpy(), logp.numpy())
                else:
                    collection.step(t, model.act(obs_t, generator).numpy())
        return collection.finish()

    def start_collection(self, steps: int, record_logp: bool = False) -> Collection:
        """A rollout of ``steps`` steps, driven one step at a time by the caller (``collect``,
        or a group of workers that share one policy forward: ``hybrid.core.worker``)."""
        return Collection(self, steps, record_logp)

    def state_dict(self) -> dict[str, Any]:
        """The episodes in progress, the envs' state, the reward scaler and normalizer."""
        return {
            "obs": self.obs.copy(),
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "envs": vector_env_state(self.envs),
            **self.normalization_state(),
        }

    def load_state_dict(self, state: dict[str, Any], reseed: list[int]) -> None:
        """Restore ``state_dict``; an env whose state is not plain data restarts its episode
        from ``reseed[i]`` (the resumed run is then no longer bit-identical)."""
        self.obs = np.asarray(state["obs"], dtype=self.obs_dtype).copy()
        self.load_normalization_state(state)
        self.episode_return = np.asarray(state["episode_return"]).copy()
        self.episode_length = np.asarray(state["episode_length"]).copy()
        for i, obs in load_vector_env_state(self.envs, state["envs"], reseed).items():
            self.obs[i] = np.asarray(obs, dtype=np.float32).reshape(-1)
            self.episode_return[i] = 0.0
            self.episode_length[i] = 0

    def close(self) -> None:
        self.envs.close()


class Collection:
    """One rollout in progress: its buffers, filled one env step at a time."""

    def __init__(self, runner: EnvRunner, steps: int, record_logp: bool) -> None:
        E, info = runner.num_envs, runner.info
        self.runner = runner
        self.norm, self.scaler = runner.obs_norm, runner.reward_scaler
        obs_dtype = runner.obs_dtype if self.norm is None else np.float32
        self.obs_buf = np.empty((steps, E, info.obs_dim), dtype=obs_dtype)
        self.raw_buf = (
            np.empty((steps, E, info.obs_dim), dtype=np.float32) if self.norm is not None else None
        )
        action_shape = (steps, E, info.action_dim) if info.continuous else (steps, E)
        self.act_buf = np.empty(action_shape, dtype=np.float32 if info.continuous else np.int64)
        self.rew_buf = np.empty((steps, E), dtype=np.float32)
        self.term_buf = np.empty((steps, E), dtype=bool)
        self.trunc_buf = np.empty((steps, E), dtype=bool)
        self.logp_buf = np.empty((steps, E), dtype=np.float32) if record_logp else None
        self.final_obs: dict[tuple[int, int], torch.Tensor] = {}
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def policy_obs(self, t: int) -> torch.Tensor:
        """What the policy sees at step ``t`` (normalized with the snapshot's statistics)."""
        obs = self.runner.obs
        if self.raw_buf is None:
            self.obs_buf[t] = obs
            return torch.from_numpy(obs)
        self.raw_buf[t] = obs
        self.obs_buf[t] = self.norm(obs)
        return torch.from_numpy(self.obs_buf[t])

    def step(self, t: int, action: np.ndarray, logp: np.ndarray | None = None) -> None:
        """Step the envs with the policy's ``action`` for ``policy_obs(t)``."""
        runner, info, norm = self.runner, self.runner.info, self.norm
        if self.logp_buf is not None:
            self.logp_buf[t] = logp
        self.act_buf[t] = action
        if info.continuous:
            action = np.clip(action, info.action_low, info.action_high)
        obs, reward, terminated, truncated, step_info = runner.envs.step(action)
        self.rew_buf[t], self.term_buf[t], self.trunc_buf[t] = reward, terminated, truncated
        if self.scaler is not None:  # the loss sees scaled rewards; episode returns stay raw
            self.rew_buf[t] = self.scaler(reward, terminated | truncated)
        runner.episode_return += reward
        runner.episode_length += 1
        done = terminated | truncated
        if done.any():
            for i in np.flatnonzero(done):
                self.returns.append(float(runner.episode_return[i]))
                self.lengths.append(int(runner.episode_length[i]))
                if truncated[i] and not terminated[i]:
                    final = np.asarray(step_info["final_obs"][i], dtype=np.float32)
                    final = final.reshape(-1) if norm is None else norm(final.reshape(-1))
                    self.final_obs[(t, int(i))] = torch.from_numpy(final)
            runner.episode_return[done] = 0.0
            runner.episode_length[done] = 0
        runner.obs = np.asarray(obs, dtype=runner.obs_dtype)

    def finish(self) -> Rollout:
        runner, norm = self.runner, self.norm
        last_obs = runner.obs.copy() if norm is None else norm(runner.obs)
        if norm is not None:
            norm.observe(self.raw_buf)
        return Rollout(
            obs=torch.from_numpy(self.obs_buf),
            actions=torch.from_numpy(self.act_buf),
            rewards=torch.from_numpy(self.rew_buf),
            terminated=torch.from_numpy(self.term_buf),
            truncated=torch.from_numpy(self.trunc_buf),
            last_obs=torch.from_numpy(last_obs),
            final_obs=self.final_obs,
            episode_returns=self.returns,
            episode_lengths=self.lengths,
            behaviour_logp=torch.from_numpy(self.logp_buf) if self.logp_buf is not None else None,
        )


def make_runner(
    envs: gym.vector.VectorEnv,
    seed: int,
    info: EnvInfo,
    normalization: NormalizationSettings | None = None,
) -> Runner:
    """The runner for a worker's envs: ``EnvRunner``, or the multi-agent one for PettingZoo."""
    family = env_family(info.env_id) if info.multiagent else None
    if family is not None:
        return resolve(family.runner)(envs, seed, info, normalization)  # type: ignore[no-any-return]
    return EnvRunner(envs, seed, info, normalization)


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Stack rollouts of equal length side by side along the env axis (a learner batch)."""
    if len(rollouts) == 1:
        return rollouts[0]
    final_obs: dict[tuple[int, int], torch.Tensor] = {}
    offset = 0
    for r in rollouts:
        for (t, i), obs in r.final_obs.items():
            final_obs[(t, i + offset)] = obs
        offset += r.rewards.shape[1]
    logps = [r.behaviour_logp for r in rollouts]
    return Rollout(
        obs=torch.cat([r.obs for r in rollouts], dim=1),
        actions=torch.cat([r.actions for r in rollouts], dim=1),
        rewards=torch.cat([r.rewards for r in rollouts], dim=1),
        terminated=torch.cat([r.terminated for r in rollouts], dim=1),
        truncated=torch.cat([r.truncated for r in rollouts], dim=1),
        last_obs=torch.cat([r.last_obs for r in rollouts], dim=0),
        final_obs=final_obs,
        behaviour_logp=None if any(lp is None for lp in logps) else torch.cat(logps, dim=1),
    )
