"""Flat run configuration.

One dataclass, one namespace: the same field names are CLI flags
(``--total-env-steps``), wandb sweep keys (``total_env_steps``) and keyword
arguments in a notebook (``TrainConfig(total_env_steps=...)``). Only the assembly
(``hybrid/assembly.py``, used by ``train()``) reads it: it builds each component's own
settings dataclass, and no component sees the config.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hybrid.errors import ConfigError  # re-exported: the name users import from here
from hybrid.scheduler_settings import (
    BUILT_IN_SETTINGS,
    FLOAT32_MAX,
    INT_MAX,
    coerce_setting,
    config_fields,
    config_type,
    field_defaults,
    field_docs,
    fold_scheduler_args,
    settings_from_fields,
)


def _with_built_in_scheduler_fields(after: dict[str, str]) -> Callable[[type], type]:
    """Give the class every built-in scheduler setting (hybrid/scheduler_settings.py) as a
    field of the setting's type, default and docstring: a knob added to a scheduler's
    Settings is a config field, a flag with its --help text, a sweep key and a config.json
    entry at once, written there once. ``after`` places each scheduler's fields (its
    Settings' order) after the named field, so --help lists them in their section.

    The help text goes in the field's ``metadata["help"]``, the dataclass convention tyro
    reads (as argparse-style config classes do), rather than in an ``Annotated`` tyro marker
    on the type: this module stays free of tyro, and the types stay the plain ones that
    ``dataclasses.fields``, the sweep and config.json see."""

    def add_fields(cls: type) -> type:
        annotations = cls.__annotations__  # its own (the dataclass reads it), not a copy
        declared = list(annotations.items())
        placed: dict[str, list[str]] = {}
        for scheduler, settings_class in BUILT_IN_SETTINGS.items():
            docs = field_docs(settings_class)
            for f in config_fields(settings_class):
                if f.name in annotations:  # two docstrings, two defaults: they would drift
                    raise TypeError(
                        f"{cls.__name__}.{f.name}: a field of {settings_class.__name__}, "
                        "declared there only"
                    )
                help_text = f"{scheduler}: {docs.get(f.name, 'its setting ' + f.name)}"
                setattr(
                    cls, f.name, dataclasses.field(default=f.default, metadata={"help": help_text})
                )
                placed.setdefault(after.get(scheduler, ""), []).append(f.name)
                annotations[f.name] = config_type(f)
        order = [name for name, _ in declared]
        for anchor, names in placed.items():
            # a scheduler ``after`` does not name: its fields go last
            at = order.index(anchor) + 1 if anchor else len(order)
            order[at:at] = names
        reordered = {name: annotations[name] for name in order}
        annotations.clear()
        annotations.update(reordered)
        return cls

    return add_fields


@dataclass
@_with_built_in_scheduler_fields(
    after={"bounded": "server_beta2", "hybrid": "inject_worker_faults", "fedavg": "clients"}
)
class TrainConfig:
    """Train one agent under one update scheduler. Every field is also a CLI flag.

    The built-in schedulers' own fields (staleness_bound, learner_batch, client_fraction...)
    are declared once, on their Settings dataclasses (hybrid/scheduler_settings.py)."""

    # --- task and schedule -------------------------------------------------------------------
    env: str = "CartPole-v1"
    """Gymnasium environment id."""
    scheduler: str = "async"
    """Update scheduler: sync (A2C), async (A3C / Hogwild!), bounded (SSP), hybrid (IMPALA /
    Ape-X actor-learner), fedavg (federated rounds); decentralized, with replicas and
    --scheduler-arg settings: gossip (D-PSGD), ad-psgd, sgp (push-sum); or your own: a name
    registered with hybrid.register_scheduler, or module:Class / path/to/file.py:Class."""
    scheduler_args: dict[str, bool | int | float | str] = dataclasses.field(default_factory=dict)
    """Your scheduler's own hyperparameters (the fields of its Settings dataclass), e.g.
    --scheduler-arg lam=0.04 (repeatable); built-in schedulers take theirs as flags."""
    runtime: str = "serial"
    """Where workers run: serial (virtual clock), processes (shared memory), ray (local/cluster)."""
    algo: str = "a2c"
    """Worker algorithm: a2c (A3C under async), nstep_q, ppo; mappo / ippo on PettingZoo tasks."""
    workers: int = 8
    """Number of workers (simulated on the serial runtime)."""
    envs_per_worker: int = 2
    """Environments each worker steps as one Gymnasium vector env (batched forward pass)."""
    rollout_steps: int = 5
    """Steps per environment in one worker task (t_max in the A3C paper)."""
    total_env_steps: int = 200_000
    """Budget: environment steps summed over all workers."""
    stop_when_solved: bool = True
    """Stop as soon as an evaluation reaches the env's reward threshold."""
    seed: int = 0
    """Base seed; every other seed derives from it through numpy's SeedSequence."""

    # --- algorithm -----------------------------------------------------------------------------
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda; 1.0 gives plain n-step bootstrapped returns (A3C)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value-loss coefficient."""
    normalize_advantages: bool = False
    """Normalize advantages per worker batch (off by default: batches are small)."""
    hidden: int = 64
    """Units per hidden layer of the actor and critic MLPs."""
    layers: int = 2
    """Hidden layers of the actor and critic MLPs."""
    head: str = "auto"
    """Policy head: auto (from the action space), categorical (Discrete), gaussian (Box)."""

    # --- server optimizer (the global model's) --------------------------------------------------
    optimizer: str = "adam"
    """Server optimizer: adam (torch's, bias-corrected), rmsprop (statistics shared by all
    workers, as in A3C), sgd, or Reddi et al. 2021's fedadam, fedyogi, fedadagrad (FedOpt:
    no bias correction, v starts at adam_eps², server_beta1/server_beta2)."""
    lr: float = 1e-3
    """Server learning rate."""
    lr_schedule: str = "constant"
    """Learning-rate schedule over the env-step budget: constant or linear (decays to 0)."""
    max_grad_norm: float = 0.5
    """Clip the norm of each applied step; 0 disables clipping."""
    adam_eps: float = 1e-5
    """Epsilon of Adam and RMSProp; FedOpt's tau for fedadam / fedyogi / fedadagrad (the
    paper's grid is 1e-5..1e-1, 1e-3 a common choice)."""
    rmsprop_alpha: float = 0.99
    """RMSProp smoothing constant."""
    server_beta1: float = 0.9
    """fedadam / fedyogi / fedadagrad: momentum β1 of the pseudo-gradient, in [0, 1)."""
    server_beta2: float = 0.99
    """fedadam / fedyogi: second-moment β2, in [0, 1) (the paper's 0.99, not torch's 0.999)."""

    # --- bounded staleness: BoundedSettings' fields go here (the decorator's ``after``) ------

    # --- serial runtime: the virtual clock's cost model -------------------------------------------
    cluster: str = "homogeneous"
    """Worker speeds: homogeneous, heterogeneous (lognormal), stragglers (some k times slower),
    or a measured profile PATH.json from `hybrid calibrate`: the clock then charges that
    machine's costs (instead of step_cost_s, task_overhead_s, jitter_sigma, bandwidth_mbps),
    shares its cores among the workers and the main process, and queues updates at the
    server; the run directory keeps a copy (cluster_profile.json)."""
    step_cost_s: float = 1e-4
    """Virtual seconds one env step (with its forward pass) costs a worker of speed 1."""
    task_overhead_s: float = 1e-3
    """Virtual seconds of fixed cost per task (loss, backward pass)."""
    speed_sigma: float = 0.5
    """Lognormal sigma of worker speeds (heterogeneous)."""
    straggler_fraction: float = 0.25
    """Fraction of workers that straggle (stragglers)."""
    straggler_slowdown: float = 4.0
    """How many times slower a straggler is (stragglers)."""
    jitter_sigma: float = 0.1
    """Lognormal sigma of per-task duration jitter."""
    bandwidth_mbps: float = 100.0
    """Uplink bandwidth per worker in Mbit/s; upload time = bytes / bandwidth."""

    # --- communication ----------------------------------------------------------------------------
    codec: str = "none"
    """Update compression: none, fp16, bf16, int8 (stochastic, unbiased), topk."""
    topk_ratio: float = 0.01
    """Fraction of entries topk keeps."""
    error_feedback: bool = True
    """topk carries what it dropped into the worker's next update (nothing is lost)."""

    # --- parallel runtimes ----------------------------------------------------------------------
    lock_free: bool = True
    """processes: Hogwild! (with async, workers step the shared θ and optimizer statistics
    themselves; reads are unguarded). Off, "locked": the main process applies every update
    and each read is one whole version."""
    ray_address: str = ""
    """Ray cluster to join (ray runtime); empty starts a local, loopback-only instance."""
    inject_worker_faults: float = 0.0
    """Chance per task that its worker is SIGKILLed (processes, ray; seeded): fault studies."""

    # --- actor-learner (hybrid scheduler; ActorLearnerSettings' fields first) and Q-learning --
    correction: str = "vtrace"
    """hybrid + a2c: off-policy correction of the learner, vtrace or none (the ablation)."""
    rho_bar: float = 1.0
    """V-trace truncation of the importance weights in the value targets and advantages."""
    c_bar: float = 1.0
    """V-trace truncation of the trace-cutting coefficients (rho_bar >= c_bar)."""
    replay: str = "prioritized"
    """hybrid + nstep_q: prioritized (Ape-X) or uniform replay."""
    replay_capacity: int = 100_000
    """Transitions the replay holds."""
    replay_batch: int = 64
    """Transitions per learner minibatch."""
    replay_alpha: float = 0.6
    """Prioritization exponent α (0 = uniform)."""
    replay_beta0: float = 0.4
    """Initial importance-sampling exponent β, annealed to 1 over the budget."""
    learner_updates: int = 8
    """Minibatch steps the replay learner takes per batch of actor trajectories."""
    learning_starts: int = 500
    """Transitions stored before the replay learner starts."""
    q_nstep: int = 3
    """n of the actors' n-step transitions (Ape-X)."""
    epsilon: float = 0.4
    """nstep_q exploration base ε; actor i uses ε^(1 + α·i/(N−1)) (Ape-X)."""
    epsilon_alpha: float = 7.0
    """Spread α of the per-actor ε."""
    target_every: int = 100
    """nstep_q: refresh the target network every this many global versions."""

    # --- federated (FedAvgSettings' fields follow ``clients``) ------------------------------
    clients: int | None = None
    """Simulated edge clients K (hybrid/clients.py), worker ids 0..K-1: each runs its own env
    variant (client_dynamics) at its own device speed (cluster) over its own links, and is built
    on demand for each task, so memory grows with the clients per round, not with K (topk error
    feedback is then per task). Unset: the persistent `workers` are the participants."""
    local_steps: int = 50
    """fedavg: local updates E per client and round, each one rollout of rollout_steps. An
    on-demand client's envs start afresh each round: E * rollout_steps bounds its episodes."""
    local_optimizer: str = "adam"
    """fedavg: client optimizer, sgd or adam, fresh every round; max_grad_norm clips each local
    loss gradient (the server does not clip the averaged model difference)."""
    local_lr: float = 1e-3
    """fedavg: client learning rate."""
    prox_mu: float = 0.0
    """fedavg: FedProx mu; a client minimizes its loss + mu/2 ||theta - theta_global||^2: the
    proximal gradient mu (theta - theta_global) is added after clipping (Li et al. 2020's step
    with local sgd)."""
    server_momentum: float = 0.0
    """Momentum of the sgd server optimizer (fedavg + optimizer sgd + lr 1: FedAvgM)."""
    client_dynamics: str = "iid"
    """Env variant per client (or worker), drawn uniformly: iid (all default, the control),
    pole_length (CartPole length 0.25..1.0), cart_mass, mass, length, gravity, all."""
    client_uplink_mbps: float = 10.0
    """Median client uplink in Mbit/s (a Δ's upload time on the virtual clock)."""
    client_downlink_mbps: float = 50.0
    """Median client downlink in Mbit/s (θ's download time on the virtual clock)."""
    client_link_sigma: float = 0.0
    """Lognormal sigma of the client links around their medians (0: all equal)."""
    # --- federated: hostile and private rounds (fedavg's server, the clients' behaviour) -------
    aggregator: str = "mean"
    """fedavg: how the server combines a round's Δs: mean (sample-weighted), median
    (coordinate-wise), trimmed_mean, krum or multi_krum (hybrid/aggregation.py)."""
    trim_beta: float = 0.1
    """fedavg trimmed_mean: fraction cut from each end of every coordinate, in [0, 0.5)."""
    krum_f: int = 1
    """fedavg krum / multi_krum: Byzantine clients tolerated; needs more than 2f+2 per round."""
    krum_m: int = 1
    """fedavg multi_krum: how many best-scored Δs are averaged."""
    norm_bound: float = 0.0
    """fedavg: scale each Δ to at most this L2 norm before aggregating (0: off)."""
    byzantine_fraction: float = 0.0
    """Share of the edge clients that are Byzantine (drawn by seed, fixed for the run)."""
    byzantine_attack: str = "sign_flip"
    """What a Byzantine client does: sign_flip (sends -s*Δ), scale (s*Δ), gaussian (noise of
    s times Δ's RMS), random_policy (acts at random), reward_flip (negated rewards)."""
    byzantine_scale: float = 4.0
    """s: the strength of the sign_flip, scale and gaussian attacks."""
    dp_clip: float = 0.0
    """fedavg DP-FedAvg: clip each Δ to this L2 norm C (0: no differential privacy)."""
    dp_noise_multiplier: float = 0.0
    """fedavg DP-FedAvg: sigma; the sum of clipped Δs gets N(0, (sigma*C)^2) noise."""
    dp_sampling: str = "fixed"
    """fedavg DP-FedAvg client sampling: fixed (m of K) or poisson (each with q = m/K)."""
    dp_delta: float = 1e-5
    """fedavg DP-FedAvg: the delta at which epsilon is reported."""
    dp_target_epsilon: float = 0.0
    """fedavg DP-FedAvg: stop before a round would spend more than this epsilon (0: none)."""
    dp_adaptive_quantile: float = 0.0
    """fedavg DP-FedAvg: adaptive clipping's target quantile gamma in (0, 1) (0: fixed C)."""
    dp_clip_lr: float = 0.2
    """fedavg DP-FedAvg: adaptive clipping's geometric step eta_C."""
    dp_count_noise: float = 0.0
    """fedavg DP-FedAvg: adaptive clipping's count noise sigma_b (0: clients per round / 20)."""
    client_trace: str = ""
    """Edge clients' trace file (JSON or CSV, hybrid/traces.py): per client compute speed,
    links and availability intervals in seconds since training started (virtual on serial,
    wall time on processes and ray, where speeds and links are emulated by holding results),
    for fedavg (FedBuff: also pass it as its client_trace argument)."""
    client_eval_clients: int = 50
    """Clients (a seeded sample) whose own env variant the final model is evaluated on."""
    client_eval_episodes: int = 2
    """Deterministic episodes per evaluated client."""

    # --- checkpoints and faults -------------------------------------------------------
    checkpoint_every: int = 0
    """Write a checkpoint every this many global versions (and at the end); 0: none."""
    keep_checkpoints: int = 2
    """Checkpoints kept; the older one is the fallback when the newest is damaged."""
    checkpoint_replay: bool = False
    """Include the replay buffer in checkpoints (large); without it a resumed learner refills."""
    resume: str = ""
    """Continue the run in this directory from its newest checkpoint (its stored config)."""

    # --- multi-agent --------------------------------------------------------------------
    param_sharing: str = "all"
    """Multi-agent: which agents share one network: all (parameter sharing), none (per-agent
    parameters), or groups of agent names, e.g. "agent_0,agent_1;agent_2"."""
    agent_id: bool = True
    """Multi-agent: append each agent's one-hot id to its inputs (tells shared agents apart)."""
    critic: str = "auto"
    """Multi-agent: central (fed state() + the agent's observation and id), local (the agent's
    observation), or auto: central for mappo, local for ippo, ppo and a2c."""
    value_norm: bool = True
    """ppo / mappo / ippo (and a2c on multi-agent envs): the critic learns targets normalized
    by their running mean and std (MAPPO's value normalization; statistics are worker state)."""
    ppo_epochs: int = 10
    """PPO epochs over each rollout (on the worker's local optimizer under sync / async /
    bounded, sending Δ; on the learner under hybrid)."""
    ppo_minibatches: int = 1
    """PPO minibatches per epoch."""
    ppo_advantage_norm: str = "auto"
    """PPO advantage normalization: minibatch (CleanRL), batch (MAPPO: once per rollout or
    learner batch), none, or auto: minibatch on Gymnasium envs, batch on multi-agent ones.
    With one minibatch, minibatch and batch are the same."""
    ppo_lr: float = 5e-4
    """Learning rate of the worker's local Adam for PPO's epochs (the server's is lr)."""
    clip_coef: float = 0.2
    """PPO ratio clip (also the value clip with clip_vloss)."""
    clip_vloss: bool = True
    """PPO: clip the value update around the values at collection time."""

    # --- MAPPO as in its released code (multi-agent PPO; the defaults keep hybrid's) -----------
    mappo_value_loss: str = "mse"
    """Multi-agent PPO's value loss: mse (half the squared error) or huber (Yu et al. 2022's
    released code, quadratic within mappo_huber_delta and linear beyond)."""
    mappo_huber_delta: float = 10.0
    """δ of the Huber value loss (the released code's 10)."""
    mappo_separate_optimizers: bool = False
    """Multi-agent PPO: actor and critic on their own local Adam, each gradient clipped to
    max_grad_norm apart (the released code's two optimizers; Adam works per element, so this
    is one Adam with the clipping per network)."""
    mappo_value_norm_per_minibatch: bool = False
    """Multi-agent PPO: update the value normalization with every minibatch's returns, as the
    released code does, instead of once per batch."""

    # --- environments ---------------------------------------------------------------
    env_defaults: bool = True
    """Give every field left at its global default the env's value from hybrid/defaults.py
    (e.g. Pendulum-v1's gamma and normalization); --no-env-defaults keeps the global ones.
    config.json records the values in effect."""
    wrappers: str = ""
    """Wrappers around each env, in order, separated by ';': a gymnasium.wrappers name or a
    dotted path to a gymnasium.Wrapper subclass, or a callable f(env, ...) registered with
    hybrid.envs.register_wrapper; with literal arguments, e.g.
    "ClipReward(-1, 1); TimeAwareObservation". Applied after the env's own preprocessing."""
    normalize_obs: bool = False
    """Normalize observations by a running mean and variance held in the global model: every
    worker's raw observations are merged into it, snapshots deliver it, evaluation uses it."""
    normalize_reward: bool = False
    """Divide rewards by the running std of each worker's discounted returns (logged returns
    stay raw)."""
    obs_clip: float = 10.0
    """Clip normalized observations to [-obs_clip, obs_clip]."""
    reward_clip: float = 10.0
    """Clip scaled rewards to [-reward_clip, reward_clip]."""
    log_std_init: float = 0.0
    """Gaussian head: initial log standard deviation of the actions."""
    state_dependent_std: bool = False
    """Gaussian head: the actor also outputs the log std (default: one state-independent
    log std per action dimension)."""
    atari_frame_skip: int = 4
    """Atari: frames per agent step (max-pooled over the last two)."""
    atari_frame_stack: int = 4
    """Atari: frames stacked into one observation."""
    atari_noop_max: int = 30
    """Atari: at most this many random no-ops start each game."""
    atari_episodic_life: bool = True
    """Atari: a lost life ends the learner's episode; the game goes on (evaluation plays
    whole games)."""
    atari_clip_rewards: bool = True
    """Atari: the learner sees rewards clipped to [-1, 1] (evaluation reports the score)."""

    # --- evaluation and logging -----------------------------------------------------------------
    eval_every: int = 2_500
    """Evaluate the global model every this many env steps."""
    eval_episodes: int = 10
    """Deterministic episodes per evaluation."""
    log_every: int = 1_000
    """Write a training row to metrics.jsonl every this many env steps."""
    out: str = ""
    """Run directory; empty picks runs/<env>-<scheduler>-s<seed>-<time>."""
    track: bool = False
    """Also log to wandb (offline unless you configured wandb online)."""
    wandb_project: str = "hybrid"
    """wandb project name."""
    wandb_checkpoint: bool = False
    """With --track, upload the final checkpoint as a wandb artifact (needs --checkpoint-every)."""
    exp_name: str = ""
    """Experiment name (the wandb group); empty uses the env id."""
    torch_threads: int = 1
    """torch intra-op threads; 1 keeps tiny MLPs fast and the serial runtime bit-reproducible."""
    device: str = "auto"
    """Where the global model, the server optimizer and the learner run: auto (cuda when torch
    finds a GPU, else cpu), cpu or cuda. Workers always act on CPU, from CPU copies of θ."""
    progress: bool = True
    """Show a progress bar (a periodic status line when output is not a terminal)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        known = {f.name: f for f in dataclasses.fields(cls)}
        if not isinstance(values, dict):
            raise ConfigError(f"config: expected a mapping of fields, got {type(values).__name__}")
        unknown = sorted(set(values) - set(known), key=str)
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown config field")
        # A config file (config.json of a resumed run, a notebook's dict) gets the types the
        # command line's parser would have enforced; validate() then checks the values.
        typed = {name: _typed(name, value, str(known[name].type)) for name, value in values.items()}
        return cls(**typed)

    def __post_init__(self) -> None:
        # A built-in scheduler's --scheduler-arg KEY=VALUE is its flag --KEY VALUE: the same
        # setting, recorded once (as the flat field) in config.json and sweeps.
        if (
            isinstance(self.scheduler, str)
            and self.scheduler in BUILT_IN_SETTINGS
            and isinstance(self.scheduler_args, dict)
            and self.scheduler_args
        ):
            own, rest = fold_scheduler_args(self.scheduler, self.scheduler_args)
            for name, value in own.items():
                setattr(self, name, value)
            self.scheduler_args = rest

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Check every field; raise ConfigError with a one-line message on the first bad one."""
        # Names are checked against hybrid.registry and the plug-ins' env families: no
        # component (torch, Ray, PettingZoo) is imported to validate a config.
        from hybrid import registry
        from hybrid.clients import check_dynamics
        from hybrid.envs import env_family, parse_wrappers

        if not isinstance(self.scheduler_args, dict):
            raise ConfigError(
                f"scheduler_args: expected a mapping of setting names to values, got "
                f"{self.scheduler_args!r}"
            )
        self._check_scheduler()
        registry.RUNTIMES.check(self)
        registry.ALGORITHMS.require(self.algo)
        _choice("head", self.head, ("auto", "categorical", "gaussian"))
        _choice("optimizer", self.optimizer, registry.OPTIMIZERS)
        _choice("lr_schedule", self.lr_schedule, ("constant", "linear"))
        _choice("device", self.device, ("auto", "cpu", "cuda"))
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(
                    "device: cuda, but torch finds no CUDA GPU here (torch.cuda.is_available() "
                    f"is False; torch {torch.__version__}); use --device cpu or auto"
                )
        self._check_cluster()
        _choice("codec", self.codec, registry.CODECS)
        _in_range("topk_ratio", self.topk_ratio, 0.0, 1.0)
        _positive("topk_ratio", self.topk_ratio)
        for name in (
            "workers",
            "envs_per_worker",
            "rollout_steps",
            "total_env_steps",
            "hidden",
            "eval_every",
            "eval_episodes",
            "log_every",
            "torch_threads",
        ):
            _at_least(name, getattr(self, name), 1)
        _at_least("layers", self.layers, 0)
        _at_least("checkpoint_every", self.checkpoint_every, 0)
        _at_least("keep_checkpoints", self.keep_checkpoints, 1)
        _in_range("gamma", self.gamma, 0.0, 1.0)
        _in_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        _in_range("straggler_fraction", self.straggler_fraction, 0.0, 1.0)
        for name in ("lr", "step_cost_s", "bandwidth_mbps", "adam_eps", "straggler_slowdown"):
            _positive(name, getattr(self, name))
        if self.adam_eps < FLOAT32_TINY:
            # Adam and RMSProp divide by sqrt(v) + eps in float32: below its smallest normal
            # number eps rounds to 0 (or loses its precision) and a zero gradient gives 0/0
            raise ConfigError(
                f"adam_eps: {self.adam_eps!r} is below float32's smallest normal number "
                f"({FLOAT32_TINY:.4g}), where it rounds to 0; use a value >= {FLOAT32_TINY:.4g}"
            )
        for name in (
            "ent_coef",
            "vf_coef",
            "max_grad_norm",
            "task_overhead_s",
            "speed_sigma",
            "jitter_sigma",
        ):
            _non_negative(name, getattr(self, name))
        _in_range("rmsprop_alpha", self.rmsprop_alpha, 0.0, 1.0)
        for name in ("server_beta1", "server_beta2"):
            if not 0.0 <= _number(name, getattr(self, name)) < 1.0:
                raise ConfigError(f"{name}: {getattr(self, name)} is outside [0, 1)")
        # actor-learner and Q-learning
        _choice("correction", self.correction, ("vtrace", "none"))
        _choice("replay", self.replay, ("prioritized", "uniform"))
        for name in ("replay_batch", "learner_updates", "q_nstep", "target_every"):
            _at_least(name, getattr(self, name), 1)
        _at_least("learning_starts", self.learning_starts, 0)
        _at_least("replay_capacity", self.replay_capacity, 1)
        if self.replay_capacity < self.replay_batch:
            raise ConfigError(
                f"replay_capacity: {self.replay_capacity} is below replay_batch "
                f"{self.replay_batch}; the replay must hold at least one minibatch"
            )
        _in_range("replay_alpha", self.replay_alpha, 0.0, 1.0)
        _in_range("replay_beta0", self.replay_beta0, 0.0, 1.0)
        _in_range("epsilon", self.epsilon, 0.0, 1.0)
        _non_negative("epsilon_alpha", self.epsilon_alpha)
        _positive("c_bar", self.c_bar)
        if _number("rho_bar", self.rho_bar) < self.c_bar:
            raise ConfigError(f"rho_bar: {self.rho_bar} must be >= c_bar ({self.c_bar})")
        _in_range("inject_worker_faults", self.inject_worker_faults, 0.0, 1.0)
        if self.inject_worker_faults == 1.0:
            raise ConfigError("inject_worker_faults: 1.0 would kill every task; use a value < 1")
        # federated
        if self.clients is not None:
            _at_least("clients", self.clients, 1)
        _at_least("local_steps", self.local_steps, 1)
        _choice("local_optimizer", self.local_optimizer, ("sgd", "adam"))
        _positive("local_lr", self.local_lr)
        _non_negative("prox_mu", self.prox_mu)
        if not 0.0 <= _number("server_momentum", self.server_momentum) < 1.0:
            raise ConfigError(f"server_momentum: {self.server_momentum} is outside [0, 1)")
        for name in ("client_uplink_mbps", "client_downlink_mbps"):
            _positive(name, getattr(self, name))
        _non_negative("client_link_sigma", self.client_link_sigma)
        # The built-in schedulers' own fields (staleness_bound, learner_batch, max_policy_lag,
        # client_fraction, client_dropout, client_availability, round_deadline_s, late_policy)
        # are checked by their Settings dataclasses, written there once.
        self._check_built_in_scheduler_fields()
        _at_least("client_eval_clients", self.client_eval_clients, 1)
        _at_least("client_eval_episodes", self.client_eval_episodes, 1)
        check_dynamics(self.client_dynamics, self.env)
        if self.round_deadline_s and self.scheduler != "fedavg":
            raise ConfigError("round_deadline_s: only the fedavg scheduler has rounds; leave it 0")
        self._check_hostile_rounds()
        # multi-agent
        _choice("critic", self.critic, ("auto", "central", "local"))
        _at_least("ppo_epochs", self.ppo_epochs, 1)
        _at_least("ppo_minibatches", self.ppo_minibatches, 1)
        _choice("ppo_advantage_norm", self.ppo_advantage_norm, registry.ADVANTAGE_NORMS)
        _positive("ppo_lr", self.ppo_lr)
        _positive("clip_coef", self.clip_coef)
        family = env_family(self.env)
        if family is not None:  # a plug-in's envs (multiagent: PettingZoo)
            family.check(self)
        else:
            registry.ALGORITHMS.check(self)
        # environments
        parse_wrappers(self.wrappers)
        for name in ("obs_clip", "reward_clip"):
            _positive(name, getattr(self, name))
        _in_range("log_std_init", self.log_std_init, -20.0, 2.0)
        _at_least("atari_frame_skip", self.atari_frame_skip, 1)
        _at_least("atari_frame_stack", self.atari_frame_stack, 1)
        _at_least("atari_noop_max", self.atari_noop_max, 0)
        if self.seed < 0 or self.seed >= 2**63:
            raise ConfigError(f"seed: {self.seed} is not allowed; use an integer in [0, 2**63)")
        self._check_mappo_options(family is not None and family.name == "multiagent")
        self._check_upper_bounds()
        self._check_no_dead_flags(family is not None and family.name == "multiagent")

    def _check_built_in_scheduler_fields(self) -> None:
        """Each built-in scheduler's fields hold a value of its default's type, and pass its
        Settings dataclass's checks (every scheduler's, as for every other field: a flag is
        checked whether or not its scheduler runs)."""
        for scheduler, settings_class in BUILT_IN_SETTINGS.items():
            for name, default in field_defaults(settings_class).items():
                value = getattr(self, name)
                if isinstance(default, bool):
                    if not isinstance(value, bool):
                        raise ConfigError(f"{name}: {value!r} is not true or false")
                elif isinstance(default, int):
                    if isinstance(value, bool) or not isinstance(value, int):
                        raise ConfigError(f"{name}: expected an integer, got {value!r}")
                elif isinstance(default, float):
                    _number(name, value)
                elif isinstance(default, str) and not isinstance(value, str):
                    raise ConfigError(f"{name}: {value!r} is not a string")
            settings_from_fields(scheduler, {name: getattr(self, name) for name in vars(self)})

    def _check_mappo_options(self, multiagent: bool) -> None:
        """The released-code choices of MAPPO: known values, and only where they act (PPO's
        epochs on a multi-agent env)."""
        _choice("mappo_value_loss", self.mappo_value_loss, ("mse", "huber"))
        _positive("mappo_huber_delta", self.mappo_huber_delta)
        defaults = TrainConfig()
        acts = multiagent and self.algo in ("mappo", "ippo", "ppo")
        for name in (
            "mappo_value_loss",
            "mappo_huber_delta",
            "mappo_separate_optimizers",
            "mappo_value_norm_per_minibatch",
        ):
            if getattr(self, name) != getattr(defaults, name) and not acts:
                raise ConfigError(
                    f"{name}: {getattr(self, name)!r} has no effect here; it applies only to "
                    f"mappo, ippo or ppo on multi-agent (PettingZoo) envs (leave it at "
                    f"{getattr(defaults, name)!r})"
                )
        if self.mappo_value_norm_per_minibatch and not self.value_norm:
            raise ConfigError(
                "mappo_value_norm_per_minibatch: needs value_norm (it says when the "
                "normalization is updated); leave it off with --no-value-norm"
            )

    def _check_scheduler(self) -> None:
        from hybrid import registry

        if self.scheduler in registry.SCHEDULERS:
            # what __post_init__ could not take as the scheduler's own settings
            own = field_defaults(BUILT_IN_SETTINGS[self.scheduler])
            for key, value in self.scheduler_args.items():
                if key not in own:
                    raise ConfigError(
                        f"scheduler_args: the built-in scheduler {self.scheduler!r} has no "
                        f"setting {key!r}; its settings are {', '.join(own) or 'none'} "
                        "(also flags: see hybrid train --help)"
                    )
                hint = typing.get_type_hints(BUILT_IN_SETTINGS[self.scheduler])[key]
                coerce_setting(key, value, hint)  # raises: it did not convert before
            registry.SCHEDULERS.check(self)
            return
        # Yours (registered, or a module:Class path): its class and Settings are checked where
        # they live, which imports the scheduler (your code) but no other component.
        registry.check_user_scheduler(self.scheduler, self.scheduler_args)

    def _check_cluster(self) -> None:
        from hybrid.cluster_profile import ClusterProfile, is_profile_path, profile_in_effect

        if not is_profile_path(self.cluster):
            _choice(
                "cluster",
                self.cluster,
                ("homogeneous", "heterogeneous", "stragglers", "a profile PATH.json"),
            )
            return
        # edge clients and round deadlines are modelled on a profile too
        # (hybrid/runtimes/virtual_cluster.py): the profile only has to load
        ClusterProfile.load(profile_in_effect(self.cluster, self.resume))

    def _check_hostile_rounds(self) -> None:
        """Robust aggregation, Byzantine clients and DP-FedAvg: their settings build (one-line
        errors) and fit the run's clients per round."""
        from hybrid.aggregation import AggregationSettings
        from hybrid.clients import ATTACKS, DELTA_ATTACKS, clients_per_round
        from hybrid.privacy import PrivacySettings

        aggregation = AggregationSettings(
            self.aggregator, self.trim_beta, self.krum_f, self.krum_m, self.norm_bound
        )
        privacy = PrivacySettings(
            self.dp_clip,
            self.dp_noise_multiplier,
            self.dp_sampling,
            self.dp_delta,
            self.dp_target_epsilon,
            self.dp_adaptive_quantile,
            self.dp_clip_lr,
            self.dp_count_noise,
        )
        _choice("byzantine_attack", self.byzantine_attack, ATTACKS)
        if not 0.0 <= _number("byzantine_fraction", self.byzantine_fraction) < 1.0:
            raise ConfigError(f"byzantine_fraction: {self.byzantine_fraction} is outside [0, 1)")
        _non_negative("byzantine_scale", self.byzantine_scale)
        defaults = TrainConfig()
        server = [
            name
            for name in FIELD_OWNERS["aggregation"] + FIELD_OWNERS["privacy"]
            if getattr(self, name) != getattr(defaults, name)
        ]
        needs = {  # a knob refused where it would do nothing
            "trim_beta": (self.aggregator == "trimmed_mean", "with aggregator trimmed_mean"),
            "krum_f": (self.aggregator in ("krum", "multi_krum"), "with aggregator krum"),
            "krum_m": (self.aggregator == "multi_krum", "with aggregator multi_krum"),
            "byzantine_attack": (self.byzantine_fraction > 0, "with byzantine_fraction > 0"),
            "byzantine_scale": (self.byzantine_fraction > 0, "with byzantine_fraction > 0"),
            **{
                name: (self.dp_clip > 0, "with dp_clip > 0 (DP-FedAvg)")
                for name in FIELD_OWNERS["privacy"]
                if name != "dp_clip"
            },
        }
        for name, (applies, when) in needs.items():
            if getattr(self, name) != getattr(defaults, name) and not applies:
                raise ConfigError(
                    f"{name}: {getattr(self, name)!r} has no effect here; it applies only {when}"
                )
        private = [name for name in server if name in FIELD_OWNERS["privacy"]]
        if private and self.scheduler != "fedavg":
            raise ConfigError(
                f"{private[0]}: DP-FedAvg is offered with --scheduler fedavg only: its accountant "
                "charges one sampled round per noised step, and FedBuff's buffer (or your own "
                "scheduler) steps on other terms, so the ε it reported would not hold"
            )
        if server and self.scheduler != "fedavg":
            raise ConfigError(
                f"{server[0]}: applies only with --scheduler fedavg (FedBuff and your own "
                "scheduler take the aggregation settings as --scheduler-arg)"
            )
        hostile = [n for n in FIELD_OWNERS["byzantine"] if getattr(self, n) != getattr(defaults, n)]
        if hostile and self.clients is None:
            raise ConfigError(f"{hostile[0]}: Byzantine clients are edge clients; set --clients K")
        rewrites_delta = self.byzantine_fraction and self.byzantine_attack in DELTA_ATTACKS
        if rewrites_delta and self.codec != "none":
            raise ConfigError(
                f"byzantine_attack: {self.byzantine_attack} rewrites the Δ a client sends; "
                "it needs --codec none"
            )
        if self.scheduler != "fedavg":
            return
        k = self.clients if self.clients is not None else self.workers
        per_round = clients_per_round(self.client_fraction, k)
        aggregation.check_clients(per_round)
        if privacy.enabled:
            if not aggregation.is_plain_mean:
                raise ConfigError(
                    f"aggregator: DP-FedAvg aggregates with the mean; leave aggregator mean and "
                    f"norm_bound 0 with dp_clip (got {self.aggregator}, {self.norm_bound})"
                )
            if self.clients is None:
                raise ConfigError("dp_clip: DP-FedAvg protects edge clients; set --clients K")
            if self.client_availability < 1.0:
                raise ConfigError(
                    "client_availability: DP-FedAvg's accountant assumes every client can be "
                    "sampled; leave it 1 with dp_clip"
                )
            if self.late_policy == "admit":
                raise ConfigError(
                    "late_policy: a late Δ admitted in a later round is not in the accountant's "
                    "one-release-per-round model; use drop with dp_clip"
                )
            if self.codec != "none":
                raise ConfigError("codec: DP-FedAvg clips the Δs as sent; use --codec none")
        privacy.check_round(k, per_round)
        self._check_trace()

    def _check_trace(self) -> None:
        if not self.client_trace:
            return
        from hybrid import registry
        from hybrid.traces import load_trace

        # fedavg reads availability from it; a scheduler of yours may (FedBuff's client_trace
        # argument); the other built-ins would ignore it.
        ignored = self.scheduler in registry.SCHEDULERS and self.scheduler != "fedavg"
        if ignored or self.clients is None:
            raise ConfigError(
                "client_trace: drives edge clients under fedavg (or a scheduler of yours that "
                "reads it, such as FedBuff); use --scheduler fedavg --clients K"
            )
        from hybrid.cluster_profile import is_profile_path

        # A measured profile prices a task on this machine and the trace scales it by each
        # client's speed; a built-in cluster's speeds would compete with the trace's.
        if not (self.cluster == "homogeneous" or is_profile_path(self.cluster)):
            raise ConfigError(
                "client_trace: the trace sets each client's speed and links; leave cluster "
                "homogeneous (or a measured profile PATH.json) and client_link_sigma 0"
            )
        if self.client_link_sigma:
            raise ConfigError(
                "client_trace: the trace sets each client's links; leave client_link_sigma 0"
            )
        if self.dp_clip:
            raise ConfigError(
                "client_trace: DP-FedAvg's accountant assumes every client can be sampled"
            )
        load_trace(self.client_trace, self.clients)

    def _check_no_dead_flags(self, multiagent: bool) -> None:
        """A field changed from its default where it has no effect is refused: a run (or a
        sweep varying it) would otherwise report a knob that did nothing."""
        defaults = TrainConfig()
        # The machine model (worker speeds, links, round deadlines) sets durations on the
        # serial runtime's virtual clock; processes and ray run at this machine's real speed.
        virtual = self.runtime == "serial"
        given = {
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        }
        applies_when = {
            "staleness_bound": (self.scheduler == "bounded", "with --scheduler bounded"),
            "staleness_aware_lr": (self.scheduler == "bounded", "with --scheduler bounded"),
            "param_sharing": (multiagent, "on multi-agent (PettingZoo) envs"),
            "agent_id": (multiagent, "on multi-agent (PettingZoo) envs"),
            "critic": (multiagent, "on multi-agent (PettingZoo) envs"),
            "ray_address": (self.runtime == "ray", "with --runtime ray"),
            **{name: (virtual, VIRTUAL_ONLY) for name in VIRTUAL_CLOCK_FIELDS},
            "wandb_checkpoint": (
                self.track and self.checkpoint_every > 0,
                "with --track and --checkpoint-every N",
            ),
        }
        for name, (applies, when) in applies_when.items():
            if name in given and not applies:
                raise ConfigError(
                    f"{name}: {getattr(self, name)!r} has no effect here; it applies only "
                    f"{when} (leave it at {getattr(defaults, name)!r})"
                )

    def _check_upper_bounds(self) -> None:
        """Upper bounds: what can run at all. Memory that depends on the env's spaces is
        checked once the env is known (hybrid.trainer.check_resources)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and abs(value) > FLOAT32_MAX:
                # every number ends up in float32 tensors (parameters, optimizer, buffers)
                raise ConfigError(
                    f"{f.name}: {value!r} is beyond the float32 range (±{FLOAT32_MAX:.4g}) the "
                    "parameters and buffers are computed in"
                )
        cap = WORKER_CAPS.get(self.runtime, WORKER_CAPS["serial"])
        _at_most("workers", self.workers, cap[0], cap[1])
        if self.clients is not None:
            _at_most("clients", self.clients, 1_000_000, "edge-client profiles are drawn up front")
        for name, high, why in _INT_CAPS:
            _at_most(name, getattr(self, name), high, why)
        for name, high, why in _FLOAT_CAPS:
            _at_most(name, getattr(self, name), high, why)
        for name in ("bandwidth_mbps", "client_uplink_mbps", "client_downlink_mbps"):
            if getattr(self, name) < MIN_MBPS:
                raise ConfigError(
                    f"{name}: {getattr(self, name)!r} is below {MIN_MBPS} Mbit/s (1 kbit/s); an "
                    "upload would take longer than the virtual clock can count"
                )
        if self.algo in ("ppo", "mappo", "ippo"):
            samples = self.rollout_steps * self.envs_per_worker
            where = "per task (rollout_steps x envs_per_worker)"
            if self.scheduler == "hybrid":  # the learner trains on learner_batch rollouts
                samples *= self.learner_batch
                where = "per learner batch (learner_batch x rollout_steps x envs_per_worker)"
            if self.ppo_minibatches > samples:
                raise ConfigError(
                    f"ppo_minibatches: {self.ppo_minibatches} is more than the {samples} samples "
                    f"{where}; a minibatch would be empty. Use at most {samples}"
                )
        for f in dataclasses.fields(self):  # the rest (cadences, bounds, seeds) fit int64
            value = getattr(self, f.name)
            big = isinstance(value, int) and not isinstance(value, bool) and value > INT_MAX
            if big and f.name != "seed":  # seeds have their own range, [0, 2**63)
                raise ConfigError(f"{f.name}: {value} is beyond 2**62, more than any run reaches")


FIELD_OWNERS: dict[str, tuple[str, ...]] = {
    # Who owns each field: the component it configures. Only the assembly (hybrid/assembly.py,
    # hybrid/trainer.py, cli, flags, sweep, calibrate, config and its checks, a plug-in's
    # registration) reads the config; components get their own settings dataclasses from it
    # (tests/test_config_owners.py fails on a component that reads or imports the config).
    "run": (
        "env",
        "scheduler",
        "scheduler_args",
        "runtime",
        "algo",
        "workers",
        "envs_per_worker",
        "rollout_steps",
        "total_env_steps",
        "stop_when_solved",
        "seed",
        "device",
    ),
    "nets": ("hidden", "layers", "head", "log_std_init", "state_dependent_std"),
    "a2c": (
        "gamma",
        "gae_lambda",
        "ent_coef",
        "vf_coef",
        "normalize_advantages",
        "correction",
        "rho_bar",
        "c_bar",
    ),
    "nstep_q": (
        "replay",
        "replay_capacity",
        "replay_batch",
        "replay_alpha",
        "replay_beta0",
        "learner_updates",
        "learning_starts",
        "q_nstep",
        "epsilon",
        "epsilon_alpha",
        "target_every",
    ),
    "ppo": (
        "value_norm",
        "ppo_epochs",
        "ppo_minibatches",
        "ppo_advantage_norm",
        "ppo_lr",
        "clip_coef",
        "clip_vloss",
    ),
    "global_model": (
        "optimizer",
        "lr",
        "lr_schedule",
        "max_grad_norm",
        "adam_eps",
        "rmsprop_alpha",
        "server_beta1",
        "server_beta2",
        "server_momentum",
    ),
    # a built-in scheduler owns the fields of its Settings dataclass (hybrid.registry)
    "bounded": tuple(field_defaults(BUILT_IN_SETTINGS["bounded"])),
    "actor_learner": tuple(field_defaults(BUILT_IN_SETTINGS["hybrid"])),
    "fedavg": (
        *field_defaults(BUILT_IN_SETTINGS["fedavg"]),
        "local_steps",
        "local_optimizer",
        "local_lr",
        "prox_mu",
    ),
    "clients": (
        "clients",
        "client_dynamics",
        "client_uplink_mbps",
        "client_downlink_mbps",
        "client_link_sigma",
    ),
    "aggregation": ("aggregator", "trim_beta", "krum_f", "krum_m", "norm_bound"),
    "byzantine": ("byzantine_fraction", "byzantine_attack", "byzantine_scale"),
    "privacy": (
        "dp_clip",
        "dp_noise_multiplier",
        "dp_sampling",
        "dp_delta",
        "dp_target_epsilon",
        "dp_adaptive_quantile",
        "dp_clip_lr",
        "dp_count_noise",
    ),
    "traces": ("client_trace",),
    "federated": ("client_eval_clients", "client_eval_episodes"),
    "serial": (
        "cluster",
        "step_cost_s",
        "task_overhead_s",
        "speed_sigma",
        "straggler_fraction",
        "straggler_slowdown",
        "jitter_sigma",
        "bandwidth_mbps",
    ),
    "codecs": ("codec", "topk_ratio", "error_feedback"),
    "parallel": ("lock_free", "inject_worker_faults", "torch_threads"),
    "ray": ("ray_address",),
    "checkpoint": ("checkpoint_every", "keep_checkpoints", "checkpoint_replay", "resume"),
    "multiagent": ("param_sharing", "agent_id", "critic"),
    "mappo": (
        "mappo_value_loss",
        "mappo_huber_delta",
        "mappo_separate_optimizers",
        "mappo_value_norm_per_minibatch",
    ),
    "envs": ("env_defaults", "wrappers"),
    "normalization": ("normalize_obs", "normalize_reward", "obs_clip", "reward_clip"),
    "atari": (
        "atari_frame_skip",
        "atari_frame_stack",
        "atari_noop_max",
        "atari_episodic_life",
        "atari_clip_rewards",
    ),
    "evaluation": ("eval_every", "eval_episodes"),
    "tracking": (
        "log_every",
        "out",
        "track",
        "wandb_project",
        "wandb_checkpoint",
        "exp_name",
        "progress",
    ),
}
"""Owner -> the TrainConfig fields it owns; every field has exactly one owner."""


# --- which flags take effect: derived from who owns each field -------------------------


@dataclass(frozen=True)
class Applies:
    """Where a component's settings take effect: ``test(cfg, ctx)``, said as ``when``."""

    test: Callable[[TrainConfig, FlagContext], bool]
    when: str


@dataclass(frozen=True)
class FlagContext:
    """What the rule needs besides the config: facts read from names, without building."""

    multiagent: bool
    """The env is a multi-agent (PettingZoo) task."""
    trains_locally: bool
    """The scheduler's task kind is TrainLocally (fedavg, or a user's such as FedBuff)."""
    built_in: bool
    """The scheduler is one of hybrid's own (sync, async, bounded, hybrid, fedavg)."""


_PPO_ALGOS = ("ppo", "mappo", "ippo")
_FEDOPT = ("fedadam", "fedyogi", "fedadagrad")


def _profile(cfg: TrainConfig) -> bool:
    from hybrid.cluster_profile import is_profile_path

    return is_profile_path(cfg.cluster)


OWNER_APPLIES: dict[str, Applies | None] = {
    # None: the owner takes part in every run. Every owner of FIELD_OWNERS is listed
    # (tests/test_dead_flags.py): a new field is judged by its owner from its first day.
    "run": None,
    "nets": None,
    "a2c": None,  # the losses' shared coefficients: PPO and n-step Q use them too
    "nstep_q": Applies(lambda c, x: c.algo == "nstep_q", "with --algo nstep_q"),
    "ppo": Applies(lambda c, x: c.algo in _PPO_ALGOS, "with --algo ppo, mappo or ippo"),
    "global_model": None,
    "bounded": Applies(lambda c, x: c.scheduler == "bounded", "with --scheduler bounded"),
    "actor_learner": Applies(lambda c, x: c.scheduler == "hybrid", "with --scheduler hybrid"),
    "fedavg": Applies(
        lambda c, x: c.scheduler == "fedavg" or x.trains_locally,
        "with --scheduler fedavg (or your scheduler whose task_kind is TrainLocally)",
    ),
    "clients": None,  # edge clients run under every scheduler
    "federated": Applies(
        lambda c, x: c.clients is not None or c.client_dynamics != "iid",
        "with edge clients (--clients K) or client env variants (--client-dynamics)",
    ),
    # fedavg's server combines the Δs; FedBuff and your own scheduler take the aggregation
    # settings as --scheduler-arg, not as these flags
    "aggregation": Applies(lambda c, x: c.scheduler == "fedavg", "with --scheduler fedavg"),
    "privacy": Applies(lambda c, x: c.scheduler == "fedavg", "with --scheduler fedavg"),
    "byzantine": Applies(lambda c, x: c.clients is not None, "with edge clients (--clients K)"),
    "traces": Applies(
        lambda c, x: c.clients is not None and (c.scheduler == "fedavg" or not x.built_in),
        "with edge clients (--clients K) under fedavg or a scheduler of yours that reads it",
    ),
    "serial": Applies(lambda c, x: c.runtime == "serial", "on the serial runtime's virtual clock"),
    "codecs": None,
    "parallel": Applies(
        lambda c, x: c.runtime in ("processes", "ray"), "with --runtime processes or ray"
    ),
    "ray": Applies(lambda c, x: c.runtime == "ray", "with --runtime ray"),
    "checkpoint": None,
    "multiagent": Applies(lambda c, x: x.multiagent, "on multi-agent (PettingZoo) envs"),
    "mappo": Applies(
        lambda c, x: x.multiagent and c.algo in _PPO_ALGOS,
        "with --algo mappo, ippo or ppo on multi-agent (PettingZoo) envs",
    ),
    "envs": None,
    "normalization": None,
    "atari": Applies(lambda c, x: c.env.startswith("ALE/"), "on Atari envs (ALE/...)"),
    "evaluation": None,
    "tracking": None,
}
"""Owner -> where its fields take effect (None: everywhere)."""

FIELD_APPLIES: dict[str, Applies] = {
    # A field whose effect depends on more than its owner taking part: this replaces the
    # owner's rule for that field.
    "server_beta1": Applies(
        lambda c, x: c.optimizer in _FEDOPT, "with --optimizer " + "/".join(_FEDOPT)
    ),
    "server_beta2": Applies(
        lambda c, x: c.optimizer in _FEDOPT, "with --optimizer " + "/".join(_FEDOPT)
    ),
    "server_momentum": Applies(lambda c, x: c.optimizer == "sgd", "with --optimizer sgd"),
    "topk_ratio": Applies(lambda c, x: c.codec == "topk", "with --codec topk"),
    "error_feedback": Applies(lambda c, x: c.codec == "topk", "with --codec topk"),
    "obs_clip": Applies(lambda c, x: c.normalize_obs, "with --normalize-obs"),
    "reward_clip": Applies(lambda c, x: c.normalize_reward, "with --normalize-reward"),
    "keep_checkpoints": Applies(lambda c, x: c.checkpoint_every > 0, "with --checkpoint-every N"),
    "checkpoint_replay": Applies(
        lambda c, x: c.checkpoint_every > 0 and c.algo == "nstep_q",
        "with --checkpoint-every N and --algo nstep_q",
    ),
    "wandb_project": Applies(lambda c, x: c.track, "with --track"),
    "wandb_checkpoint": Applies(
        lambda c, x: c.track and c.checkpoint_every > 0, "with --track and --checkpoint-every N"
    ),
    # fedavg's own round settings (FedAvgSettings); a user's scheduler gets the client
    # population (dropout, availability), a TrainLocally task the local training settings
    "client_fraction": Applies(lambda c, x: c.scheduler == "fedavg", "with --scheduler fedavg"),
    "late_policy": Applies(lambda c, x: c.scheduler == "fedavg", "with --scheduler fedavg"),
    "round_deadline_s": Applies(lambda c, x: c.scheduler == "fedavg", "with --scheduler fedavg"),
    "client_dropout": Applies(
        lambda c, x: c.scheduler == "fedavg" or not x.built_in,
        "with --scheduler fedavg or your own scheduler (they draw the client population)",
    ),
    "client_availability": Applies(
        lambda c, x: c.scheduler == "fedavg" or not x.built_in,
        "with --scheduler fedavg or your own scheduler (they draw the client population)",
    ),
    # the parallel runtimes' own, with exceptions: threads are set on every runtime, and a
    # measured profile's clock models Hogwild!'s worker-side applies
    "torch_threads": Applies(lambda c, x: True, "everywhere"),
    "lock_free": Applies(
        lambda c, x: c.runtime == "processes" or (c.runtime == "serial" and _profile(c)),
        "with --runtime processes (or a measured --cluster profile.json, which models it)",
    ),
    "inject_worker_faults": Applies(
        lambda c, x: c.runtime in ("processes", "ray"), "with --runtime processes or ray"
    ),
}
"""Field -> where it takes effect, for a field whose owner's rule is too coarse."""


def field_applies(name: str) -> Applies | None:
    """The rule for one field: its own, else its owner's (None: it always takes effect)."""
    if name in FIELD_APPLIES:
        return FIELD_APPLIES[name]
    return OWNER_APPLIES[_OWNER_OF[name]]


def check_flags_take_effect(cfg: TrainConfig, given: set[str] | frozenset[str]) -> None:
    """Refuse a field in ``given`` (set by the user) whose component takes no part in this
    run: a flag that does nothing would be reported as a knob that was turned. The rule is
    the owner's (``OWNER_APPLIES``), or the field's own (``FIELD_APPLIES``); ``cfg`` is the
    config in effect (after the env's defaults), ``given`` what the user set."""
    defaults = TrainConfig()
    context = flag_context(cfg)
    for f in dataclasses.fields(TrainConfig):
        if f.name not in given or _same_setting(getattr(cfg, f.name), getattr(defaults, f.name)):
            continue
        rule = field_applies(f.name)
        if rule is not None and not rule.test(cfg, context):
            raise ConfigError(
                f"{f.name}: {getattr(cfg, f.name)!r} has no effect here; it applies only "
                f"{rule.when} (leave it at {getattr(defaults, f.name)!r})"
            )


def flag_context(cfg: TrainConfig) -> FlagContext:
    from hybrid import registry
    from hybrid.envs import env_family

    family = env_family(cfg.env)
    built_in = cfg.scheduler in registry.SCHEDULERS
    trains_locally = False
    if not built_in:
        from hybrid.protocol import TrainLocally

        kind = registry.loaded_task_kind(cfg.scheduler)
        # not loaded (a sweep's dry run imports no scheduler): its flags may apply
        trains_locally = kind is None or kind is TrainLocally
    return FlagContext(
        multiagent=family is not None and family.name == "multiagent",
        trains_locally=trains_locally,
        built_in=built_in,
    )


def given_fields(cfg: TrainConfig, keep: Any = ()) -> set[str]:
    """The fields set away from their global defaults, and those named in ``keep`` (a
    caller's explicit keywords): what the user gave, before the env's defaults are added."""
    defaults = TrainConfig()
    changed = {
        f.name
        for f in dataclasses.fields(TrainConfig)
        if not _same_setting(getattr(cfg, f.name), getattr(defaults, f.name))
    }
    return changed | set(keep)


def _same_setting(a: object, b: object) -> bool:
    # 1 and 1.0 are one value; True and 1 are not one setting
    return a == b and isinstance(a, bool) == isinstance(b, bool)


_OWNER_OF = {name: owner for owner, names in FIELD_OWNERS.items() for name in names}


VIRTUAL_CLOCK_FIELDS = (
    *FIELD_OWNERS["serial"],
    "client_uplink_mbps",
    "client_downlink_mbps",
    "client_link_sigma",
)
"""Fields of the modelled machine (the serial runtime's own, and the edge clients' drawn
links): they set durations on the virtual clock only. Round deadlines and client traces
hold on every runtime (wall time on processes and ray)."""
VIRTUAL_ONLY = (
    "on the serial runtime's virtual clock (--runtime serial); processes and ray run at "
    "this machine's real speed"
)


_TYPE_NAMES = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}


def _typed(name: str, value: object, annotation: str) -> Any:
    if annotation.startswith("dict["):  # scheduler_args: its scheduler's Settings check it
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{name}: expected a mapping of names to values, got {value!r}")
        return dict(value)
    kinds = [part.strip() for part in annotation.split("|")]
    if value is None and "None" in kinds:
        return None
    for kind in kinds:
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind == "str" and isinstance(value, str):
            return value
        if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
            return value
        # a float, or an integer short enough to be one (float() of a longer one overflows)
        number = isinstance(value, float) or (
            isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**1024
        )
        if kind == "float" and number:
            return float(value)
    expected = " or ".join(_TYPE_NAMES.get(k, "null" if k == "None" else k) for k in kinds)
    raise ConfigError(f"{name}: expected {expected}, got {value!r}")


FLOAT32_TINY = 1.1754943508222875e-38
"""float32's smallest normal number (numpy.finfo(numpy.float32).tiny)."""
MIN_MBPS = 1e-3

# workers per runtime: the serial runtime simulates many on one clock (each still holds its
# envs and model copy); a process costs an interpreter with torch (~150 MB); an actor more.
WORKER_CAPS: dict[str, tuple[int, str]] = {
    "serial": (10_000, "the serial runtime holds every worker's envs and model in one process"),
    "processes": (256, "each worker is an OS process with its own torch (~150 MB)"),
    "ray": (1_024, "each worker is a Ray actor with its own torch"),
}

_INT_CAPS: tuple[tuple[str, int, str], ...] = (
    ("envs_per_worker", 4_096, "each env is its own simulator instance"),
    ("rollout_steps", 1_000_000, "a worker holds its whole rollout in memory"),
    ("total_env_steps", 10**13, "a budget beyond 10**13 env steps does not finish"),
    ("hidden", 65_536, "the networks are dense"),
    ("layers", 64, "deeper tanh MLPs do not train"),
    ("eval_episodes", 1_000, "the evaluator steps one env per episode at once"),
    ("learner_batch", 10_000, "the learner holds a batch of whole trajectories"),
    ("replay_capacity", 2**40, "the replay is held in memory"),
    ("replay_batch", 1_000_000, "a minibatch is one forward pass"),
    ("learner_updates", 100_000, "the learner runs them between actor batches"),
    ("q_nstep", 10_000, "n-step transitions are built in memory"),
    ("local_steps", 1_000_000, "a client runs them within one round"),
    ("krum_f", 1_000_000, "Krum compares every pair of a round's Δs"),
    ("krum_m", 1_000_000, "Multi-Krum averages at most a round's Δs"),
    ("client_eval_clients", 100_000, "each evaluated client builds its envs"),
    ("client_eval_episodes", 1_000, "episodes per evaluated client run at once"),
    ("ppo_epochs", 10_000, "every epoch passes over the whole rollout"),
    ("torch_threads", 1_024, "torch's thread pool"),
    ("keep_checkpoints", 100_000, "every kept checkpoint is a file of the full state"),
    ("atari_frame_skip", 1_000, "frames per agent step"),
    ("atari_frame_stack", 256, "stacked frames are held per observation"),
    ("atari_noop_max", 1_000_000, "no-ops at the start of each game"),
)
_FLOAT_CAPS: tuple[tuple[str, float, str], ...] = (
    # the virtual clock's cost model: its sums must stay finite over a whole run
    ("step_cost_s", 3_600.0, "virtual seconds per env step (an hour)"),
    ("task_overhead_s", 86_400.0, "virtual seconds per task (a day)"),
    ("straggler_slowdown", 1e6, "times slower than the rest"),
    ("speed_sigma", 10.0, "a lognormal sigma of speeds (e**10 apart already)"),
    ("jitter_sigma", 10.0, "a lognormal sigma of task durations"),
    ("client_link_sigma", 10.0, "a lognormal sigma of link speeds"),
    ("bandwidth_mbps", 1e9, "Mbit/s (a petabit link)"),
    ("client_uplink_mbps", 1e9, "Mbit/s (a petabit link)"),
    ("client_downlink_mbps", 1e9, "Mbit/s (a petabit link)"),
    ("round_deadline_s", 1e9, "seconds (about 30 years)"),
)


def _at_most(name: str, value: object, high: float, why: str) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > high:
        raise ConfigError(f"{name}: {value!r} is more than {high:,} can run ({why})")


def _choice(name: str, value: object, allowed: Any) -> None:
    if value not in allowed:
        options = ", ".join(str(a) for a in allowed)
        raise ConfigError(f"{name}: unknown {value!r}; choose one of {options}")


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{name}: {value!r} is not a finite number")
    return float(value)


def _at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: expected an integer >= {low}, got {value!r}")
    if value < low:
        raise ConfigError(f"{name}: {value} is too small; it must be an integer >= {low}")


def _in_range(name: str, value: object, low: float, high: float) -> None:
    number = _number(name, value)
    if not low <= number <= high:
        raise ConfigError(f"{name}: {value} is outside [{low}, {high}]")


def _positive(name: str, value: object) -> None:
    if _number(name, value) <= 0:
        raise ConfigError(f"{name}: {value} must be > 0")


def _non_negative(name: str, value: object) -> None:
    if _number(name, value) < 0:
        raise ConfigError(f"{name}: {value} must be >= 0")


__all__ = [
    "FIELD_APPLIES",
    "FIELD_OWNERS",
    "OWNER_APPLIES",
    "ConfigError",
    "TrainConfig",
    "check_flags_take_effect",
    "field_applies",
    "given_fields",
]
