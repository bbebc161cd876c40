"""Periodic deterministic evaluation of the global parameters on separate envs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hybrid.algorithms import AlgoSettings
from hybrid.core.worker import build_model
from hybrid.envs import EnvInfo, EnvSettings, env_family, make_vector_env
from hybrid.nets import FlatParams
from hybrid.normalization import GlobalObsStats, ObsNormalizer
from hybrid.plugins import resolve
from hybrid.seeding import EVAL, int_seed, stream


@dataclass(frozen=True)
class EvalSettings:
    """What the evaluator is built from (the assembly fills it from the config)."""

    algo: AlgoSettings
    env: str
    seed: int
    eval_episodes: int
    obs_clip: float
    """The clip of the evaluator's observation normalizer (``normalize_obs``)."""
    envs: EnvSettings
    final: tuple[tuple[str, Any], ...]
    """The plug-ins' final evaluations that apply to this run: ``("module:function",
    settings)`` pairs; each is called ``(settings, info, params) -> dict``."""


class Evaluator:
    """Runs one deterministic episode on each of ``eval_episodes`` envs.

    The envs are reset with the same seeds at every evaluation, so successive
    evaluations differ only through the parameters.
    """

    def __init__(
        self, settings: EvalSettings, info: EnvInfo, obs_stats: GlobalObsStats | None = None
    ) -> None:
        self.settings = settings
        self.info = info
        self.episodes = settings.eval_episodes
        # evaluation=True: whole games at their real score (no episodic life, no clipping)
        self.envs = make_vector_env(
            settings.env, self.episodes, settings.envs, info, evaluation=True
        )
        # The global model's observation statistics (normalize_obs), read at each evaluation.
        self.obs_stats = obs_stats
        self.obs_norm = (
            ObsNormalizer(info.obs_stats_shape, settings.obs_clip)
            if obs_stats is not None
            else None
        )
        self.seeds = [int_seed(s) for s in stream(settings.seed, EVAL).spawn(self.episodes)]
        self.model = build_model(settings.algo, info)
        self.flat = FlatParams(self.model)

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor) -> np.ndarray:
        """Per-episode returns of the greedy policy."""
        self.flat.load(params)
        norm = self.obs_norm
        if norm is not None and self.obs_stats is not None:
            norm.set_stats(self.obs_stats.rms.mean, self.obs_stats.rms.var)
        obs, _ = self.envs.reset(seed=self.seeds)
        returns = np.zeros(self.episodes)
        running = np.ones(self.episodes, dtype=bool)
        while running.any():
            if norm is not None:
                obs = norm(np.asarray(obs, dtype=np.float32))
            action = self.model.act(torch.as_tensor(obs, dtype=torch.float32), None).numpy()
            if self.info.continuous:
                action = np.clip(action, self.info.action_low, self.info.action_high)
            obs, reward, terminated, truncated, _ = self.envs.step(action)
            returns += reward * running
            running &= ~(terminated | truncated)
        return returns

    def final_metrics(self, params: torch.Tensor) -> dict[str, Any]:
        """Summary figures beyond the mean return, for the final parameters only.

        When the workers are edge clients or run env variants: the return on each client's
        own variant, its mean, worst 10% and spread across clients (fairness). On a
        multi-agent env: the random policy's return, and the final return under both
        conventions (the logged per-agent mean, and the team's sum over agents).
        """
        family = env_family(self.settings.env)
        if family is not None and family.baseline_returns is not None:
            # the random policy's return beside the trained one's (multi-agent)
            baseline = resolve(family.baseline_returns)
            random = baseline(self.settings.env, self.episodes, self.seeds)
            figures: dict[str, Any] = {"random_return_mean": float(random.mean())}
            if self.info.n_agents:  # both return conventions (the same seeds: the same episodes)
                per_agent = float(self.evaluate(params).mean())
                figures |= {
                    "return_convention": "per-agent mean",
                    "final_eval_return_per_agent_mean": per_agent,
                    "final_eval_return_team_sum": per_agent * self.info.n_agents,
                }
            return figures
        metrics: dict[str, Any] = {}
        for run, settings in self.settings.final:  # plug-ins: federated's client fairness
            metrics.update(resolve(run)(settings, self.info, params))
        return metrics

    def close(self) -> None:
        self.envs.close()
