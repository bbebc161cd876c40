"""Environment construction: Gymnasium vector envs and a description of their spaces."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hybrid.config import ConfigError


@dataclass(frozen=True)
class EnvInfo:
    """What the core needs to know about a task before building models."""

    env_id: str
    obs_dim: int
    action_dim: int
    continuous: bool
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    reward_threshold: float | None


def _needs_flatten(space: gym.Space) -> bool:
    return not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)


def describe(env_id: str) -> EnvInfo:
    """Probe the env once; unknown ids and unsupported spaces become ConfigErrors."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        raise ConfigError(
            f"env: {env_id!r} is not a registered Gymnasium id "
            "(e.g. CartPole-v1, Acrobot-v1, Pendulum-v1; gymnasium.pprint_registry() lists all)"
        ) from None
    try:
        env = gym.make(env_id)
    except Exception as exc:  # a missing extra (box2d, mujoco, ale) surfaces here
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"env: {env_id!r} cannot be created: {message}") from None
    try:
        obs_space = env.observation_space
        if _needs_flatten(obs_space):
            obs_space = gym.spaces.flatten_space(obs_space)
        act_space = env.action_space
        if isinstance(act_space, gym.spaces.Discrete):
            return EnvInfo(
                env_id,
                int(np.prod(obs_space.shape)),
                int(act_space.n),
                False,
                None,
                None,
                spec.reward_threshold,
            )
        if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            return EnvInfo(
                env_id,
                int(np.prod(obs_space.shape)),
                int(act_space.shape[0]),
                True,
                act_space.low.astype(np.float32),
                act_space.high.astype(np.float32),
                spec.reward_threshold,
            )
        raise ConfigError(
            f"env: {env_id!r} has action space {act_space}; supported are Discrete and 1-D Box"
        )
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """A synchronous vector env that resets finished sub-envs in the same step.

    SAME_STEP autoreset keeps every stored transition real (NEXT_STEP would
    insert a dummy step after each episode) and hands back the final
    observation, which truncation bootstrapping needs.
    """
    probe = gym.make(env_id)
    wrappers = [gym.wrappers.FlattenObservation] if _needs_flatten(probe.observation_space) else []
    probe.close()
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        wrappers=wrappers,
    )
