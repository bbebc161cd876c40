"""MAPPO's released-code choices as options: Huber value loss, separate actor and critic
clipping (two optimizers), ValueNorm per minibatch, and the ``PAPER_MAPPO`` setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hybrid
from hybrid.algorithms.ppo import PPOBatch, PPOSettings, ValueNorm, ppo_loss
from hybrid.errors import ConfigError
from multiagent import PAPER_MAPPO

ENV = "mpe2/simple_spread_v3"


def _batch(values: torch.Tensor, targets: torch.Tensor) -> PPOBatch:
    n = len(values)
    zeros = torch.zeros(n)
    return PPOBatch(
        obs=torch.zeros(n, 1),
        actions=zeros,
        old_logp=zeros,
        old_values=values.detach().clone(),
        advantages=zeros,
        targets=targets,
    )


def test_huber_value_loss_is_the_squared_error_within_delta_and_linear_beyond() -> None:
    values = torch.tensor([0.0, 0.0])
    near, far = torch.tensor([1.0, -2.0]), torch.tensor([30.0, -30.0])
    zeros = torch.zeros(2)

    def value_loss(targets: torch.Tensor, kind: str) -> float:
        _, stats = ppo_loss(
            zeros, zeros, values, _batch(values, targets), clip_vloss=False, value_loss=kind
        )
        return stats["losses/value"]

    assert value_loss(near, "huber") == pytest.approx(value_loss(near, "mse"))
    # beyond δ = 10: 0.5·(2·δ·(|e| − δ/2)) = δ·(|e| − 5) = 250 per sample, not 0.5·900
    assert value_loss(far, "huber") == pytest.approx(250.0)
    assert value_loss(far, "mse") == pytest.approx(450.0)


def test_clip_groups_split_theta_into_actor_and_critic() -> None:
    from hybrid.nets import FlatParams
    from multiagent.mappo import MultiAgentActorCritic
    from multiagent.pettingzoo import describe_spec

    spec = describe_spec(ENV)
    model = MultiAgentActorCritic(spec, [list(range(spec.n_agents))], central=True)
    flat = FlatParams(model)
    actor, critic = model.clip_groups()
    covered = torch.zeros(flat.numel, dtype=torch.int64)
    for part in actor + critic:
        covered[part] += 1
    assert bool((covered == 1).all())  # every coordinate in exactly one part
    critic_size = sum(p.numel() for p in model.critics.parameters())
    assert sum(s.stop - s.start for s in critic) == critic_size


def test_value_norm_per_minibatch_updates_in_the_loss_not_when_prepared() -> None:
    settings = PPOSettings(
        epochs=1,
        minibatches=1,
        clip_coef=0.2,
        clip_vloss=False,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        lr=1e-3,
        adam_eps=1e-5,
        value_norm=True,
        advantage_norm="none",
        value_norm_per_minibatch=True,
    )
    norm = ValueNorm()
    returns = torch.tensor([10.0, 20.0, 30.0])

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v = torch.nn.Parameter(torch.zeros(3))

        def log_prob_entropy(
            self, obs: torch.Tensor, actions: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.zeros(3), torch.zeros(3)

        def value(self, obs: torch.Tensor) -> torch.Tensor:
            return self.v

    batch = _batch(torch.zeros(3), torch.zeros(3))
    batch.returns = returns
    settings.loss(Model(), batch, value_norm=norm)
    assert norm.weight > 0  # updated with the minibatch's returns
    mean, _ = norm.stats()
    assert mean == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"env": "CartPole-v1", "mappo_value_loss": "huber"}, "mappo_value_loss"),
        ({"env": ENV, "mappo_value_loss": "l1"}, "mappo_value_loss"),
        ({"env": ENV, "mappo_huber_delta": 0.0}, "mappo_huber_delta"),
        ({"env": ENV, "algo": "a2c", "mappo_separate_optimizers": True}, "mappo_separate"),
        (
            {"env": ENV, "mappo_value_norm_per_minibatch": True, "value_norm": False},
            "mappo_value_norm_per_minibatch",
        ),
    ],
)
def test_bad_or_dead_mappo_options_are_refused(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        hybrid.TrainConfig(**overrides).validate()


def test_the_paper_setting_trains_and_changes_the_run(tmp_path: Path) -> None:
    common = dict(env=ENV, total_env_steps=800, eval_episodes=1, progress=False, seed=0)
    plain = hybrid.train(hybrid.TrainConfig(out=str(tmp_path / "a"), **common))
    paper = hybrid.train(hybrid.TrainConfig(out=str(tmp_path / "b"), **common), **PAPER_MAPPO)
    assert paper.summary["final_params_sha256"] != plain.summary["final_params_sha256"]
    assert torch.isfinite(torch.tensor(paper.summary["final_eval_return"]))
    assert paper.config.mappo_value_loss == "huber" and paper.config.max_grad_norm == 10.0
    # both return conventions in the summary: the logged per-agent mean and the team's sum
    s = plain.summary
    assert s["return_convention"] == "per-agent mean"
    assert s["final_eval_return_per_agent_mean"] == pytest.approx(s["final_eval_return"])
    assert s["final_eval_return_team_sum"] == pytest.approx(3 * s["final_eval_return"])
