"""The global model: parameters θ, an integer version, the server optimizer."""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hybrid.fedopt import FEDOPT_RULES, FedOpt, initial_fedopt_state
from hybrid.normalization import GlobalObsStats
from hybrid.protocol import ComputeGradient, Snapshot, Step, Task, Update


@dataclass(frozen=True)
class ServerSettings:
    """The global model's optimizer, schedule and clip (the assembly fills it from the config).

    ``target_every`` is not a server choice: the assembly sets it when the algorithm
    bootstraps from a target network (n-step Q), else 0. ``normalize_obs``: keep the global
    observation statistics. No field has a default: each is the config field of the same
    name, whose default is the one."""

    optimizer: str
    lr: float
    lr_schedule: str
    max_grad_norm: float
    adam_eps: float
    rmsprop_alpha: float
    server_momentum: float
    server_beta1: float
    server_beta2: float
    normalize_obs: bool
    target_every: int


class GlobalModel:
    """Flat parameters plus one server optimizer shared by every worker.

    The parameters are a single 1-D tensor so that snapshots, payloads, codecs,
    shared memory and hashes all deal with one buffer. Optimizer statistics live
    here, so RMSProp's are shared across workers as in the A3C paper.
    """

    def __init__(
        self,
        params: torch.Tensor,
        optimizer: str = "adam",
        lr: float = 1e-3,
        max_grad_norm: float = 0.0,
        lr_schedule: str = "constant",
        adam_eps: float = 1e-5,
        rmsprop_alpha: float = 0.99,
        target_every: int = 0,
        momentum: float = 0.0,
        obs_norm_dim: int | tuple[int, ...] = 0,
        server_beta1: float = 0.9,
        server_beta2: float = 0.99,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        param = params.detach().clone().float().to(self.device)
        self.param = torch.nn.Parameter(param, requires_grad=False)
        self.version = 0
        # A target network (Q-learning) is server state: every worker bootstraps from the
        # same θ⁻, refreshed every ``target_every`` versions.
        self.target_every = target_every
        self.target = self.param.data.clone() if target_every > 0 else None
        self.base_lr = lr
        self.max_grad_norm = max_grad_norm
        self.lr_schedule = lr_schedule
        self.optimizer = make_optimizer(
            optimizer,
            [self.param],
            lr,
            adam_eps,
            rmsprop_alpha,
            momentum,
            betas=(server_beta1, server_beta2),
        )
        # Observation statistics are server state like θ: merged from every worker's
        # updates, delivered in every snapshot, used by evaluation, saved in checkpoints.
        self.obs_stats = GlobalObsStats(obs_norm_dim) if obs_norm_dim else None
        self.optimizer_name, self.momentum, self.adam_eps = optimizer, momentum, adam_eps
        self._step_settings = {
            "optimizer": optimizer,
            "lr": lr,
            "max_grad_norm": max_grad_norm,
            "lr_schedule": lr_schedule,
            "adam_eps": adam_eps,
            "rmsprop_alpha": rmsprop_alpha,
            "momentum": momentum,
            "server_beta1": server_beta1,
            "server_beta2": server_beta2,
        }
        self.shared: dict[str, torch.Tensor] | None = None
        """θ and the optimizer statistics, once moved into shared memory (``share_memory``)."""

    @property
    def params(self) -> torch.Tensor:
        """θ where it lives (``device``); ``snapshot`` and ``view`` hand out CPU copies."""
        return self.param.data

    def view(self) -> GlobalModel | CpuView:
        """What a scheduler reads: this model on CPU, else a view that copies θ to CPU."""
        return self if self.device.type == "cpu" else CpuView(self)

    def snapshot(
        self,
        task: Task = ComputeGradient(),  # noqa: B008 (frozen)
        progress: float = 0.0,
        *,
        copy: bool = True,
    ) -> Snapshot:
        """θ, the version and the server's extras for a task, on CPU (workers act on CPU: a
        model on another device is copied at this boundary); ``copy=False`` hands out the
        live θ (``appliers.WorkersApply``: Hogwild! workers read the shared θ themselves)."""
        extras = {"target": _cpu_copy(self.target)} if self.target is not None else {}
        if self.obs_stats is not None:
            extras.update(self.obs_stats.extras())
        params = _cpu_copy(self.param.data) if copy else self.param.data
        return Snapshot(params, self.version, extras=extras, task=task, progress=progress)

    def observe(self, update: Update) -> None:
        """Take what an arriving update reports besides its payload (observation statistics),
        whatever the scheduler then does with the payload."""
        if self.obs_stats is not None:
            self.obs_stats.observe(update.obs_stats)

    def lr_at(self, progress: float) -> float:
        """Learning rate after ``progress`` (0..1) of the budget has been spent."""
        if self.lr_schedule == "linear":
            return self.base_lr * max(0.0, 1.0 - progress)
        return self.base_lr

    def apply(self, step: Step, progress: float = 0.0) -> float:
        """Take one optimizer step along ``step.direction``; returns the pre-clip norm."""
        direction = step.direction
        if direction is None:
            raise ValueError("a Step without a direction must go through a learner first")
        direction = direction.to(self.device)  # workers' directions arrive on CPU
        norm = float(torch.linalg.vector_norm(direction))
        if step.clip and self.max_grad_norm > 0 and norm > self.max_grad_norm:
            direction = direction * (self.max_grad_norm / (norm + 1e-6))
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(progress) * step.lr_scale
        if not plain_step(self.optimizer, self.param, direction):
            self.param.grad = direction
            self.optimizer.step()
            self.param.grad = None
        self.count_version()
        return norm

    def replica(self, params: torch.Tensor) -> GlobalModel:
        """A model with this one's optimizer, schedule and clip that steps ``params`` in place
        (a row of a decentralized run's replicas, ``hybrid.replicas``), with an optimizer
        state of its own; target network and observation statistics stay with this model."""
        twin = GlobalModel(params, device=self.device, **self._step_settings)
        twin.param.data = params  # the row itself, not the copy __init__ made
        return twin

    def count_version(self) -> None:
        """One more step is in θ (taken here, or by a Hogwild! worker); refreshes the target
        network on its period."""
        self.version += 1
        if self.target is not None and self.version % self.target_every == 0:
            self.target.copy_(self.param.data)

    # --- shared memory (the processes runtime) ----------------------------------------------

    def share_memory(self) -> dict[str, torch.Tensor]:
        """Move θ and the optimizer statistics into shared memory, in place.

        Returns the tensors (``param`` and the optimizer's state) that another process
        hands to ``attach_shared`` to step this very model: Hogwild!'s shared θ and,
        as in the A3C paper, optimizer statistics shared by every worker. The
        statistics are created now (as the optimizer would on its first step: zeros, or
        FedOpt's v = τ²) so that they exist before any worker starts.
        """
        if self.device.type != "cpu":  # learner_device keeps such runs on CPU
            raise ValueError(f"Hogwild! needs θ in CPU memory; this model is on {self.device}")
        if self.shared is None:
            state = self.optimizer.state[self.param]
            if not state:
                name, momentum = self.optimizer_name, self.momentum
                state.update(initial_optimizer_state(name, self.param, momentum, self.adam_eps))
            for tensor in (self.param.data, *state.values()):
                tensor.share_memory_()
            self.shared = {"param": self.param.data, **state}
        return self.shared

    def attach_shared(self, shared: dict[str, torch.Tensor]) -> None:
        """Step the θ and optimizer statistics that ``share_memory`` returned elsewhere."""
        self.param.data = shared["param"]
        state = {k: v for k, v in shared.items() if k != "param"}
        self.optimizer.state[self.param] = state
        self.shared = shared

    def state_dict(self) -> dict[str, Any]:
        return {
            "params": _cpu_copy(self.param.data),
            "version": self.version,
            "optimizer": self.optimizer.state_dict(),
            "target": None if self.target is None else _cpu_copy(self.target),
            "obs_stats": None if self.obs_stats is None else self.obs_stats.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.param.data.copy_(state["params"])
        self.version = int(state["version"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.shared is not None:
            # load_state_dict made new statistics tensors: copy them into the shared ones
            loaded = self.optimizer.state[self.param]
            for name, tensor in self.shared.items():
                if name != "param" and name in loaded:
                    tensor.copy_(loaded[name])
            self.attach_shared(self.shared)
        if self.target is not None:
            self.target.copy_(state["target"])
        if self.obs_stats is not None and state.get("obs_stats") is not None:
            self.obs_stats.load_state_dict(state["obs_stats"])

    def sha256(self) -> str:
        return params_sha256(self.param.data)


class CpuView:
    """A model on another device as a scheduler reads it: θ copied to CPU at each read."""

    def __init__(self, model: GlobalModel) -> None:
        self._model = model

    @property
    def params(self) -> torch.Tensor:
        return self._model.params.cpu()

    @property
    def version(self) -> int:
        return self._model.version


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    # .cpu() of a device tensor is a new tensor already; of a CPU one it is the same tensor.
    return tensor.clone() if tensor.device.type == "cpu" else tensor.cpu()


def resolve_device(name: str) -> torch.device:
    """``auto`` is cuda when torch finds a GPU, else cpu; ``cpu`` and ``cuda`` are themselves."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_global_model(
    settings: ServerSettings,
    params: torch.Tensor,
    obs_shape: int | tuple[int, ...] = 0,
    device: str | torch.device = "cpu",
) -> GlobalModel:
    """The global model ``settings`` describe, starting from ``params``; ``obs_shape`` is that
    of the observation statistics (``EnvInfo.obs_stats_shape``), kept with ``normalize_obs``.
    ``device``: the run's (``learner_device`` in the loop); worker processes keep cpu."""
    return GlobalModel(
        params,
        optimizer=settings.optimizer,
        lr=settings.lr,
        max_grad_norm=settings.max_grad_norm,
        lr_schedule=settings.lr_schedule,
        adam_eps=settings.adam_eps,
        rmsprop_alpha=settings.rmsprop_alpha,
        target_every=settings.target_every,
        momentum=settings.server_momentum,
        obs_norm_dim=obs_shape if settings.normalize_obs else 0,
        server_beta1=settings.server_beta1,
        server_beta2=settings.server_beta2,
        device=device,
    )


def all_finite(tensor: torch.Tensor) -> bool:
    """No NaN or ±inf in ``tensor``, judged by its sum (NaN and inf survive a sum).

    One read of each element and ~15x faster than ``isfinite(t).all()``, which reads each
    element twice: on a θ that Hogwild! workers write meanwhile, that reads as a non-finite
    value that was never there. A float32 sum that overflows (elements near 1e34) counts
    as non-finite too: such parameters have diverged anyway.
    """
    return math.isfinite(float(tensor.sum()))


def initial_optimizer_state(
    name: str, param: torch.Tensor, momentum: float = 0.0, eps: float = 1e-5
) -> dict[str, torch.Tensor]:
    """The state the optimizer would create on its first step, created up front
    (``eps`` is FedOpt's τ: its v starts at τ²)."""
    if name == "adam":
        return {
            "step": torch.tensor(0.0),
            "exp_avg": torch.zeros_like(param),
            "exp_avg_sq": torch.zeros_like(param),
        }
    if name == "rmsprop":  # no momentum, not centred: what make_optimizer builds
        return {"step": torch.tensor(0.0), "square_avg": torch.zeros_like(param)}
    if name == "sgd":  # a zero buffer gives the same first step as torch's clone of the gradient
        return {"momentum_buffer": torch.zeros_like(param)} if momentum else {}
    if name in FEDOPT_RULES:
        return initial_fedopt_state(param, eps)
    raise ValueError(f"optimizer: unknown {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def _construct_without_dynamo() -> None:
    """Let torch build optimizers without importing ``torch._dynamo`` (~1 s and ~70 MB, more
    than the rest of a federated run's start-up).

    ``Optimizer.add_param_group`` is wrapped by ``torch._disable_dynamo``, which imports
    dynamo on the first call only to exclude the method from ``torch.compile`` tracing, then
    caches the excluded function on the original as ``__dynamo_disable``. Nothing here runs
    under ``torch.compile``, so while dynamo is not loaded the cache is filled with the
    original itself: the same method, without the import. Once something else has loaded
    dynamo this does nothing, and torch then wraps the method as usual.
    """
    if "torch._dynamo" in sys.modules:
        return
    raw = getattr(torch.optim.Optimizer.add_param_group, "__wrapped__", None)
    if raw is not None and getattr(raw, "__dynamo_disable", None) is None:
        setattr(raw, "__dynamo_disable", raw)  # setattr: a literal name is never mangled


def plain_step(
    optimizer: torch.optim.Optimizer,
    param: torch.Tensor | None = None,
    grad: torch.Tensor | None = None,
) -> bool:
    """One step of torch's single-tensor Adam, RMSProp or SGD by the very same tensor ops in
    the same order (the same bits), without ``Optimizer.step``'s wrappers (profiler hooks,
    grad mode, dynamo checks, and the import of ``torch._dynamo``: ~1 s and ~70 MB the first
    time): on a small model those cost more than the maths.

    ``param, grad``: step the optimizer's one parameter along ``grad``; without them, step
    every parameter along its ``.grad``. Returns False, having done nothing, for any other
    optimizer or option, which then takes ``optimizer.step()``.
    """
    kind = type(optimizer)
    if kind not in _PLAIN_OPTIMIZERS or len(optimizer.param_groups) != 1:
        return False
    group = optimizer.param_groups[0]
    params: list[torch.Tensor] = group["params"]
    if group["weight_decay"] or group["maximize"] or group["differentiable"]:
        return False
    if group.get("foreach") or group.get("fused") or group.get("capturable"):
        return False
    if kind is torch.optim.Adam and (group["amsgrad"] or group.get("decoupled_weight_decay")):
        return False
    if kind is torch.optim.RMSprop and (group["centered"] or group["momentum"]):
        return False
    if kind is torch.optim.SGD and group["momentum"]:
        return False
    if param is not None:
        if len(params) != 1 or grad is None:
            return False
        pairs = [(params[0], grad)]
    else:
        pairs = [(p, p.grad) for p in params]
    for p, g in pairs:
        if g is None or g.is_sparse or g.dtype != p.dtype or p.is_complex():
            return False
        if g.device.type != "cpu" or p.device.type != "cpu":
            return False
    with torch.no_grad():
        for p, g in pairs:
            # torch's SGD without momentum makes no state entry; reading the defaultdict would
            state = optimizer.state[p] if kind is not torch.optim.SGD else {}
            _PLAIN_OPTIMIZERS[kind](group, state, p, g)
    return True


def _adam_step(
    group: dict[str, Any], state: dict[str, Any], param: torch.Tensor, grad: torch.Tensor
) -> None:
    # torch.optim.adam._single_tensor_adam, capturable and differentiable off
    if not state:  # what Adam's first step creates
        state["step"] = torch.tensor(0.0)
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    lr, eps, (beta1, beta2) = group["lr"], group["eps"], group["betas"]
    step_t, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
    step_t += 1
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = step_t.item()
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


def _rmsprop_step(
    group: dict[str, Any], state: dict[str, Any], param: torch.Tensor, grad: torch.Tensor
) -> None:
    # torch.optim.rmsprop._single_tensor_rmsprop, not centred, no momentum
    if not state:  # what RMSProp's first step creates
        state["step"] = torch.tensor(0.0)
        state["square_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    alpha = group["alpha"]
    state["step"] += 1
    square_avg = state["square_avg"]
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    param.addcdiv_(grad, square_avg.sqrt().add_(group["eps"]), value=-group["lr"])


def _sgd_step(
    group: dict[str, Any], state: dict[str, Any], param: torch.Tensor, grad: torch.Tensor
) -> None:
    # torch.optim.sgd._single_tensor_sgd without momentum (which keeps no state)
    param.add_(grad, alpha=-group["lr"])


_PLAIN_OPTIMIZERS: dict[type, Callable[..., None]] = {
    torch.optim.Adam: _adam_step,
    torch.optim.RMSprop: _rmsprop_step,
    torch.optim.SGD: _sgd_step,
}


def params_sha256(params: torch.Tensor) -> str:
    return hashlib.sha256(params.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


OPTIMIZERS = ("adam", "rmsprop", "sgd", *FEDOPT_RULES)
"""Server optimizers: torch's Adam (bias-corrected), RMSProp and SGD, and Reddi et al.'s
FedAdam, FedYogi and FedAdagrad (``hybrid.fedopt``)."""


def make_optimizer(
    name: str,
    params: list[torch.nn.Parameter],
    lr: float,
    eps: float,
    alpha: float,
    momentum: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.99),
) -> torch.optim.Optimizer:
    """``eps`` is Adam's and RMSProp's ε and FedOpt's τ; ``betas`` are FedOpt's only (torch's
    Adam keeps its own 0.9, 0.999)."""
    _construct_without_dynamo()
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=eps)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=alpha, eps=eps)
    if name == "sgd":
        # momentum > 0 with the pseudo-gradients of fedavg and lr 1 is FedAvgM
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if name in FEDOPT_RULES:
        return FedOpt(params, FEDOPT_RULES[name], lr, beta1=betas[0], beta2=betas[1], tau=eps)
    raise ValueError(f"optimizer: unknown {name!r}; choose one of {', '.join(OPTIMIZERS)}")
