"""Atari: the standard preprocessing of Mnih et al. (2015), mostly through Gymnasium's wrappers.

One env is built as

    gym.make(id, frameskip=1)               ALE's own frame skip off: the wrapper below does it
    AtariPreprocessing(noop_max=30,         random no-ops at reset, skip 4 frames with a
        frame_skip=4, screen_size=84,       max-pool over the last two, 84x84 grayscale
        grayscale_obs=True)
    EpisodicLife                            a lost life ends the learner's episode (game goes on)
    FrameStackObservation(4)                uint8 [4, 84, 84]
    ClipReward(-1, 1)                       the learner sees rewards in [-1, 1]

Gymnasium has no baselines-style episodic-life wrapper (``AtariPreprocessing``'s
``terminal_on_life_loss`` restarts the whole game on a lost life, so the agent
would never see its later lives), hence ``EpisodicLife`` here. Evaluation envs
skip episodic life and reward clipping: they report the game score.

ALE-v5 ids keep their own sticky actions (``repeat_action_probability=0.25``,
Machado et al. 2018). The ROMs ship with ale-py (the ``atari`` extra), and
``AtariPreprocessing`` resizes with OpenCV (also in the extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from hybrid.errors import ConfigError

ATARI_EXTRA = "pip install 'hybrid-rl[atari]'"


@dataclass(frozen=True)
class AtariSettings:
    """The preprocessing of the ``atari_*`` flags; the defaults are the DQN / A3C papers'."""

    frame_skip: int = 4
    frame_stack: int = 4
    noop_max: int = 30
    episodic_life: bool = True
    clip_rewards: bool = True


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def register_atari(env_id: str) -> None:
    """Make ALE's ids known to Gymnasium; a missing extra is a ConfigError naming it."""
    try:
        import ale_py
    except ImportError:
        raise ConfigError(
            f"env: {env_id!r} is an Atari game and needs the atari extra (ale-py, which ships "
            f"the ROMs, and OpenCV): {ATARI_EXTRA}"
        ) from None
    gym.register_envs(ale_py)
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError:
        raise ConfigError(
            f"env: {env_id!r} needs OpenCV for the Atari preprocessing: {ATARI_EXTRA}"
        ) from None


class EpisodicLife(gym.Wrapper):
    """A lost life is a terminal state for the learner; the game resets only when it is over.

    As in OpenAI baselines: after a life-loss "terminal", ``reset`` takes one no-op step
    instead of restarting the game, so every life is played. ``info["game_over"]`` says
    whether the termination was the real end of the game.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        info["game_over"] = self.game_over
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            # Continue the game from the state the lost life left (no-op; action 0 is NOOP).
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        self.game_over = False
        return obs, info


def make_atari(
    env_id: str, settings: AtariSettings | None = None, evaluation: bool = False
) -> gym.Env:
    """One preprocessed Atari env (see the module docstring); ``settings`` None: the defaults."""
    register_atari(env_id)
    settings = settings or AtariSettings()
    frame_skip, frame_stack = settings.frame_skip, settings.frame_stack
    noop_max = settings.noop_max
    episodic_life = settings.episodic_life and not evaluation
    clip_rewards = settings.clip_rewards and not evaluation

    try:
        env = gym.make(env_id, frameskip=1)
    except Exception as exc:  # e.g. an unknown game: Gymnasium suggests the closest name
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"env: {env_id!r} cannot be created: {first}") from None
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,  # keep uint8: 4x less memory per stored frame; the CNN scales
    )
    if episodic_life:
        # Above the preprocessing (as in baselines): random no-ops start each new game only,
        # and the no-op that continues after a lost life is a preprocessed, skipped step.
        env = EpisodicLife(env)
    env = gym.wrappers.FrameStackObservation(env, frame_stack)
    if clip_rewards:
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    return env


__all__ = ["EpisodicLife", "is_atari", "make_atari", "register_atari"]
