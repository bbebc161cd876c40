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


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs; a categorical or a Gaussian policy head.

    The Gaussian head has a state-independent log standard deviation.
    """

    def __init__(
        self, obs_dim: int, action_dim: int, continuous: bool, hidden: int = 64, layers: int = 2
    ) -> None:
        super().__init__()
        self.continuous = continuous
        self.actor = mlp(obs_dim, action_dim, hidden, layers, last_gain=0.01)
        self.critic = mlp(obs_dim, 1, hidden, layers, last_gain=1.0)
        if continuous:
            self.log_std = nn.Parameter(torch.zeros(action_dim))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act_with_log_prob(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities (the behaviour policy μ for V-trace)."""
        actions = self.act(obs, generator)
        logp, _ = self.log_prob_entropy(obs, actions)
        return actions, logp

    def act(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Sample actions (``generator=None`` acts deterministically: argmax or the mean)."""
        out = self.actor(obs)
        if self.continuous:
            if generator is None:
                return out
            noise = torch.randn(out.shape, generator=generator)
            return out + noise * self.log_std.exp()
        if generator is None:
            return out.argmax(-1)
        # Inverse-CDF sampling: several times cheaper than torch.multinomial on tiny batches.
        cdf = torch.softmax(out, -1).cumsum(-1)
        u = torch.rand((*out.shape[:-1], 1), generator=generator)
        return (cdf < u).sum(-1).clamp_(max=out.shape[-1] - 1)

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.actor(obs)
        if self.continuous:
            log_std = self.log_std.expand_as(out)
            var = torch.exp(2 * log_std)
            logp = -((actions - out) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
            return logp.sum(-1), entropy
        logits = torch.log_softmax(out, -1)
        logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logits.exp() * logits).sum(-1)
        return logp, entropy


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
