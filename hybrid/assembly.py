"""The assembly: the one place that reads the flat ``TrainConfig`` and builds each
component's own settings from it.

Components (worker, global model, algorithms, evaluator, envs, clients, runtimes) take
small frozen dataclasses defined beside them (``WorkerSettings``, ``ServerSettings``,
``AlgoSettings``, ``EvalSettings``, ``EnvSettings``, ``ClientSettings``,
``RuntimeSettings``...), never the config. ``train()`` (hybrid/trainer.py) calls the
builders below; a plug-in builds its own settings in its registration
(``EnvFamily.settings``, ``FinalEvaluation.settings``). The settings are picklable, so
the parallel runtimes send them, not the config, to their worker processes and actors.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from hybrid.aggregation import AggregationSettings
from hybrid.algorithms import ALGORITHMS, A2CSettings, AlgoSettings, NetSettings, NStepQSettings
from hybrid.algorithms.ppo import PPOSettings, resolve_advantage_norm
from hybrid.atari import AtariSettings
from hybrid.clients import (
    DP_NOISE_STREAM,
    ENV_ATTACKS,
    FEDERATED,
    ClientSettings,
    make_profiles,
    population,
)
from hybrid.cluster_profile import is_profile_path, profile_in_effect
from hybrid.codecs import Codec, make_codec
from hybrid.core.global_model import GlobalModel, ServerSettings, build_global_model
from hybrid.core.loop import LoopSettings
from hybrid.core.worker import WorkerSettings
from hybrid.envs import EnvInfo, EnvSettings, env_family
from hybrid.evaluation import EvalSettings, Evaluator
from hybrid.normalization import GlobalObsStats, NormalizationSettings
from hybrid.plugins import final_evaluations
from hybrid.privacy import PrivacySettings
from hybrid.protocol import Task, TrainLocally
from hybrid.runtimes.pool import WorkerPool, make_pool
from hybrid.runtimes.settings import ClockSettings, RuntimeSettings
from hybrid.scheduler_settings import BUILT_IN_SETTINGS, FedAvgSettings, settings_from_fields
from hybrid.schedulers import SchedulerSettings
from hybrid.seeding import int_seed, stream
from hybrid.traces import load_trace
from hybrid.tracking import TrackingSettings

if TYPE_CHECKING:
    import torch

    from hybrid.config import TrainConfig


def ppo_settings(cfg: TrainConfig, multiagent: bool = False) -> PPOSettings:
    """PPO's settings; its loss shares a2c's coefficients and the server's clip and ε."""
    return PPOSettings(
        epochs=cfg.ppo_epochs,
        minibatches=cfg.ppo_minibatches,
        clip_coef=cfg.clip_coef,
        clip_vloss=cfg.clip_vloss,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        lr=cfg.ppo_lr,
        adam_eps=cfg.adam_eps,
        value_norm=cfg.value_norm,
        advantage_norm=resolve_advantage_norm(cfg.ppo_advantage_norm, multiagent),
    )


def algo_settings(cfg: TrainConfig) -> AlgoSettings:
    family = env_family(cfg.env)
    return AlgoSettings(
        algo=cfg.algo,
        env=cfg.env,
        seed=cfg.seed,
        workers=cfg.workers,
        nets=NetSettings(cfg.hidden, cfg.layers, cfg.log_std_init, cfg.state_dependent_std),
        a2c=A2CSettings(
            gamma=cfg.gamma,
            gae_lambda=cfg.gae_lambda,
            ent_coef=cfg.ent_coef,
            vf_coef=cfg.vf_coef,
            normalize_advantages=cfg.normalize_advantages,
            correction=cfg.correction,
            rho_bar=cfg.rho_bar,
            c_bar=cfg.c_bar,
        ),
        nstep_q=NStepQSettings(
            replay=cfg.replay,
            replay_capacity=cfg.replay_capacity,
            replay_batch=cfg.replay_batch,
            replay_alpha=cfg.replay_alpha,
            replay_beta0=cfg.replay_beta0,
            learner_updates=cfg.learner_updates,
            learning_starts=cfg.learning_starts,
            q_nstep=cfg.q_nstep,
            epsilon=cfg.epsilon,
            epsilon_alpha=cfg.epsilon_alpha,
        ),
        ppo=ppo_settings(cfg) if cfg.algo == "ppo" else None,
        family=family.settings(cfg) if family is not None and family.settings else None,
    )


def env_settings(cfg: TrainConfig) -> EnvSettings:
    return EnvSettings(
        wrappers=cfg.wrappers,
        atari=AtariSettings(
            frame_skip=cfg.atari_frame_skip,
            frame_stack=cfg.atari_frame_stack,
            noop_max=cfg.atari_noop_max,
            episodic_life=cfg.atari_episodic_life,
            clip_rewards=cfg.atari_clip_rewards,
        ),
        spawned=cfg.runtime == "processes",
    )


def client_settings(cfg: TrainConfig) -> ClientSettings:
    return ClientSettings(
        seed=cfg.seed,
        env=cfg.env,
        workers=cfg.workers,
        clients=cfg.clients,
        client_dynamics=cfg.client_dynamics,
        cluster=cfg.cluster,
        speed_sigma=cfg.speed_sigma,
        straggler_fraction=cfg.straggler_fraction,
        straggler_slowdown=cfg.straggler_slowdown,
        client_uplink_mbps=cfg.client_uplink_mbps,
        client_downlink_mbps=cfg.client_downlink_mbps,
        client_link_sigma=cfg.client_link_sigma,
        client_dropout=cfg.client_dropout,
        client_availability=cfg.client_availability,
        byzantine_fraction=cfg.byzantine_fraction,
        byzantine_attack=cfg.byzantine_attack,
        byzantine_scale=cfg.byzantine_scale,
        client_trace=cfg.client_trace,
        step_cost_s=cfg.step_cost_s,
        task_overhead_s=cfg.task_overhead_s,
        jitter_sigma=cfg.jitter_sigma,
    )


def normalization_settings(cfg: TrainConfig) -> NormalizationSettings:
    return NormalizationSettings(
        cfg.normalize_obs, cfg.normalize_reward, cfg.obs_clip, cfg.reward_clip, cfg.gamma
    )


def _client_envs_differ(cfg: TrainConfig) -> bool:
    env_attack = cfg.byzantine_fraction > 0 and cfg.byzantine_attack in ENV_ATTACKS
    return cfg.client_dynamics != "iid" or env_attack


def worker_settings(cfg: TrainConfig) -> WorkerSettings:
    return WorkerSettings(
        algo=algo_settings(cfg),
        env=cfg.env,
        envs_per_worker=cfg.envs_per_worker,
        rollout_steps=cfg.rollout_steps,
        seed=cfg.seed,
        envs=env_settings(cfg),
        normalization=normalization_settings(cfg),
        codec=cfg.codec,
        topk_ratio=cfg.topk_ratio,
        error_feedback=cfg.error_feedback,
        # set when a worker's env differs by client: its variant, or a Byzantine env attack
        clients=client_settings(cfg) if _client_envs_differ(cfg) else None,
        local_max_grad_norm=cfg.max_grad_norm,
        local_rmsprop_alpha=cfg.rmsprop_alpha,
    )


def server_settings(cfg: TrainConfig) -> ServerSettings:
    # The target network is the algorithm's business: only one that bootstraps from a
    # target copy (n-step Q) gets a refresh period.
    target = ALGORITHMS[cfg.algo].target_network if cfg.algo in ALGORITHMS else False
    return ServerSettings(
        optimizer=cfg.optimizer,
        lr=cfg.lr,
        lr_schedule=cfg.lr_schedule,
        max_grad_norm=cfg.max_grad_norm,
        adam_eps=cfg.adam_eps,
        rmsprop_alpha=cfg.rmsprop_alpha,
        server_momentum=cfg.server_momentum,
        server_beta1=cfg.server_beta1,
        server_beta2=cfg.server_beta2,
        normalize_obs=cfg.normalize_obs,
        target_every=cfg.target_every if target else 0,
    )


def eval_settings(cfg: TrainConfig) -> EvalSettings:
    final = tuple(
        (evaluation.run, evaluation.settings(cfg) if evaluation.settings else cfg)
        for evaluation in final_evaluations()
        if evaluation.applies(cfg)
    )
    return EvalSettings(
        algo=algo_settings(cfg),
        env=cfg.env,
        seed=cfg.seed,
        eval_episodes=cfg.eval_episodes,
        obs_clip=cfg.obs_clip,
        envs=env_settings(cfg),
        final=final,
    )


def runtime_settings(cfg: TrainConfig) -> RuntimeSettings:
    return RuntimeSettings(
        runtime=cfg.runtime,
        workers=cfg.workers,
        seed=cfg.seed,
        server=server_settings(cfg),
        clock=ClockSettings(
            cluster=profile_in_effect(cfg.cluster, cfg.resume),  # a resume: the run's copy
            step_cost_s=cfg.step_cost_s,
            task_overhead_s=cfg.task_overhead_s,
            speed_sigma=cfg.speed_sigma,
            straggler_fraction=cfg.straggler_fraction,
            straggler_slowdown=cfg.straggler_slowdown,
            jitter_sigma=cfg.jitter_sigma,
            bandwidth_mbps=cfg.bandwidth_mbps,
        ),
        codec=cfg.codec,
        lock_free=cfg.lock_free,
        torch_threads=cfg.torch_threads,
        inject_worker_faults=cfg.inject_worker_faults,
        ray_address=cfg.ray_address,
    )


def _scheduler_args(cfg: TrainConfig) -> object:
    # A built-in's Settings from its own flat fields (checked there: a ConfigError naming
    # the field); a user scheduler's --scheduler-arg values.
    if cfg.scheduler == "fedavg":
        return fedavg_settings(cfg)
    if cfg.scheduler in BUILT_IN_SETTINGS:
        return settings_from_fields(cfg.scheduler, vars(cfg))
    return dict(cfg.scheduler_args)


def aggregation_settings(cfg: TrainConfig) -> AggregationSettings:
    return AggregationSettings(
        cfg.aggregator, cfg.trim_beta, cfg.krum_f, cfg.krum_m, cfg.norm_bound
    )


def privacy_settings(cfg: TrainConfig) -> PrivacySettings:
    return PrivacySettings(
        clip=cfg.dp_clip,
        noise_multiplier=cfg.dp_noise_multiplier,
        sampling=cfg.dp_sampling,
        delta=cfg.dp_delta,
        target_epsilon=cfg.dp_target_epsilon,
        adaptive_quantile=cfg.dp_adaptive_quantile,
        clip_lr=cfg.dp_clip_lr,
        count_noise=cfg.dp_count_noise,
    )


def fedavg_settings(cfg: TrainConfig) -> FedAvgSettings:
    """fedavg's settings: its flat fields, then what the assembly builds for it: the server's
    aggregation and DP-FedAvg settings (from their own flat fields, shared with FedBuff's
    aggregation), the Byzantine clients' ids and the trace (from the client profiles, as the
    clients' dropout and availability are), and the seed of DP-FedAvg's noise (the run's
    seed's own stream)."""
    own = settings_from_fields("fedavg", vars(cfg))
    clients = client_settings(cfg)
    profiles = make_profiles(clients)
    return dataclasses.replace(
        own,
        aggregation=aggregation_settings(cfg),
        privacy=privacy_settings(cfg),
        byzantine_clients=tuple(p.client_id for p in profiles if p.attack),
        trace=load_trace(cfg.client_trace, population(clients)) if cfg.client_trace else None,
        dp_noise_seed=int_seed(stream(cfg.seed, FEDERATED, DP_NOISE_STREAM)),
    )


def scheduler_settings(cfg: TrainConfig) -> SchedulerSettings:
    return SchedulerSettings(
        name=cfg.scheduler,
        workers=cfg.workers,
        seed=cfg.seed,
        clients=client_settings(cfg),
        args=_scheduler_args(cfg),
    )


def loop_settings(cfg: TrainConfig) -> LoopSettings:
    return LoopSettings(
        total_env_steps=cfg.total_env_steps,
        log_every=cfg.log_every,
        eval_every=cfg.eval_every,
        checkpoint_every=cfg.checkpoint_every,
        keep_checkpoints=cfg.keep_checkpoints,
        checkpoint_replay=cfg.checkpoint_replay,
        stop_when_solved=cfg.stop_when_solved,
        config=cfg.to_dict(),
    )


def make_task(kind: type[Task], cfg: TrainConfig) -> Task:
    """The task a scheduler's ``task_kind`` asks for, with its settings from the config."""
    if kind is TrainLocally:
        return TrainLocally(
            steps=cfg.local_steps,
            optimizer=cfg.local_optimizer,
            lr=cfg.local_lr,
            prox_mu=cfg.prox_mu,
            deadline_s=cfg.round_deadline_s,
        )
    return kind(deadline_s=cfg.round_deadline_s)


def server_codec(cfg: TrainConfig) -> Codec:
    """The codec the loop decodes arriving payloads with."""
    return make_codec(cfg.codec, topk_ratio=cfg.topk_ratio, seed=cfg.seed)


def tracking_settings(cfg: TrainConfig) -> TrackingSettings:
    profile = cfg.runtime == "serial" and is_profile_path(cfg.cluster)
    return TrackingSettings(
        total_env_steps=cfg.total_env_steps,
        label=f"{cfg.scheduler}/{cfg.env}",
        progress=cfg.progress,
        track=cfg.track,
        wandb_project=cfg.wandb_project,
        wandb_group=cfg.exp_name or cfg.env,
        wandb_job_type=cfg.scheduler,
        wandb_tags=(cfg.scheduler, cfg.runtime, cfg.algo),
        config=cfg.to_dict(),
        cluster_profile=cfg.cluster if profile else None,
    )


# --- components built from the config (train(), calibrate, notebooks and tests) -------------


def worker_pool(cfg: TrainConfig, info: EnvInfo) -> WorkerPool:
    """The run's worker pool: K edge clients when ``clients`` is set, else its workers."""
    clients = client_settings(cfg) if cfg.clients is not None else None
    return make_pool(worker_settings(cfg), info, cfg.workers, clients)


def global_model(
    cfg: TrainConfig,
    params: torch.Tensor,
    obs_shape: int | tuple[int, ...] = 0,
    device: str | torch.device = "cpu",
) -> GlobalModel:
    return build_global_model(server_settings(cfg), params, obs_shape, device)


def evaluator(
    cfg: TrainConfig, info: EnvInfo, obs_stats: GlobalObsStats | None = None
) -> Evaluator:
    return Evaluator(eval_settings(cfg), info, obs_stats=obs_stats)


__all__ = [
    "algo_settings",
    "client_settings",
    "env_settings",
    "eval_settings",
    "evaluator",
    "global_model",
    "loop_settings",
    "make_task",
    "normalization_settings",
    "ppo_settings",
    "runtime_settings",
    "scheduler_settings",
    "server_codec",
    "server_settings",
    "tracking_settings",
    "worker_pool",
    "worker_settings",
]
