"""A worker: its own envs, a local model copy and an algorithm; one task -> one Update.

It is built from ``WorkerSettings`` (picklable: what a worker process or an actor
receives), which the assembly (``hybrid/assembly.py``) makes from the run's config."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hybrid.algorithms import ALGORITHMS, AlgoSettings
from hybrid.algorithms.a2c import a2c_group_gradients, a2c_loss
from hybrid.algorithms.ppo import LocalPPO
from hybrid.algorithms.rollout import EnvRunner, make_runner
from hybrid.clients import ClientSettings, apply_client_dynamics
from hybrid.codecs import Codec, make_codec
from hybrid.core.global_model import make_optimizer, plain_step
from hybrid.envs import EnvInfo, EnvSettings, make_vector_env
from hybrid.nets import ActorCritic, FlatParams, batched_tanh_mlp, sample_categorical
from hybrid.normalization import OBS_MEAN, OBS_VAR, NormalizationSettings, ObsNormalizer
from hybrid.protocol import (
    CollectExperience,
    ComputeGradient,
    Payload,
    Snapshot,
    Task,
    TrainLocally,
    Update,
)
from hybrid.seeding import WORKER, int_seed, stream, worker_seeds

if TYPE_CHECKING:
    import gymnasium as gym

CODEC_STREAM = 7  # spawn-key slot of a worker's codec randomness
LOCAL_ADAM_EPS = 1e-5  # a federated client's local Adam: the RL default
RESUME_STREAM = 8  # seeds for envs that must restart on resume


def build_model(settings: AlgoSettings, info: EnvInfo, worker_id: int = -1) -> torch.nn.Module:
    """The algorithm's model (``worker_id = -1``: the server's or the evaluator's copy)."""
    return ALGORITHMS[settings.algo].model(settings, info, worker_id)


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker is built from (the assembly fills it from the config). Picklable: the
    parallel runtimes send it to their worker processes and actors. No field has a default:
    each comes from the config, whose defaults are the ones."""

    algo: AlgoSettings
    env: str
    envs_per_worker: int
    rollout_steps: int
    seed: int
    envs: EnvSettings
    normalization: NormalizationSettings
    codec: str
    topk_ratio: float
    error_feedback: bool
    clients: ClientSettings | None
    """Set when workers run env variants (``client_dynamics``): each id gets its profile's."""
    local_max_grad_norm: float
    """A federated client's clip of each local loss gradient (the run's max_grad_norm)."""
    local_rmsprop_alpha: float


class Worker:
    """Produces one ``Update`` per task from the snapshot it is given.

    The snapshot's ``task`` says what to send: ``gradient`` (the gradient of the
    algorithm's loss on a fresh rollout) or ``trajectory`` (what an actor hands an
    actor-learner: the rollout itself, or Ape-X's prioritized n-step transitions).
    """

    def __init__(
        self,
        worker_id: int,
        settings: WorkerSettings,
        info: EnvInfo,
        incarnation: int = 0,
        shared_model: tuple[torch.nn.Module, FlatParams] | None = None,
        lent_envs: gym.vector.VectorEnv | None = None,
    ) -> None:
        """``lent_envs``: a vector env built from these settings that another worker is done
        with (``EdgeClients.run``). It is used instead of a new one: this worker's env variant
        and its seeded reset overwrite all the state such an env has, so the bits are those of
        a fresh env. Its owner closes it, not this worker."""
        self.worker_id = worker_id
        self.settings = settings
        env_seed, torch_seed = worker_seeds(settings.seed, worker_id, incarnation)
        self.algorithm = ALGORITHMS[settings.algo.algo]
        # Workers that run one at a time may share one model: every task loads the snapshot
        # into it first (see ``shares_model``).
        if shared_model is not None:
            self.model, self.flat = shared_model
        else:
            self.model = build_model(settings.algo, info, worker_id)
            self.flat = FlatParams(self.model)
        self.loss_fn = self.algorithm.loss(settings.algo)
        self.actor_payload = self.algorithm.actor_payload(settings.algo)
        build_local = self.algorithm.local_update
        self.local_update = build_local(settings.algo) if build_local is not None else None
        self.generator = torch.Generator().manual_seed(torch_seed)
        # The worker's own env instances (simulators are never shared between workers).
        envs = lent_envs
        if envs is None:
            envs = make_vector_env(settings.env, settings.envs_per_worker, settings.envs, info)
        if settings.clients is not None:  # an edge client's own env variant (hybrid/clients.py)
            apply_client_dynamics(envs, settings.clients, worker_id)
        # The runner owns the episodes in progress, the envs' state and normalization.
        self.runner = make_runner(envs, env_seed, info, settings.normalization)
        # Each worker owns its codec: top-k's error-feedback residual is worker state. Its seed
        # is drawn only for a codec: an edge client is built per task, and the draw is not free.
        self.codec: Codec | None = None
        if settings.codec != "none":
            codec_seq = stream(settings.seed, WORKER, worker_id, incarnation, CODEC_STREAM)
            self.codec = make_codec(
                settings.codec,
                topk_ratio=settings.topk_ratio,
                error_feedback=settings.error_feedback,
                seed=int_seed(codec_seq),
            )
        self.tasks_done = 0

    @property
    def shares_model(self) -> bool:
        """Whether workers that never run at the same time can share this worker's model:
        true of an actor-critic, which holds nothing between tasks besides the snapshot's
        parameters (a Q-network holds its worker's epsilon)."""
        return type(self.model) is ActorCritic

    @property
    def obs_norm(self) -> ObsNormalizer | None:
        """The runner's observation normalizer (``--normalize-obs``), or None."""
        return self.runner.obs_norm

    def run_task(self, snapshot: Snapshot) -> Update:
        """Do what ``snapshot.task`` asks: compute a direction, act for a learner, or train
        locally."""
        if isinstance(snapshot.task, TrainLocally):
            return self.run_local_training(snapshot, snapshot.task)
        started = time.perf_counter()
        self.flat.load(snapshot.params)
        if snapshot.extras:
            self.load_extras(snapshot.extras)
        acting = isinstance(snapshot.task, CollectExperience)
        rollout = self.runner.collect(
            self.model,
            rollout_steps(snapshot.task, self.settings),
            self.generator,
            record_logp=acting and self.algorithm.records_behaviour_logp,
        )
        stats: dict[str, float] = {}
        kind = Payload.GRADIENT
        if acting:
            payload: Any = self.actor_payload(self.model, rollout)
            nbytes = payload_nbytes(payload)
            kind = Payload.TRAJECTORY
        elif self.local_update is not None:
            # PPO's epochs run on the worker; what travels is the pseudo-gradient Δ.
            delta, stats = self.local_update(self.model, self.flat, rollout, self.generator)
            payload, nbytes = self.encode(delta)
            kind = Payload.DELTA
        else:
            self.flat.zero_grad()
            loss, stats = self.loss_fn(self.model, rollout)
            loss.backward()
            payload, nbytes = self.encode(self.flat.grad())
        return self.finish_task(
            snapshot,
            (payload, nbytes),
            kind,
            rollout.env_steps,
            (rollout.episode_returns, rollout.episode_lengths),
            stats,
            time.perf_counter() - started,
        )

    def finish_task(
        self,
        snapshot: Snapshot,
        payload: tuple[Any, int],
        kind: Payload,
        env_steps: int,
        episodes: tuple[list[float], list[int]],
        stats: dict[str, float],
        cost_s: float,
    ) -> Update:
        """The ``Update`` of the task just done (``payload``: what travels and its size in
        bytes; ``episodes``: the returns and lengths of the episodes it ended); counts it."""
        update = Update(
            worker_id=self.worker_id,
            base_version=snapshot.version,
            payload=payload[0],
            kind=kind,
            env_steps=env_steps,
            episode_returns=episodes[0],
            episode_lengths=episodes[1],
            stats=stats,
            nbytes=payload[1],
            cost_s=cost_s,
            task_index=self.tasks_done,
            obs_stats=self.runner.take_obs_stats(),
        )
        self.tasks_done += 1
        return update

    def run_local_training(self, snapshot: Snapshot, task: TrainLocally) -> Update:
        """A federated client's round: E local steps from θ_global, then Δ = θ_global − θ_local.

        Each step is a rollout, the gradient of the loss clipped to max_grad_norm, plus
        FedProx's proximal gradient μ(θ − θ_global), and a step of a local optimizer that is
        fresh every round.
        """
        started = time.perf_counter()
        settings = self.settings
        self.flat.load(snapshot.params)
        if snapshot.extras:
            self.load_extras(snapshot.extras)
        params = self.flat.params
        # Adam and SGD act coordinate by coordinate, so one step over the flat vector is the
        # per-parameter step bit for bit, in one set of ops instead of one per parameter. Only
        # where every parameter is in every step's loss (an actor-critic): torch skips a
        # parameter without a gradient, which the flat step cannot.
        flat_step = type(self.model) is ActorCritic and task.optimizer in ("adam", "sgd")
        # Not the server's adam_eps: that is FedOpt's tau, often 1e-3 or more.
        optimizer = make_optimizer(
            task.optimizer,
            [self.flat.flat] if flat_step else params,
            task.lr,
            LOCAL_ADAM_EPS,
            settings.local_rmsprop_alpha,
        )
        anchor: list[torch.Tensor] = []
        if task.prox_mu > 0:
            # Views of θ_global shaped like each parameter; the snapshot is shared, only read.
            chunks = snapshot.params.split([p.numel() for p in params])
            anchor = [a.view_as(p) for a, p in zip(chunks, params, strict=True)]
        max_norm = settings.local_max_grad_norm
        steps = rollout_steps(task, settings)
        env_steps, returns, lengths = 0, [], []
        totals: dict[str, float] = {}
        for _ in range(task.steps):
            rollout = self.runner.collect(self.model, steps, self.generator)
            self.flat.zero_grad()
            loss, stats = self.loss_fn(self.model, rollout)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
            grad: torch.Tensor | None = None
            if flat_step and task.prox_mu == 0 and len(grads) == len(params):
                # clip_grad_norm_'s own ops (the norm of the per-parameter norms, then one
                # scale), the scale applied once to the flat gradient: a product rounds alike
                # wherever it is taken, so these are its bits without its wrappers.
                grad = torch.cat([g.reshape(-1) for g in grads])
                if max_norm > 0:
                    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
                    grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
            else:
                if max_norm > 0:  # bounds the RL loss's gradient, not the pull home
                    torch.nn.utils.clip_grad_norm_(params, max_norm)
                if task.prox_mu > 0:
                    # Per parameter: a fused add over one long vector may round other bits.
                    drift = add_proximal_gradient(params, anchor, task.prox_mu)
                    stats["losses/prox_drift"] = drift
                if flat_step:
                    grad = self.flat.grad()
            # plain_step: the same bits as optimizer.step(), without its wrappers
            if grad is not None:
                if not plain_step(optimizer, self.flat.flat, grad):
                    self.flat.flat.grad = grad
                    optimizer.step()
                    self.flat.flat.grad = None
            elif not plain_step(optimizer):
                optimizer.step()
            env_steps += rollout.env_steps
            returns += rollout.episode_returns
            lengths += rollout.episode_lengths
            for name, value in stats.items():
                totals[name] = totals.get(name, 0.0) + value
        return self.finish_task(
            snapshot,
            self.encode(snapshot.params - self.flat.flat),
            Payload.DELTA,
            env_steps,
            (returns, lengths),
            {name: total / task.steps for name, total in totals.items()},
            time.perf_counter() - started,
        )

    def load_extras(self, extras: dict[str, torch.Tensor]) -> None:
        """Server state besides θ: observation statistics for the runner, the rest (e.g. a
        Q-learning target network) for the model."""
        self.runner.load_obs_stats(extras)
        model_extras = {k: v for k, v in extras.items() if k not in (OBS_MEAN, OBS_VAR)}
        if model_extras:
            self.model.load_extras(model_extras)

    def encode(self, vector: torch.Tensor) -> tuple[torch.Tensor | bytes, int]:
        """The payload as it travels, and its size on the wire in bytes."""
        # Uncompressed, or non-finite (which the codecs refuse to encode): the vector travels
        # raw, and the server sees and rejects what is not finite.
        if self.codec is None or not torch.isfinite(vector).all():
            return vector, vector.numel() * vector.element_size()
        wire = self.codec.encode(vector)
        return wire, len(wire)

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed worker needs to continue exactly where this one stands:
        its own generator, codec and task count, and its runner's state."""
        return {
            "tasks_done": self.tasks_done,
            "generator": self.generator.get_state(),
            "codec": self.codec.state_dict() if self.codec is not None else {},
            "algorithm": {name: part.state_dict() for name, part in self._stateful_parts().items()},
            "runner": self.runner.state_dict(),
        }

    def _stateful_parts(self) -> dict[str, Any]:
        """The algorithm's worker-side objects that keep state across tasks (PPO's value
        normalization and local Adam); a plain loss function keeps none."""
        parts = {"loss": self.loss_fn, "local_update": self.local_update}
        return {name: part for name, part in parts.items() if hasattr(part, "state_dict")}

    def load_state_dict(self, state: dict[str, Any], where: str = "worker") -> None:
        """Continue from ``state_dict``'s; ``where``: its place in the checkpoint, which an
        error in the state names."""
        self.tasks_done = int(state["tasks_done"])
        self.generator.set_state(state["generator"])
        if self.codec is not None:
            self.codec.load_state_dict(state["codec"])
        saved_parts = state.get("algorithm", {})  # absent from older checkpoints
        for name, part in self._stateful_parts().items():
            if name in saved_parts:
                part.load_state_dict(saved_parts[name])
        local = self.local_update
        if isinstance(local, LocalPPO) and local.pending_optimizer_state is not None:
            # build the local Adam now, so that a restored state that does not fit it is
            # refused before the run goes on, not at this worker's next task
            local.build(self.flat, f"{where}.algorithm.local_update.optimizer")
        # Seeds for envs whose state is not plain data: they restart their episode.
        reseed = [
            int_seed(s)
            for s in stream(self.settings.seed, WORKER, self.worker_id, RESUME_STREAM).spawn(
                self.runner.num_envs
            )
        ]
        # Checkpoints written before runners owned their state kept the single-agent
        # runner's entries (obs, episode_return, envs, ...) in the worker's own dict.
        self.runner.load_state_dict(state.get("runner", state), reseed)

    def close(self) -> None:
        self.runner.close()


def rollout_steps(task: Task, settings: WorkerSettings) -> int:
    """The rollout length of ``task``: the one its scheduler set (``ready``'s per-task
    ``rollout_steps``), else the run's. A learner batches trajectories of one length, so
    ``CollectExperience`` has none of its own."""
    own = task.rollout_steps if isinstance(task, (ComputeGradient, TrainLocally)) else 0
    ppo = settings.algo.ppo if isinstance(task, ComputeGradient) else None  # PPO's epochs
    if own and ppo is not None and own * settings.envs_per_worker < ppo.minibatches:
        # The run's own length was checked against --ppo-minibatches when it was configured.
        raise ValueError(
            f"rollout_steps={own}: {own * settings.envs_per_worker} samples per task, fewer "
            f"than --ppo-minibatches {ppo.minibatches}; a minibatch would be empty"
        )
    return own or settings.rollout_steps


def groups_gradients(workers: list[Worker], snapshot: Snapshot) -> bool:
    """Whether ``run_group`` computes these workers' tasks together: A2C gradients of a
    discrete-action MLP, each worker with its own single-agent envs. A group shares one
    snapshot, so one task and one rollout length; the loop gives tasks that a scheduler set
    differently (``ready``'s per-task settings) groups of their own."""
    if len(workers) < 2 or not isinstance(snapshot.task, ComputeGradient):
        return False
    return _plain_a2c(workers)


def groups_local_training(workers: list[Worker], snapshot: Snapshot) -> bool:
    """Whether ``run_local_group`` computes these clients' rounds together: local A2C steps
    of a discrete-action MLP with a local Adam or SGD (which step coordinate by coordinate)."""
    task = snapshot.task
    if len(workers) < 2 or not isinstance(task, TrainLocally):
        return False
    return task.optimizer in ("adam", "sgd") and _plain_a2c(workers)


def _plain_a2c(workers: list[Worker]) -> bool:
    return all(
        isinstance(w.model, ActorCritic)
        and w.model.groups_acting
        and isinstance(w.runner, EnvRunner)
        and w.local_update is None
        and isinstance(w.loss_fn, functools.partial)
        and w.loss_fn.func is a2c_loss
        and w.runner.num_envs == workers[0].runner.num_envs
        for w in workers
    )


def run_group(workers: list[Worker], snapshot: Snapshot) -> list[Update]:
    """The tasks of workers that start from the same snapshot, computed together.

    Each worker still steps its own envs and samples its actions with its own generator,
    but one policy forward pass per env step serves all their envs, and one forward and
    one backward pass give every worker's gradient (``a2c_group_gradients``): the per-task
    fixed cost of small networks is paid once per group.
    The updates are ``Worker.run_task``'s up to float rounding; the serial runtime stays
    bit-reproducible, as which workers share a snapshot is itself deterministic.
    Callers check ``groups_gradients`` first.
    """
    started = time.perf_counter()
    lead = workers[0]
    lead.flat.load(snapshot.params)  # the one model every worker's forward passes use
    for worker in workers:
        if snapshot.extras:
            worker.load_extras(snapshot.extras)
    model, steps = lead.model, rollout_steps(snapshot.task, lead.settings)
    collections = [w.runner.start_collection(steps) for w in workers]
    generators = [w.generator for w in workers]
    sizes = [w.runner.num_envs for w in workers]
    bounds = np.cumsum([0, *sizes])
    with torch.no_grad():
        for t in range(steps):
            obs = torch.cat([c.policy_obs(t) for c in collections])
            actions = model.act_group(obs, generators, sizes).numpy()
            for i, collection in enumerate(collections):
                collection.step(t, actions[bounds[i] : bounds[i + 1]])
    rollouts = [c.finish() for c in collections]
    gradients, stats = a2c_group_gradients(model, rollouts, **lead.loss_fn.keywords)
    cost_s = (time.perf_counter() - started) / len(workers)
    return [
        worker.finish_task(
            snapshot,
            worker.encode(gradient.clone()),
            Payload.GRADIENT,
            rollout.env_steps,
            (rollout.episode_returns, rollout.episode_lengths),
            worker_stats,
            cost_s,
        )
        for worker, rollout, gradient, worker_stats in zip(
            workers, rollouts, gradients, stats, strict=True
        )
    ]


def run_local_group(workers: list[Worker], snapshot: Snapshot) -> list[Update]:
    """Federated clients' rounds (``Worker.run_local_training``) from one snapshot, computed
    together: E local steps of every client at once.

    The clients' parameters are rows of one [K, numel] tensor that their local optimizer
    steps in one set of ops (Adam and SGD act coordinate by coordinate). Each step, every
    client steps its own envs and samples with its own generator from one batched forward
    pass over the rows, and one forward and one backward pass give every client's gradient
    (``a2c_group_gradients``); each is clipped to ``local_max_grad_norm`` and given
    FedProx's pull as one client alone would be. The updates are the one-at-a-time ones up
    to float rounding. Callers check ``groups_local_training`` first.
    """
    started = time.perf_counter()
    task = snapshot.task
    assert isinstance(task, TrainLocally)
    lead = workers[0]
    settings = lead.settings
    for worker in workers:
        if snapshot.extras:
            worker.load_extras(snapshot.extras)
    K, E, steps = len(workers), lead.runner.num_envs, rollout_steps(task, settings)
    theta = snapshot.params.repeat(K, 1)  # row k: client k's parameters
    optimizer = make_optimizer(
        task.optimizer, [theta], task.lr, LOCAL_ADAM_EPS, settings.local_rmsprop_alpha
    )
    shapes, offset = {}, 0
    for p in lead.model.parameters():
        shapes[id(p)] = (offset, p.shape)
        offset += p.numel()

    def rows(param: torch.Tensor) -> torch.Tensor:  # [K, *shape]: every client's copy
        start, shape = shapes[id(param)]
        return theta[:, start : start + math.prod(shape)].view(K, *shape)

    _, actor_layers = lead.model.plain_layers()
    max_norm = settings.local_max_grad_norm
    returns: list[list[float]] = [[] for _ in workers]
    lengths: list[list[int]] = [[] for _ in workers]
    totals: list[dict[str, float]] = [{} for _ in workers]
    env_steps = [0] * K
    for _ in range(task.steps):
        collections = [w.runner.start_collection(steps) for w in workers]
        actor = [(rows(weight), rows(bias)) for weight, bias in actor_layers]
        with torch.no_grad():
            for t in range(steps):
                logits = batched_tanh_mlp(
                    actor, torch.stack([c.policy_obs(t) for c in collections])
                )
                u = torch.stack([torch.rand((E, 1), generator=w.generator) for w in workers])
                actions = sample_categorical(logits, u).numpy()
                for collection, action in zip(collections, actions, strict=True):
                    collection.step(t, action)
        rollouts = [c.finish() for c in collections]
        grads, stats = a2c_group_gradients(
            lead.model, rollouts, **lead.loss_fn.keywords, stacked=theta
        )
        if max_norm > 0:  # each client's clip of its RL gradient, not of the pull home
            norms = torch.linalg.vector_norm(grads, dim=1, keepdim=True)
            grads.mul_(torch.clamp(max_norm / (norms + 1e-6), max=1.0))
        if task.prox_mu > 0:
            difference = theta - snapshot.params
            drifts = (difference * difference).sum(1).tolist()
            for client_stats, drift in zip(stats, drifts, strict=True):
                client_stats["losses/prox_drift"] = drift
            grads.add_(difference, alpha=task.prox_mu)
        if not plain_step(optimizer, theta, grads):
            theta.grad = grads
            optimizer.step()
            theta.grad = None
        for k, rollout in enumerate(rollouts):
            env_steps[k] += rollout.env_steps
            returns[k] += rollout.episode_returns
            lengths[k] += rollout.episode_lengths
            for name, value in stats[k].items():
                totals[k][name] = totals[k].get(name, 0.0) + value
    deltas = snapshot.params - theta
    cost_s = (time.perf_counter() - started) / K
    return [
        worker.finish_task(
            snapshot,
            worker.encode(deltas[k].clone()),
            Payload.DELTA,
            env_steps[k],
            (returns[k], lengths[k]),
            {name: total / task.steps for name, total in totals[k].items()},
            cost_s,
        )
        for k, worker in enumerate(workers)
    ]


def add_proximal_gradient(
    params: list[torch.nn.Parameter], anchor: list[torch.Tensor], mu: float
) -> float:
    """Add FedProx's μ(θ − θ_global), the gradient of μ/2·‖θ − θ_global‖², to each
    parameter's (clipped) loss gradient; returns ‖θ − θ_global‖².

    With ``--local-optimizer sgd`` the step is then Li et al. 2020's exactly:
    θ ← θ − η(∇F_k(θ) + μ(θ − θ_global)), with ∇F_k the clipped RL gradient. With
    ``adam`` the same sum is Adam's gradient, so the pull is rescaled per coordinate by
    Adam's statistics: the same proximal objective, minimized by another local solver
    (FedProx allows any), not the paper's step.
    """
    drift = 0.0
    with torch.no_grad():
        for param, global_param in zip(params, anchor, strict=True):
            difference = param - global_param
            if param.grad is None:  # a parameter the loss does not reach
                param.grad = torch.zeros_like(param)
            param.grad.add_(difference, alpha=mu)
            drift += float((difference * difference).sum())
    return drift


def payload_nbytes(payload: Any) -> int:
    """Bytes of the arrays in a trajectory payload, as they would travel."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, dict):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, list | tuple):
        return sum(payload_nbytes(v) for v in payload)
    if hasattr(payload, "__dataclass_fields__"):
        return sum(payload_nbytes(getattr(payload, f)) for f in payload.__dataclass_fields__)
    return 0
