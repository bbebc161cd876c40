"""PettingZoo environments as a worker workload: E envs × N agents, batched.

An env id of the form ``package/module`` (``mpe2/simple_spread_v3``,
``pettingzoo.butterfly/cooperative_pong_v6``) names a Python module with a
PettingZoo ``parallel_env()`` factory, or an AEC ``env()`` factory that is
converted with ``pettingzoo.utils.aec_to_parallel``.

The adapter keeps the core single-agent shaped:

- ``PettingZooVectorEnv`` steps E copies in one process and presents them the
  way a Gymnasium vector env presents E envs, with an agent axis added:
  observations ``[E, N, D]`` (each agent's flattened observation zero-padded to
  the largest one, N = ``possible_agents``), actions ``[E, N]`` (or
  ``[E, N, A]``), and a per-env reward equal to the *per-agent mean* reward, so
  the core's ``Evaluator`` runs on it unchanged and reports per-agent mean
  episode returns (the MAPPO paper's convention).
- ``MultiAgentRunner`` has ``EnvRunner``'s ``collect()`` and returns a
  ``MultiAgentRollout`` that keeps what learning needs per agent: rewards,
  termination and truncation kept apart, an ``active`` mask (agents that have
  left, not yet joined, or were never there), ``state()`` for a centralized
  critic, and the final observations of truncated agents for bootstrapping.
  Its ``env_steps`` counts joint environment steps (T × E), not agent slots.
  It owns its state like the single-agent runner (``state_dict`` /
  ``load_state_dict``: episodes in progress, each env's state through
  ``multiagent.env_state``, reward scaler, observation normalizer), so
  multi-agent runs checkpoint and resume bit-exactly on ``serial``, and it
  normalizes observations (per agent slot) and rewards: see its docstring for
  what exactly is normalized, the centralized critic's ``state()`` included.

Agents with different observation or action spaces share the padded layout;
the model (``multiagent.mappo``) masks the actions an agent does not have and,
with per-agent parameters, gives each agent its own networks and heads.
"""

from __future__ import annotations

import copy
import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from hybrid.checkpoint import register_payload
from hybrid.errors import ConfigError
from hybrid.normalization import (
    NormalizationSettings,
    ObsNormalizer,
    RewardScaler,
    RunnerNormalization,
)
from multiagent.env_state import EnvStateMismatch, env_state, load_env_state


@dataclass(frozen=True)
class MultiAgentSpec:
    """The spaces of a PettingZoo env, as the adapter lays them out (picklable)."""

    env_id: str
    agents: tuple[Any, ...]
    """``possible_agents``: slot j of every ``[.., N, ..]`` array is ``agents[j]``."""
    obs_dims: tuple[int, ...]
    discrete: bool
    action_dims: tuple[int, ...]
    """Discrete: the number of actions; Box: the action dimension."""
    action_low: np.ndarray | None
    """Box: ``[N, A]`` lower bounds (0 on padded dimensions)."""
    action_high: np.ndarray | None
    state_dim: int | None
    """Size of the flattened ``state()``; None when the env has no ``state()``."""
    state_is_joint_obs: bool = False
    """``state()`` was found to equal the agents' observations concatenated (MPE's does):
    while every agent is present the adapter assembles it from them instead of asking."""

    @property
    def n_agents(self) -> int:
        return len(self.agents)

    @property
    def obs_pad(self) -> int:
        return max(self.obs_dims)

    @property
    def action_pad(self) -> int:
        return max(self.action_dims)

    def agent_names(self) -> list[str]:
        return [agent_name(a) for a in self.agents]


def agent_name(agent: Any) -> str:
    """How an agent id is written in config options (ids may be tuples, e.g. ('type0', 1))."""
    if isinstance(agent, tuple):
        return "_".join(str(part) for part in agent)
    return str(agent)


# --- env ids ------------------------------------------------------------------------------------


def load_env_module(env_id: str) -> Any:
    """Import the module an id names; a ConfigError says what is wrong with the id."""
    package, _, module_name = env_id.rpartition("/")
    if not package or not module_name or "/" in package:
        raise ConfigError(
            f"env: {env_id!r} is not of the form package/module "
            "(e.g. mpe2/simple_spread_v3 or pettingzoo.butterfly/cooperative_pong_v6)"
        )
    try:
        pkg = importlib.import_module(package)
    except ImportError as exc:
        raise ConfigError(
            f"env: {env_id!r} is neither a registered Gymnasium id nor a PettingZoo env: "
            f"package {package!r} cannot be imported ({exc})"
        ) from None
    try:
        return importlib.import_module(f"{package}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{module_name}":  # the module exists; one of its imports fails
            raise ConfigError(f"env: {env_id!r} cannot be imported: {exc}") from None
        known = sorted(
            m.name
            for m in pkgutil.iter_modules(getattr(pkg, "__path__", []))
            if not m.name.startswith("_")
        )
        hint = f"; {package} has: {', '.join(known)}" if known else ""
        raise ConfigError(f"env: {package!r} has no module {module_name!r}{hint}") from None


def make_parallel_env(env_id: str) -> Any:
    """A fresh PettingZoo Parallel env for ``env_id`` (AEC envs go through aec_to_parallel)."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import aec_to_parallel

    module = load_env_module(env_id)
    if callable(getattr(module, "parallel_env", None)):
        env = module.parallel_env()
    elif callable(getattr(module, "env", None)):
        aec = module.env()
        if not isinstance(aec, AECEnv):
            raise ConfigError(
                f"env: {env_id!r} is not a PettingZoo env: env() returned {type(aec).__name__}"
            )
        try:
            env = aec_to_parallel(aec)
        except AssertionError:
            # PettingZoo refuses envs whose metadata lacks is_parallelizable (turn-based games).
            raise ConfigError(
                f"env: {env_id!r} is an AEC env that PettingZoo cannot run in parallel "
                "(not is_parallelizable, e.g. a turn-based game); only simultaneous-move "
                "envs are supported"
            ) from None
    else:
        raise ConfigError(
            f"env: {env_id!r} is not a PettingZoo env: module {module.__name__} has neither "
            "parallel_env() nor env()"
        )
    if not isinstance(env, ParallelEnv):
        raise ConfigError(
            f"env: {env_id!r} is not a PettingZoo env: parallel_env() returned {type(env).__name__}"
        )
    return env


# --- spaces -------------------------------------------------------------------------------------


def _obs_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    try:
        return int(gym.spaces.flatdim(space))
    except (NotImplementedError, ValueError, TypeError):
        raise ConfigError(f"env: observation space {space} cannot be flattened") from None


def _flat_obs(space: gym.Space, obs: Any) -> np.ndarray:
    if isinstance(space, gym.spaces.Box):
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    return np.asarray(gym.spaces.flatten(space, obs), dtype=np.float32)


@functools.lru_cache(maxsize=32)
def describe_spec(env_id: str) -> MultiAgentSpec:
    """Probe the env once (cached per process); bad ids and spaces become ConfigErrors."""
    env = make_parallel_env(env_id)
    try:
        agents = getattr(env, "possible_agents", None)
        if not agents:
            raise ConfigError(
                f"env: {env_id!r} has no possible_agents; the adapter needs the fixed set of "
                "agents that may ever act (agents may leave or join, but not be created anew)"
            )
        agents = tuple(agents)
        obs_dims = tuple(_obs_dim(env.observation_space(a)) for a in agents)
        spaces = [env.action_space(a) for a in agents]
        discrete = all(isinstance(s, gym.spaces.Discrete) for s in spaces)
        boxes = all(isinstance(s, gym.spaces.Box) and len(s.shape) == 1 for s in spaces)
        if not (discrete or boxes):
            kinds = sorted({type(s).__name__ for s in spaces})
            raise ConfigError(
                f"env: {env_id!r} has action spaces {', '.join(kinds)}; supported are all "
                "Discrete or all 1-D Box"
            )
        low = high = None
        if discrete:
            action_dims = tuple(int(s.n) for s in spaces)
        else:
            action_dims = tuple(int(s.shape[0]) for s in spaces)
            low = np.zeros((len(agents), max(action_dims)), dtype=np.float32)
            high = np.zeros_like(low)
            for j, s in enumerate(spaces):
                low[j, : s.shape[0]] = s.low
                high[j, : s.shape[0]] = s.high
        observations, _ = env.reset(seed=0)
        try:
            state_dim: int | None = int(np.asarray(env.state()).size)
        except Exception:  # not implemented, or broken (rps_v2's raises TypeError): no state
            state_dim = None
        joint = state_dim is not None and _state_is_joint_obs(env, agents, observations)
        return MultiAgentSpec(
            env_id, agents, obs_dims, discrete, action_dims, low, high, state_dim, joint
        )
    finally:
        env.close()


def _state_is_joint_obs(env: Any, agents: tuple[Any, ...], observations: dict[Any, Any]) -> bool:
    """Whether ``state()`` equals the concatenated observations, on a few seeded random steps.

    Reading ``state()`` costs MPE a second observation pass per step (~17% of the
    env's time); when it is only the joint observation, the adapter builds it
    from the observations it already has.
    """
    spaces = [env.observation_space(a) for a in agents]
    rng = np.random.default_rng(0)
    for _ in range(4):
        if set(observations) != set(agents):
            return False
        joint = np.concatenate(
            [_flat_obs(s, observations[a]) for s, a in zip(spaces, agents, strict=True)]
        )
        state = np.asarray(env.state(), dtype=np.float32).reshape(-1)
        if joint.shape != state.shape or not np.array_equal(joint, state):
            return False
        actions = {}
        for a in env.agents:
            space = env.action_space(a)
            actions[a] = (
                int(space.start + rng.integers(space.n))
                if isinstance(space, gym.spaces.Discrete)
                else rng.uniform(space.low, space.high).astype(space.dtype)
            )
        observations = env.step(actions)[0]
    return True


def describe(env_id: str) -> Any:
    """The core's ``EnvInfo`` of a PettingZoo env (``obs_dim`` is the padded agent observation)."""
    from hybrid.envs import EnvInfo

    spec = describe_spec(env_id)
    return EnvInfo(
        env_id,
        spec.obs_pad,
        spec.action_pad,
        not spec.discrete,
        spec.action_low,
        spec.action_high,
        None,  # no solved threshold: cooperative tasks run to their budget
        multiagent=True,
        n_agents=spec.n_agents,
    )


def parse_groups(spec: MultiAgentSpec, param_sharing: str) -> list[list[int]]:
    """Agent slots that share one network: ``all``, ``none`` or ``a,b;c`` (names of agents)."""
    n = spec.n_agents
    if param_sharing == "all":
        return [list(range(n))]
    if param_sharing == "none":
        return [[j] for j in range(n)]
    names = spec.agent_names()
    index = {name: j for j, name in enumerate(names)}
    groups: list[list[int]] = []
    seen: set[int] = set()
    for part in param_sharing.split(";"):
        group = []
        for name in (s.strip() for s in part.split(",")):
            if name not in index:
                raise ConfigError(
                    f"param_sharing: {name!r} is not an agent of {spec.env_id} "
                    f"(its agents: {', '.join(names)})"
                )
            if index[name] in seen:
                raise ConfigError(f"param_sharing: agent {name!r} is in two groups")
            seen.add(index[name])
            group.append(index[name])
        groups.append(group)
    missing = [names[j] for j in range(n) if j not in seen]
    if missing:
        raise ConfigError(
            f"param_sharing: agents {', '.join(missing)} are in no group; "
            "list every agent once (groups separated by ';', agents by ',')"
        )
    return groups


# --- the vector env -----------------------------------------------------------------------------


class PettingZooVectorEnv:
    """E Parallel envs stepped in turn, laid out as ``[E, N, ...]``; finished envs reset at once.

    ``step`` returns what a Gymnasium vector env returns (observations, a per-env
    reward, terminated, truncated, info), so the core's evaluator needs nothing
    new; the per-agent detail a learner needs is in ``info``:

    - ``agent_reward``, ``agent_terminated``, ``agent_truncated`` ``[E, N]`` — of
      the agents that acted; an agent's termination and truncation stay apart;
    - ``active`` ``[E, N]`` — agents present for the *next* action;
    - ``final_obs`` ``[E, N, D]`` — the observation each agent that finished
      this step was handed (before an env's reset overwrites it);
    - ``final_state`` ``[E, S]`` — ``state()`` after the step, before a reset
      (with ``with_state``), and ``state`` ``[E, S]`` — after it.

    The per-env reward is the sum of the agents' rewards over ``N``: an episode's
    sum of it is the per-agent mean episode return.
    """

    def __init__(self, env_id: str, num_envs: int) -> None:
        self.spec = describe_spec(env_id)
        self.num_envs = num_envs
        self.envs = [make_parallel_env(env_id) for _ in range(num_envs)]
        self.with_state = False
        """Also read ``state()`` every step (a centralized critic sets this)."""
        spec = self.spec
        self.index = {agent: j for j, agent in enumerate(spec.agents)}
        probe = self.envs[0]
        self.obs_spaces = [probe.observation_space(a) for a in spec.agents]
        self.action_spaces = [probe.action_space(a) for a in spec.agents]
        self.box_obs = all(isinstance(s, gym.spaces.Box) for s in self.obs_spaces)
        n, d = spec.n_agents, spec.obs_pad
        self.obs = np.zeros((num_envs, n, d), dtype=np.float32)
        self.active = np.zeros((num_envs, n), dtype=bool)
        self.state = np.zeros((num_envs, spec.state_dim or 0), dtype=np.float32)
        # Each env draws the seed of its next episode from a stream its first seed starts,
        # so a run is reproducible even for envs whose unseeded reset draws fresh entropy.
        self.episode_seeds: list[np.random.Generator | None] = [None] * num_envs
        self.state_index = np.concatenate(
            [j * d + np.arange(dim) for j, dim in enumerate(spec.obs_dims)]
        )

    def _read_state(self, e: int, observed: int) -> None:
        if self.spec.state_is_joint_obs and observed == self.spec.n_agents:
            self.state[e] = self.obs[e].reshape(-1)[self.state_index]
        else:
            self.state[e] = np.asarray(self.envs[e].state(), dtype=np.float32).reshape(-1)

    def _write_obs(self, e: int, observations: dict[Any, Any]) -> None:
        row = self.obs[e]
        for agent, obs in observations.items():
            j = self.index.get(agent)
            if j is None:
                raise RuntimeError(f"{self.spec.env_id}: agent {agent!r} is not in possible_agents")
            flat = _flat_obs(self.obs_spaces[j], obs)
            row[j, : flat.shape[0]] = flat
            row[j, flat.shape[0] :] = 0.0

    def _reset_env(self, e: int, seed: int | None) -> None:
        env = self.envs[e]
        observations, _ = env.reset(seed=seed)
        self.obs[e] = 0.0
        self._write_obs(e, observations)
        self.active[e] = [a in observations for a in self.spec.agents]
        if self.with_state:
            self._read_state(e, len(observations))

    def reset(
        self, seed: int | list[int] | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; an int seeds env i with ``seed + i`` (Gymnasium's convention)."""
        del options
        if isinstance(seed, int):
            seeds: list[int | None] = [seed + i for i in range(self.num_envs)]
        elif seed is None:
            seeds = [None] * self.num_envs
        else:
            seeds = list(seed)
        for e in range(self.num_envs):
            s = seeds[e]
            self.episode_seeds[e] = None if s is None else np.random.default_rng(s)
            self._reset_env(e, s)
        return self.obs.copy(), {"active": self.active.copy(), "state": self.state.copy()}

    def _env_action(self, j: int, action: np.ndarray) -> Any:
        space = self.action_spaces[j]
        if self.spec.discrete:
            return int(action) + int(space.start)
        dim = self.spec.action_dims[j]
        return np.clip(action[:dim], space.low, space.high).astype(space.dtype)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        spec = self.spec
        E, N = self.num_envs, spec.n_agents
        agent_reward = np.zeros((E, N), dtype=np.float32)
        agent_term = np.zeros((E, N), dtype=bool)
        agent_trunc = np.zeros((E, N), dtype=bool)
        final_obs = np.zeros_like(self.obs)
        final_state = self.state.copy()
        env_terminated = np.zeros(E, dtype=bool)
        env_truncated = np.zeros(E, dtype=bool)
        agents = spec.agents
        for e, env in enumerate(self.envs):
            acting = self.active[e]
            joint = {agents[j]: self._env_action(j, actions[e, j]) for j in np.flatnonzero(acting)}
            observations, rewards, terms, truncs, _ = env.step(joint)
            self._write_obs(e, observations)
            for agent, r in rewards.items():
                agent_reward[e, self.index[agent]] = r
            for agent, flag in terms.items():
                agent_term[e, self.index[agent]] = flag
            for agent, flag in truncs.items():
                agent_trunc[e, self.index[agent]] = flag
            done = agent_term[e] | agent_trunc[e]
            final_obs[e, done] = self.obs[e, done]
            if self.with_state:
                self._read_state(e, len(observations))
                final_state[e] = self.state[e]
            live = env.agents
            if live:
                self.active[e] = [a in live for a in agents] if len(live) < N else True
                self.obs[e, ~self.active[e]] = 0.0  # a departed agent's row must not linger
            else:  # the episode is over: record how, then start the next one at once
                env_truncated[e] = bool(agent_trunc[e].any())
                env_terminated[e] = not env_truncated[e]
                rng = self.episode_seeds[e]
                self._reset_env(e, None if rng is None else int(rng.integers(2**31 - 1)))
        reward = agent_reward.sum(axis=1) / N
        info = {
            "agent_reward": agent_reward,
            "agent_terminated": agent_term,
            "agent_truncated": agent_trunc,
            "active": self.active.copy(),
            "final_obs": final_obs,
            "final_state": final_state,
            "state": self.state.copy(),
        }
        return self.obs.copy(), reward, env_terminated, env_truncated, info

    def state_dict(self) -> dict[str, Any]:
        """The laid-out arrays, each env's episode-seed stream and each env's own state
        (``multiagent.env_state``: exact for envs whose state is plain data, e.g. mpe2)."""
        return {
            "obs": self.obs.copy(),
            "active": self.active.copy(),
            "state": self.state.copy(),
            "with_state": self.with_state,
            "episode_seeds": [copy.deepcopy(rng) for rng in self.episode_seeds],
            "envs": [env_state(env) for env in self.envs],
        }

    def load_state_dict(self, state: dict[str, Any], reseed: list[int]) -> list[int]:
        """Restore ``state_dict``; returns the envs that could only restart their episode,
        each from ``reseed[e]`` (its later episodes then draw their seeds from that too)."""
        self.with_state = bool(state["with_state"])
        self.obs[...] = state["obs"]
        self.active[...] = state["active"]
        self.state[...] = state["state"]
        self.episode_seeds = [copy.deepcopy(rng) for rng in state["episode_seeds"]]
        restarted = []
        for e, (env, saved) in enumerate(zip(self.envs, state["envs"], strict=True)):
            if saved["exact"]:
                try:
                    env.reset(seed=0)  # build every object the saved env held, then overwrite
                    load_env_state(env, saved)
                    continue
                except EnvStateMismatch:
                    pass
            self.episode_seeds[e] = np.random.default_rng(reseed[e])
            self._reset_env(e, reseed[e])
            restarted.append(e)
        return restarted

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make_vector_env(env_id: str, num_envs: int) -> PettingZooVectorEnv:
    return PettingZooVectorEnv(env_id, num_envs)


# --- rollouts -----------------------------------------------------------------------------------


@register_payload  # an actor's trajectory payload, restored from checkpoints by name
@dataclass
class MultiAgentRollout:
    """T joint steps of E envs × N agent slots, time-major."""

    obs: torch.Tensor  # [T, E, N, D], zero-padded
    state: torch.Tensor | None  # [T, E, S] (centralized critic only)
    actions: torch.Tensor  # [T, E, N] or [T, E, N, A]
    rewards: torch.Tensor  # [T, E, N]
    terminated: torch.Tensor  # [T, E, N] bool
    truncated: torch.Tensor  # [T, E, N] bool
    active: torch.Tensor  # [T, E, N] bool: the agent acted at t (the loss mask)
    last_obs: torch.Tensor  # [E, N, D], the observation after the last step
    last_state: torch.Tensor | None  # [E, S]
    final_index: torch.Tensor  # [K, 3] (t, e, j) of agents truncated (not terminated)
    final_obs: torch.Tensor  # [K, D] what each of them observed last, for bootstrapping
    final_state: torch.Tensor | None  # [K, S]
    episode_returns: list[float] = field(default_factory=list)
    """Per-agent mean return of each episode that ended (sum over agents / N)."""
    episode_lengths: list[int] = field(default_factory=list)
    behaviour_logp: torch.Tensor | None = None  # [T, E, N] log μ(a|s), for a lagged learner

    @property
    def env_steps(self) -> int:
        """Joint environment steps: one per env per step, however many agents acted."""
        return int(self.rewards.shape[0] * self.rewards.shape[1])


def concat_multiagent(rollouts: list[MultiAgentRollout]) -> MultiAgentRollout:
    """Rollouts of equal length side by side along the env axis (a learner batch)."""
    if len(rollouts) == 1:
        return rollouts[0]
    offsets = np.cumsum([0] + [r.rewards.shape[1] for r in rollouts[:-1]])
    index = []
    for r, off in zip(rollouts, offsets, strict=True):
        shifted = r.final_index.clone()
        shifted[:, 1] += int(off)
        index.append(shifted)

    def cat(name: str, dim: int) -> torch.Tensor | None:
        parts = [getattr(r, name) for r in rollouts]
        return None if any(p is None for p in parts) else torch.cat(parts, dim=dim)

    return MultiAgentRollout(
        obs=cat("obs", 1),
        state=cat("state", 1),
        actions=cat("actions", 1),
        rewards=cat("rewards", 1),
        terminated=cat("terminated", 1),
        truncated=cat("truncated", 1),
        active=cat("active", 1),
        last_obs=cat("last_obs", 0),
        last_state=cat("last_state", 0),
        final_index=torch.cat(index),
        final_obs=cat("final_obs", 0),
        final_state=cat("final_state", 0),
        behaviour_logp=cat("behaviour_logp", 1),
    )


class MultiAgentRunner(RunnerNormalization):
    """``EnvRunner`` for PettingZoo: one batched forward pass over E×N agent rows per step.

    With ``--normalize-obs`` each agent slot's observation row is normalized with its
    own statistics (``[N, D]``, counted only while the agent is present; padding
    features stay zero, an absent agent's row stays zero). A centralized critic's
    ``state()`` input is normalized too where it is the agents' joint observation
    (``MultiAgentSpec.state_is_joint_obs``, mpe2's case) and every agent is present:
    it is then assembled from the normalized rows, so actor and critic see the same
    features. Any other ``state()`` is passed raw: it has no statistics of its own.
    With ``--normalize-reward`` each (env, agent) slot keeps its discounted return,
    and rewards are divided by the running std of the returns of agents that acted.
    """

    def __init__(
        self,
        envs: PettingZooVectorEnv,
        seed: int,
        info: Any = None,
        normalization: NormalizationSettings | None = None,
    ) -> None:
        del info
        self.envs = envs
        self.spec = envs.spec
        self.seed = seed
        self.num_envs = envs.num_envs
        self.started = False
        self.episode_return = np.zeros((envs.num_envs, self.spec.n_agents))
        self.episode_length = np.zeros(envs.num_envs, dtype=np.int64)
        norm = normalization or NormalizationSettings()
        shape = (self.spec.n_agents, self.spec.obs_pad)
        self.obs_norm = ObsNormalizer(shape, norm.obs_clip) if norm.normalize_obs else None
        # [N, D]: the features each agent slot really has (the rest is padding).
        self.features = np.arange(shape[1]) < np.asarray(self.spec.obs_dims)[:, None]
        self.reward_scaler = (
            RewardScaler((envs.num_envs, self.spec.n_agents), norm.gamma, norm.reward_clip)
            if norm.normalize_reward
            else None
        )

    def _normalize(self, obs: np.ndarray, present: np.ndarray) -> np.ndarray:
        """``[.., N, D]`` rows normalized; padding and absent agents' rows stay zero."""
        assert self.obs_norm is not None
        return self.obs_norm(obs) * (present[..., None] & self.features)

    def _normalized_state(
        self, raw_state: np.ndarray, rows: np.ndarray, everyone: np.ndarray
    ) -> np.ndarray:
        """``state()`` of the envs where every agent is present, assembled from the
        normalized rows when it is the joint observation; the rest raw."""
        if not self.spec.state_is_joint_obs or not everyone.any():
            return raw_state
        out = raw_state.copy()
        out[everyone] = rows[everyone].reshape(int(everyone.sum()), -1)[:, self.envs.state_index]
        return out

    def collect(
        self,
        model: Any,
        steps: int,
        generator: torch.Generator,
        record_logp: bool = False,
    ) -> MultiAgentRollout:
        envs, spec = self.envs, self.spec
        norm, scaler = self.obs_norm, self.reward_scaler
        want_state = bool(getattr(model, "central", False))
        if want_state and spec.state_dim is None:
            raise ConfigError(f"critic: {spec.env_id} has no state() for a centralized critic")
        if not self.started or envs.with_state != want_state:
            # The first reset is seeded; later episodes continue each env's own RNG.
            envs.with_state = want_state
            envs.reset(seed=self.seed)
            self.started = True
            self.episode_return[:] = 0.0
            self.episode_length[:] = 0
        E, N, D = envs.num_envs, spec.n_agents, spec.obs_pad
        obs_buf = np.empty((steps, E, N, D), dtype=np.float32)
        raw_buf = np.empty((steps, E, N, D), dtype=np.float32) if norm is not None else None
        state_buf = np.empty((steps, E, spec.state_dim or 0), dtype=np.float32)
        act_shape = (steps, E, N) if spec.discrete else (steps, E, N, spec.action_pad)
        act_buf = np.empty(act_shape, dtype=np.int64 if spec.discrete else np.float32)
        rew_buf = np.empty((steps, E, N), dtype=np.float32)
        term_buf = np.empty((steps, E, N), dtype=bool)
        trunc_buf = np.empty((steps, E, N), dtype=bool)
        active_buf = np.empty((steps, E, N), dtype=bool)
        logp_buf = np.empty((steps, E, N), dtype=np.float32) if record_logp else None
        final_index: list[tuple[int, int, int]] = []
        final_obs: list[np.ndarray] = []
        final_state: list[np.ndarray] = []
        returns: list[float] = []
        lengths: list[int] = []
        obs = envs.obs
        for t in range(steps):
            active_buf[t] = envs.active
            if raw_buf is None:
                obs_buf[t] = obs
            else:  # the policy sees the rows normalized with the snapshot's statistics
                raw_buf[t] = obs
                obs_buf[t] = self._normalize(obs, active_buf[t])
            if want_state:
                state_buf[t] = (
                    envs.state
                    if norm is None
                    else self._normalized_state(envs.state, obs_buf[t], active_buf[t].all(1))
                )
            with torch.no_grad():
                obs_t = torch.from_numpy(obs_buf[t])
                if logp_buf is not None:
                    action_t, logp = model.act_with_log_prob(obs_t, generator)
                    logp_buf[t] = logp.numpy()
                else:
                    action_t = model.act(obs_t, generator)
            action = action_t.numpy()
            act_buf[t] = action
            obs, _, env_term, env_trunc, info = envs.step(action)
            rew_buf[t] = info["agent_reward"]
            term_buf[t] = info["agent_terminated"]
            trunc_buf[t] = info["agent_truncated"]
            if scaler is not None:  # the loss sees scaled rewards; episode returns stay raw
                done = term_buf[t] | trunc_buf[t]
                rew_buf[t] = scaler(info["agent_reward"], done, active_buf[t])
            self.episode_return += info["agent_reward"]
            self.episode_length += 1
            # A time limit is not a terminal state: keep what a truncated agent saw last.
            cut = list(zip(*np.nonzero(trunc_buf[t] & ~term_buf[t]), strict=True))
            finals, final_states = info["final_obs"], info["final_state"]
            if cut and norm is not None:
                finished = term_buf[t] | trunc_buf[t]
                finals = self._normalize(finals, finished)
                if want_state:  # after the step: finished agents' last rows, the others' new
                    after = np.where(finished[..., None], finals, self._normalize(obs, envs.active))
                    final_states = self._normalized_state(final_states, after, active_buf[t].all(1))
            for e, j in cut:
                final_index.append((t, int(e), int(j)))
                final_obs.append(finals[e, j])
                if want_state:
                    final_state.append(final_states[e])
            for e in np.flatnonzero(env_term | env_trunc):
                returns.append(float(self.episode_return[e].sum() / N))
                lengths.append(int(self.episode_length[e]))
                self.episode_return[e] = 0.0
                self.episode_length[e] = 0
        last_obs = envs.obs.copy() if norm is None else self._normalize(envs.obs, envs.active)
        last_state = None
        if want_state:
            last_state = (
                envs.state.copy()
                if norm is None
                else self._normalized_state(envs.state, last_obs, envs.active.all(1))
            )
        if norm is not None:
            norm.observe(raw_buf, active_buf)  # absent agents' zero rows are not data
        return MultiAgentRollout(
            obs=torch.from_numpy(obs_buf),
            state=torch.from_numpy(state_buf) if want_state else None,
            actions=torch.from_numpy(act_buf),
            rewards=torch.from_numpy(rew_buf),
            terminated=torch.from_numpy(term_buf),
            truncated=torch.from_numpy(trunc_buf),
            active=torch.from_numpy(active_buf),
            last_obs=torch.from_numpy(last_obs),
            last_state=torch.from_numpy(last_state) if last_state is not None else None,
            final_index=torch.tensor(final_index, dtype=torch.long).reshape(-1, 3),
            final_obs=torch.from_numpy(np.array(final_obs, dtype=np.float32).reshape(-1, D)),
            final_state=(
                torch.from_numpy(
                    np.array(final_state, dtype=np.float32).reshape(-1, spec.state_dim or 0)
                )
                if want_state
                else None
            ),
            episode_returns=returns,
            episode_lengths=lengths,
            behaviour_logp=torch.from_numpy(logp_buf) if logp_buf is not None else None,
        )

    def state_dict(self) -> dict[str, Any]:
        """The episodes in progress, the envs' state (``PettingZooVectorEnv.state_dict``),
        the reward scaler and the observation normalizer."""
        return {
            "started": self.started,
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "envs": self.envs.state_dict() if self.started else None,
            **self.normalization_state(),
        }

    def load_state_dict(self, state: dict[str, Any], reseed: list[int]) -> None:
        """Restore ``state_dict``; an env whose state is not plain data restarts its episode
        from ``reseed[e]`` (the resumed run is then no longer bit-identical)."""
        self.load_normalization_state(state)
        self.started = bool(state["started"])
        self.episode_return = np.asarray(state["episode_return"], dtype=np.float64).copy()
        self.episode_length = np.asarray(state["episode_length"], dtype=np.int64).copy()
        if not self.started:  # never stepped: the first collect resets from the seed
            return
        for e in self.envs.load_state_dict(state["envs"], reseed):
            self.episode_return[e] = 0.0
            self.episode_length[e] = 0
            if self.reward_scaler is not None:
                self.reward_scaler.returns[e] = 0.0

    def close(self) -> None:
        self.envs.close()


# --- the random policy --------------------------------------------------------------------------


def random_policy_returns(env_id: str, episodes: int, seed: int | list[int]) -> np.ndarray:
    """Per-agent mean episode returns of uniformly random actions (the baseline beside eval).

    Episodes run side by side on ``episodes`` envs seeded ``seed, seed+1, ...`` (or
    with the given list of seeds, e.g. the evaluator's); actions come from a numpy
    generator seeded by the first seed.
    """
    envs = PettingZooVectorEnv(env_id, episodes)
    spec = envs.spec
    rng = np.random.default_rng(seed if isinstance(seed, int) else seed[0])
    try:
        envs.reset(seed=seed)
        returns = np.zeros(episodes)
        running = np.ones(episodes, dtype=bool)
        n = np.asarray(spec.action_dims)
        while running.any():
            if spec.discrete:
                actions = np.floor(rng.random((episodes, spec.n_agents)) * n).astype(np.int64)
            else:
                assert spec.action_low is not None and spec.action_high is not None
                u = rng.random((episodes, spec.n_agents, spec.action_pad))
                actions = spec.action_low + u * (spec.action_high - spec.action_low)
            _, reward, terminated, truncated, _ = envs.step(actions)
            returns += reward * running
            running &= ~(terminated | truncated)
        return returns
    finally:
        envs.close()


# --- a multi-step seed check ----------------------------------------------------------------


def check_seed_determinism(env_id: str, steps: int = 300, seed: int = 0) -> None:
    """Step two copies of the env with the same seed and actions for ``steps`` joint steps,
    across episode ends (each next episode seeded from the first seed), and raise
    AssertionError at the first difference.

    PettingZoo's ``parallel_seed_test`` compares only the first step; an env that
    reseeds itself badly on its second reset, or draws unseeded randomness while it
    runs, passes it and fails here.
    """
    copies = [PettingZooVectorEnv(env_id, 1) for _ in range(2)]
    spec = copies[0].spec
    rngs = [np.random.default_rng(seed) for _ in copies]
    try:
        outputs = [c.reset(seed=seed)[0] for c in copies]
        if not np.array_equal(outputs[0], outputs[1]):
            raise AssertionError(f"{env_id}: observations differ after reset(seed={seed})")
        n = np.asarray(spec.action_dims)
        for t in range(steps):
            results = []
            for c, rng in zip(copies, rngs, strict=True):
                if spec.discrete:
                    actions = np.floor(rng.random((1, spec.n_agents)) * n).astype(np.int64)
                else:
                    assert spec.action_low is not None and spec.action_high is not None
                    u = rng.random((1, spec.n_agents, spec.action_pad))
                    actions = spec.action_low + u * (spec.action_high - spec.action_low)
                obs, reward, term, trunc, info = c.step(actions)
                results.append((obs, reward, term, trunc, info["agent_reward"], info["active"]))
            for name, a, b in zip(
                ("observations", "rewards", "terminations", "truncations", "agent rewards"),
                results[0],
                results[1],
                strict=False,
            ):
                if not np.array_equal(a, b):
                    raise AssertionError(f"{env_id}: {name} differ at step {t} (seed {seed})")
    finally:
        for c in copies:
            c.close()
