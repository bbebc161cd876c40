"""PPO: the clipped loss, the worker's local epochs (Δ payload), the learner's epochs."""

from __future__ import annotations

import pytest
import torch

import hybrid
from hybrid.algorithms import ppo as ppo_module
from hybrid.algorithms.ppo import PPOBatch, ValueNorm, minibatches, ppo_loss
from hybrid.assembly import worker_settings
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.worker import Worker
from hybrid.envs import describe
from hybrid.protocol import Snapshot
from hybrid.trainer import initial_params


def _batch(old_logp, adv, **kw) -> PPOBatch:
    n = len(old_logp)
    return PPOBatch(
        obs=torch.zeros(n, 1),
        actions=torch.zeros(n),
        old_logp=torch.tensor(old_logp),
        old_values=kw.get("old_values", torch.zeros(n)),
        advantages=torch.tensor(adv),
        targets=kw.get("targets", torch.zeros(n)),
        mask=kw.get("mask"),
    )


def test_the_surrogate_stops_pushing_once_the_ratio_leaves_the_clip_range():
    # ratio e^0.5 ≈ 1.65 with a positive advantage: beyond 1 + 0.2, no gradient;
    # ratio e^-0.5 with a positive advantage: inside the pessimistic bound, pushed up.
    logp = torch.tensor([0.5, -0.5], requires_grad=True)
    batch = _batch([0.0, 0.0], [1.0, 1.0])
    loss, stats = ppo_loss(logp, torch.zeros(2), torch.zeros(2), batch, ent_coef=0.0)
    loss.backward()
    assert logp.grad[0] == 0 and logp.grad[1] < 0
    assert stats["losses/clipfrac"] == pytest.approx(1.0)


def test_value_clipping_keeps_the_critic_near_its_old_values():
    values = torch.tensor([1.0], requires_grad=True)
    batch = _batch([0.0], [0.0], old_values=torch.tensor([0.0]), targets=torch.tensor([2.0]))
    loss, _ = ppo_loss(torch.zeros(1), torch.zeros(1), values, batch, clip_vloss=True)
    loss.backward()
    # The clipped prediction (0.2) is further from the target: its error, with no gradient.
    assert values.grad[0] == 0
    values.grad = None
    loss, _ = ppo_loss(torch.zeros(1), torch.zeros(1), values, batch, clip_vloss=False)
    loss.backward()
    assert values.grad[0] < 0


def test_masked_samples_change_nothing():
    logp = torch.tensor([0.1, 3.0], requires_grad=True)
    mask = torch.tensor([1.0, 0.0])
    full, _ = ppo_loss(
        logp, torch.zeros(2), torch.zeros(2), _batch([0.0, 0.0], [1.0, -50.0], mask=mask)
    )
    alone, _ = ppo_loss(logp[:1], torch.zeros(1), torch.zeros(1), _batch([0.0], [1.0]))
    assert float(full) == pytest.approx(float(alone))


def test_minibatches_cover_each_epoch_once():
    g = torch.Generator().manual_seed(0)
    batches = list(minibatches(10, 2, 3, g))
    assert len(batches) == 6
    for epoch in range(3):
        seen = torch.cat(batches[2 * epoch : 2 * epoch + 2]).sort().values
        assert seen.tolist() == list(range(10))
    assert list(minibatches(10, 1, 2, g)) == [None, None]  # one minibatch: the whole batch


def test_value_norm_starts_as_the_identity():
    x = torch.tensor([3.0, -4.0])
    torch.testing.assert_close(ValueNorm().normalize(x), x)


def test_sync_with_sgd_lr_1_applies_the_workers_local_ppo_result_exactly(tmp_path):
    """One worker, sync, server SGD lr 1 without clipping: θ_global after one round is the
    θ_local a worker reaches with PPO's epochs from the same snapshot (Δ travels intact)."""
    cfg = TrainConfig(
        env="CartPole-v1",
        algo="ppo",
        scheduler="sync",
        workers=1,
        envs_per_worker=2,
        rollout_steps=32,
        total_env_steps=64,
        ppo_epochs=3,
        ppo_minibatches=2,
        optimizer="sgd",
        lr=1.0,
        max_grad_norm=0.0,
        eval_every=64,
        eval_episodes=1,
        progress=False,
        out=str(tmp_path / "run"),
        env_defaults=False,  # the worker below must run exactly this config
    )
    result = hybrid.train(cfg)
    assert result.summary["updates"] == 1
    info = describe(cfg.env)
    start = initial_params(cfg, info)
    worker = Worker(0, worker_settings(cfg), info)  # the same seeds as the run's worker 0
    update = worker.run_task(Snapshot(start.clone(), 0))
    assert update.kind == "delta"
    torch.testing.assert_close(result.params, start - update.payload, rtol=0, atol=1e-6)
    assert not torch.equal(result.params, start)


def test_the_learner_takes_epochs_times_minibatches_steps_per_batch(tmp_path):
    cfg = TrainConfig(
        env="CartPole-v1",
        algo="ppo",
        scheduler="hybrid",
        workers=2,
        envs_per_worker=2,
        rollout_steps=16,
        learner_batch=2,
        ppo_epochs=3,
        ppo_minibatches=2,
        total_env_steps=256,
        eval_every=256,
        eval_episodes=1,
        log_every=64,
        progress=False,
        out=str(tmp_path / "run"),
    )
    result = hybrid.train(cfg)
    batches = result.summary["tasks"] // 2
    assert result.summary["updates"] == batches * 3 * 2
    assert any("losses/approx_kl" in row for row in result.metrics("train"))


def test_ppo_runs_are_reproducible_under_async(tmp_path):
    def run(i: int) -> str:
        cfg = TrainConfig(
            env="CartPole-v1",
            algo="ppo",
            scheduler="async",
            workers=3,
            envs_per_worker=2,
            rollout_steps=16,
            ppo_epochs=2,
            total_env_steps=480,
            eval_every=480,
            eval_episodes=1,
            progress=False,
            out=str(tmp_path / f"r{i}"),
        )
        return hybrid.train(cfg).summary["final_params_sha256"]

    assert run(0) == run(1)


# --- advantage normalization: CleanRL's per minibatch, MAPPO's per batch -----------------------


def _advantages_seen_by_the_loss(monkeypatch, cfg: TrainConfig) -> tuple[list, torch.Tensor]:
    """Run one worker task of local PPO epochs; return the advantages (and masks) each
    minibatch's loss saw, and the Δ the worker sent."""
    seen = []

    def spy(logp, entropy, values, batch, *args, **kwargs):
        seen.append((batch.advantages.clone(), batch.mask))
        return ppo_loss(logp, entropy, values, batch, *args, **kwargs)

    monkeypatch.setattr(ppo_module, "ppo_loss", spy)
    info = describe(cfg.env)
    worker = Worker(0, worker_settings(cfg), info)
    update = worker.run_task(Snapshot(initial_params(cfg, info), 0))
    worker.close()
    return seen, update.payload


def _moments(advantages: torch.Tensor, mask: torch.Tensor | None) -> tuple[float, float]:
    valid = advantages if mask is None else advantages[mask > 0]
    return float(valid.mean()), float(valid.std())


PPO_CARTPOLE = TrainConfig(
    env="CartPole-v1", algo="ppo", envs_per_worker=2, rollout_steps=32, ppo_epochs=2
)


def test_single_agent_ppo_normalizes_each_minibatch_by_default(monkeypatch):
    """CleanRL: every minibatch the loss sees has zero-mean, unit-std advantages."""
    cfg = PPO_CARTPOLE.replace(ppo_minibatches=4)
    seen, _ = _advantages_seen_by_the_loss(monkeypatch, cfg)
    assert len(seen) == 2 * 4
    for advantages, mask in seen:
        mean, std = _moments(advantages, mask)
        assert mean == pytest.approx(0.0, abs=1e-5) and std == pytest.approx(1.0, abs=1e-5)


def test_per_batch_normalization_leaves_minibatches_uncentred(monkeypatch):
    """The control: normalized once over the 64 samples, a minibatch of 16 is not."""
    cfg = PPO_CARTPOLE.replace(ppo_minibatches=4, ppo_advantage_norm="batch")
    seen, _ = _advantages_seen_by_the_loss(monkeypatch, cfg)
    means = [abs(_moments(a, m)[0]) for a, m in seen]
    assert max(means) > 0.05
    epoch = torch.cat([a for a, _ in seen[:4]])  # the first epoch covers the batch once
    assert _moments(epoch, None)[0] == pytest.approx(0.0, abs=1e-5)


def test_with_one_minibatch_minibatch_and_batch_are_the_same_numbers(monkeypatch):
    runs = {
        norm: _advantages_seen_by_the_loss(
            monkeypatch, PPO_CARTPOLE.replace(ppo_advantage_norm=norm)
        )
        for norm in ("minibatch", "batch", "none")
    }
    assert torch.equal(runs["minibatch"][1], runs["batch"][1])
    assert not torch.equal(runs["none"][1], runs["batch"][1])
    raw = runs["none"][0][0][0]
    assert abs(_moments(raw, None)[0]) > 0.05  # the raw advantages were not centred


def test_multiagent_ppo_normalizes_per_batch_by_default(monkeypatch):
    """MAPPO: once over the whole rollout (the agents that acted), before the minibatches."""
    cfg = TrainConfig(
        env="mpe2/simple_spread_v3",
        algo="mappo",
        envs_per_worker=2,
        rollout_steps=25,
        ppo_epochs=1,
        ppo_minibatches=2,
    )
    seen, _ = _advantages_seen_by_the_loss(monkeypatch, cfg)
    assert max(abs(_moments(a, m)[0]) for a, m in seen) > 0.01
    mean, std = _moments(torch.cat([a for a, _ in seen]), torch.cat([m for _, m in seen]))
    assert mean == pytest.approx(0.0, abs=1e-5) and std == pytest.approx(1.0, abs=1e-2)
    seen, _ = _advantages_seen_by_the_loss(monkeypatch, cfg.replace(ppo_advantage_norm="minibatch"))
    for advantages, mask in seen:
        mean, std = _moments(advantages, mask)
        assert mean == pytest.approx(0.0, abs=1e-5) and std == pytest.approx(1.0, abs=1e-5)


def test_ppo_settings_are_validated():
    with pytest.raises(ConfigError, match="ppo_epochs"):
        TrainConfig(algo="ppo", ppo_epochs=0).validate()
    with pytest.raises(ConfigError, match="clip_coef"):
        TrainConfig(algo="ppo", clip_coef=0.0).validate()
    with pytest.raises(ConfigError, match="critic"):
        TrainConfig(critic="shared").validate()
    with pytest.raises(ConfigError, match=r"^ppo_advantage_norm: unknown 'episode'"):
        TrainConfig(algo="ppo", ppo_advantage_norm="episode").validate()


@pytest.mark.slow
def test_ppo_solves_cartpole(tmp_path):
    cfg = TrainConfig(
        env="CartPole-v1",
        algo="ppo",
        scheduler="sync",
        workers=1,
        envs_per_worker=4,
        rollout_steps=128,
        gae_lambda=0.95,
        optimizer="sgd",
        lr=1.0,
        ppo_epochs=4,
        ppo_minibatches=4,
        ppo_lr=2.5e-4,
        total_env_steps=60_000,
        eval_every=5_000,
        eval_episodes=10,
        progress=False,
        out=str(tmp_path / "run"),
    )
    result = hybrid.train(cfg)
    assert result.solved, result.summary["final_eval_return"]
