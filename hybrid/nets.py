"""Actor-critic networks whose parameters live in one flat buffer."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def mlp(inputs: int, outputs: int, hidden: int, layers: int, last_gain: float) -> nn.Sequential:
    """A tanh MLP with orthogonal init (the CleanRL / baselines recipe)."""
    modules: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        modules += [_orthogonal(nn.Linear(width, hidden), math.sqrt(2)), nn.Tanh()]
        width = hidden
    modules.append(_orthogonal(nn.Linear(width, outputs), last_gain))
    return nn.Sequential(*modules)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """The Nature DQN torso (Mnih et al. 2015): three ReLU convolutions and 512 ReLU units.

    Rollouts keep observations flat, so the input is ``[..., C*H*W]`` (or ``[..., C, H,
    W]``) of raw pixel values, uint8 or float; they are scaled by 1/255 here.
    """

    features = 512

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.obs_shape = tuple(obs_shape)
        channels = self.obs_shape[0]
        self.convs = nn.Sequential(
            _orthogonal(nn.Conv2d(channels, 32, 8, stride=4), math.sqrt(2)),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, 4, stride=2), math.sqrt(2)),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, 3, stride=1), math.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *self.obs_shape)).shape[1]
        self.dense = nn.Sequential(
            _orthogonal(nn.Linear(flat, self.features), math.sqrt(2)), nn.ReLU()
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        numel = math.prod(self.obs_shape)
        lead = obs.shape[:-1] if obs.shape[-1] == numel else obs.shape[: -len(self.obs_shape)]
        x = obs.reshape(-1, *self.obs_shape).float() / 255.0
        return self.dense(self.convs(x)).reshape(*lead, self.features)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (for images: one shared Nature CNN torso with two
    heads); a categorical or a Gaussian policy head.

    The Gaussian head has a state-independent log standard deviation by default
    (``state_dependent_std``: the actor outputs it too, clamped to [-20, 2]).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        continuous: bool,
        hidden: int = 64,
        layers: int = 2,
        obs_shape: tuple[int, ...] = (),
        log_std_init: float = 0.0,
        state_dependent_std: bool = False,
    ) -> None:
        super().__init__()
        self.continuous = continuous
        self.state_dependent_std = continuous and state_dependent_std
        self.action_dim = action_dim
        outputs = 2 * action_dim if self.state_dependent_std else action_dim
        if len(obs_shape) == 3:
            # Shared by both heads (as in A3C's Atari network); the parameters appear once.
            torso = NatureCNN(obs_shape)
            head = _orthogonal(nn.Linear(NatureCNN.features, outputs), 0.01)
            self.actor = nn.Sequential(torso, head)
            self.critic = nn.Sequential(torso, _orthogonal(nn.Linear(NatureCNN.features, 1), 1.0))
        else:
            self.actor = mlp(obs_dim, outputs, hidden, layers, last_gain=0.01)
            self.critic = mlp(obs_dim, 1, hidden, layers, last_gain=1.0)
        if self.state_dependent_std:
            with torch.no_grad():  # start every state's log std at log_std_init
                self.actor[-1].bias[action_dim:] = log_std_init
        elif continuous:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        # Acting calls the actor once per env step: on tiny MLPs nn.Module's call machinery
        # costs as much as the maths, so acting goes straight to the functional ops.
        # (The Parameter objects stay the same when FlatParams re-points their data.)
        # The loss's passes go the same way (the same ops: the same numbers).
        self._acting_layers = _plain_layers(self.actor)
        self._critic_layers = _plain_layers(self.critic)

    def _actor_no_grad(self, obs: torch.Tensor) -> torch.Tensor:
        if self._acting_layers is None:
            return self.actor(obs)
        return tanh_mlp(self._acting_layers, obs)

    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.actor(obs)
        if self.state_dependent_std:
            mean, log_std = out.split(self.action_dim, dim=-1)
            return mean, log_std.clamp(-20.0, 2.0)
        return out, self.log_std.expand_as(out)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        if self._critic_layers is None:
            return self.critic(obs).squeeze(-1)
        return tanh_mlp(self._critic_layers, obs).squeeze(-1)

    def act_with_log_prob(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities (the behaviour policy μ for V-trace)."""
        actions = self.act(obs, generator)
        logp, _ = self.log_prob_entropy(obs, actions)
        return actions, logp

    def act(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Sample actions (``generator=None`` acts deterministically: argmax or the mean)."""
        if self.continuous:
            mean, log_std = self._mean_log_std(obs)
            if generator is None:
                return mean
            noise = torch.randn(mean.shape, generator=generator)
            return mean + noise * log_std.exp()
        out = self._actor_no_grad(obs)
        if generator is None:
            return out.argmax(-1)
        return sample_categorical(out, torch.rand((*out.shape[:-1], 1), generator=generator))

    @property
    def groups_acting(self) -> bool:
        """Whether ``act_group`` can act for several workers' envs in one forward pass (and
        ``a2c_group_gradients`` take their gradients in one backward pass)."""
        return (
            not self.continuous
            and self._acting_layers is not None
            and self._critic_layers is not None
        )

    def plain_layers(
        self,
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]]:
        """The critic's and the actor's (weight, bias) pairs; tanh MLPs only."""
        if self._critic_layers is None or self._acting_layers is None:
            raise ValueError("plain_layers: the actor and critic are not both tanh MLPs")
        return self._critic_layers, self._acting_layers

    def act_group(
        self, obs: torch.Tensor, generators: list[torch.Generator], sizes: list[int]
    ) -> torch.Tensor:
        """Sampled actions for the stacked observations of several workers: one forward pass
        for all rows, each worker's rows sampled with its own generator (as ``act`` would).

        The rows come out as ``act`` gives them up to float rounding: a matrix product's
        rounding depends on how many rows it has."""
        out = self._actor_no_grad(obs)
        u = torch.cat(
            [torch.rand((n, 1), generator=g) for g, n in zip(generators, sizes, strict=True)]
        )
        return sample_categorical(out, u)

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.continuous:
            mean, log_std = self._mean_log_std(obs)
            var = torch.exp(2 * log_std)
            logp = -((actions - mean) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
            return logp.sum(-1), entropy
        out = self._actor_no_grad(obs)  # differentiable too: plain functional ops
        logits = torch.log_softmax(out, -1)
        logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logits.exp() * logits).sum(-1)
        return logp, entropy


def _plain_layers(net: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The (weight, bias) pairs of a tanh MLP, or None for any other network."""
    if not isinstance(net, nn.Sequential) or not all(
        isinstance(m, nn.Linear | nn.Tanh) for m in net
    ):
        return None
    return [(m.weight, m.bias) for m in net if isinstance(m, nn.Linear)]


def tanh_mlp(layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    """``mlp``'s forward pass without nn.Module's per-call machinery."""
    last = len(layers) - 1
    for i, (weight, bias) in enumerate(layers):
        x = nn.functional.linear(x, weight, bias)
        if i < last:
            x = torch.tanh(x)
    return x


def batched_tanh_mlp(
    layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor
) -> torch.Tensor:
    """``tanh_mlp`` with a stack of W networks: weights [W, out, in], biases [W, out],
    inputs [W, N, in] (row block w goes through network w)."""
    last = len(layers) - 1
    for i, (weight, bias) in enumerate(layers):
        x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        if i < last:
            x = torch.tanh(x)
    return x


def sample_categorical(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling with uniforms ``u`` (one per row): several times cheaper than
    torch.multinomial on tiny batches."""
    cdf = torch.softmax(logits, -1).cumsum(-1)
    return (cdf < u).sum(-1).clamp_(max=logits.shape[-1] - 1)


class QNetwork(nn.Module):
    """Action values Q(s, ·) with ε-greedy acting; the target network θ⁻ rides along as a
    flat buffer (server state delivered with each snapshot), not as parameters."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.q = mlp(obs_dim, n_actions, hidden, layers, last_gain=1.0)
        self.epsilon = 0.0
        numel = sum(p.numel() for p in self.q.parameters())
        self.register_buffer("target", torch.zeros(numel), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)

    def target_q(self, obs: torch.Tensor) -> torch.Tensor:
        views, offset = {}, 0
        for name, p in self.q.named_parameters():
            views[name] = self.target[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        return torch.func.functional_call(self.q, views, (obs,))

    def load_extras(self, extras: dict[str, torch.Tensor]) -> None:
        self.target.copy_(extras["target"])

    def act(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """ε-greedy actions (``generator=None`` is greedy)."""
        greedy = self.q(obs).argmax(-1)
        if generator is None or self.epsilon <= 0:
            return greedy
        explore = torch.rand(greedy.shape, generator=generator) < self.epsilon
        random = torch.randint(self.q[-1].out_features, greedy.shape, generator=generator)
        return torch.where(explore, random, greedy)


class FlatParams:
    """Point every parameter of ``module`` at a view of one flat buffer.

    Loading global parameters is then a single copy, and a gradient is read
    back as one vector.
    """

    def __init__(self, module: nn.Module) -> None:
        self.params = list(module.parameters())
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        offset = 0
        for p in self.params:
            n = p.numel()
            p.data = self.flat[offset : offset + n].view_as(p)
            offset += n

    @property
    def numel(self) -> int:
        return self.flat.numel()

    def load(self, vector: torch.Tensor) -> None:
        self.flat.copy_(vector)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def grad(self) -> torch.Tensor:
        """The flat gradient after a backward pass (zeros where a parameter got none)."""
        return torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                for p in self.params
            ]
        )


def as_tensor(obs: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(obs, dtype=torch.float32)
