"""Multi-agent (PettingZoo) workloads: the adapter, the model, the targets, every scheduler."""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import crash_copy, metric_rows
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test

import hybrid
from hybrid.algorithms.ppo import ValueNorm
from hybrid.assembly import algo_settings, worker_settings
from hybrid.checkpoint import from_plain, list_checkpoints, load, to_plain
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.worker import Worker
from hybrid.envs import describe, is_multiagent_id
from hybrid.protocol import Snapshot
from multiagent.mappo import build_model, prepare_multiagent
from multiagent.pettingzoo import (
    PettingZooVectorEnv,
    check_seed_determinism,
    describe_spec,
    random_policy_returns,
)

SPREAD = "mpe2/simple_spread_v3"
SPEAKER = "mpe2/simple_speaker_listener_v4"

# --- test envs that PettingZoo's own checker accepts --------------------------------------------


class ComingAndGoing(ParallelEnv):
    """Three agents of two kinds (different observation and action spaces): ``scout`` leaves
    (terminates) at step 3, ``late`` joins at step 2, the rest is truncated at step 6.

    Rewards say which action each agent took, so a test can check who got what.
    """

    metadata: ClassVar[dict] = {"name": "coming_and_going_v0"}
    LIMIT = 6

    def __init__(self) -> None:
        self.possible_agents = ["scout", "late", "carrier"]
        self._obs = {
            "scout": gym.spaces.Box(-1, 1, (4,), np.float32),
            "late": gym.spaces.Box(-1, 1, (4,), np.float32),
            "carrier": gym.spaces.Box(-1, 1, (6,), np.float32),
        }
        self._act = {
            "scout": gym.spaces.Discrete(3),
            "late": gym.spaces.Discrete(3),
            "carrier": gym.spaces.Discrete(5),
        }
        self.agents: list[str] = []
        self.rng = np.random.default_rng()

    def observation_space(self, agent):
        return self._obs[agent]

    def action_space(self, agent):
        return self._act[agent]

    def _observe(self, agent):
        return self.rng.uniform(-1, 1, self._obs[agent].shape).astype(np.float32)

    def state(self):
        return np.array([self.t, len(self.agents)], dtype=np.float32)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = ["scout", "carrier"]
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        stepped = list(self.agents)
        rewards = {a: float(actions[a]) + 10 * self.possible_agents.index(a) for a in stepped}
        terms = {a: a == "scout" and self.t == 3 for a in stepped}
        truncs = {a: self.t >= self.LIMIT for a in stepped}
        if self.t == 2:  # a late joiner: outputs for it from the step it appears on
            stepped.append("late")
            rewards["late"], terms["late"], truncs["late"] = 0.0, False, False
        obs = {a: self._observe(a) for a in stepped}
        infos = {a: {} for a in stepped}
        self.agents = [a for a in stepped if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos


class NoState(ComingAndGoing):
    def state(self):
        raise NotImplementedError


class Opaque(ComingAndGoing):
    """Holds something that is not plain data (an object without a ``__dict__``), as an
    env with a physics engine's handle would: its state cannot be saved."""

    def __init__(self) -> None:
        super().__init__()
        self.handle = object()


class Unseeded(ComingAndGoing):
    """Draws fresh entropy on every step: passes a one-step seed test, not a long one."""

    def step(self, actions):
        out = super().step(actions)
        if self.t >= 2:
            self.rng = np.random.default_rng()
        return out


@pytest.fixture(autouse=True, scope="module")
def fakezoo():
    """Install the test envs as ``fakezoo/<name>`` modules (ids are ``package/module``)."""
    from mpe2 import simple_spread_v3

    package = types.ModuleType("fakezoo")
    package.__path__ = []
    modules = {"fakezoo": package}
    for name, factory in {
        "coming_and_going_v0": ComingAndGoing,
        "no_state_v0": NoState,
        "opaque_v0": Opaque,
        "unseeded_v0": Unseeded,
    }.items():
        module = types.ModuleType(f"fakezoo.{name}")
        module.parallel_env = factory
        modules[module.__name__] = module
    box = types.ModuleType("fakezoo.spread_box_v0")  # continuous (Box) actions
    box.parallel_env = functools.partial(simple_spread_v3.parallel_env, continuous_actions=True)
    modules[box.__name__] = box
    aec = types.ModuleType("fakezoo.spread_aec_v0")  # an AEC-only module
    aec.env = functools.partial(simple_spread_v3.env, N=3, max_cycles=25)
    modules[aec.__name__] = aec
    sys.modules.update(modules)
    yield
    for name in modules:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("factory", [ComingAndGoing, NoState])
def test_our_test_envs_pass_pettingzoos_parallel_api_test(factory):
    parallel_api_test(factory(), num_cycles=50)


# --- the adapter ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id",
    [SPREAD, SPEAKER, "pettingzoo.classic/rps_v2", "fakezoo/coming_and_going_v0"],
)
def test_adapter_lays_out_agents_and_counts_joint_steps(env_id):
    """PettingZoo envs that pass its parallel_api_test, through the adapter's rollouts."""
    cfg = TrainConfig(env=env_id, algo="ippo", envs_per_worker=3, rollout_steps=30)
    info = describe(env_id)
    spec = describe_spec(env_id)
    assert info.multiagent and info.obs_dim == max(spec.obs_dims)
    worker = Worker(0, worker_settings(cfg), info)
    rollout = worker.runner.collect(worker.model, 30, worker.generator)
    N = spec.n_agents
    assert rollout.obs.shape == (30, 3, N, spec.obs_pad)
    assert rollout.env_steps == 30 * 3  # joint steps, not agent slots
    # Every agent acted only with an action it has.
    for j, width in enumerate(spec.action_dims):
        acted = rollout.active[..., j]
        assert (rollout.actions[..., j][acted] < width).all()
    # A slot that did not act got no reward and is zero-padded.
    assert (rollout.rewards[~rollout.active] == 0).all()
    assert (rollout.obs[~rollout.active] == 0).all()
    worker.close()


def test_agents_that_leave_and_join_are_masked_and_rewarded_in_their_own_slots():
    envs = PettingZooVectorEnv("fakezoo/coming_and_going_v0", 2)
    envs.reset(seed=3)
    scout, late, carrier = 0, 1, 2
    actions = np.array([[2, 1, 4], [0, 2, 3]])
    seen_active, rewards = [], []
    for _ in range(ComingAndGoing.LIMIT):
        seen_active.append(envs.active.copy())
        _, team, term, trunc, info = envs.step(actions)
        rewards.append(info["agent_reward"])
    active = np.stack(seen_active)[:, 0]
    assert active[:, late].tolist() == [False, False, True, True, True, True]
    assert active[:, scout].tolist() == [True, True, True, False, False, False]
    # Rewards are 10·slot + action: agents are never mixed up, absentees get nothing.
    r = np.stack(rewards)[:, 0]
    assert r[0, scout] == 2 and r[0, carrier] == 24 and r[0, late] == 0
    assert r[3, scout] == 0 and r[3, late] == 11
    assert trunc.all() and not term.any()  # the episode ended by truncation, then reset
    assert envs.active[:, [scout, carrier]].all() and not envs.active[:, late].any()
    # The per-env reward is the sum over agents / N: its episode sum is the per-agent mean.
    np.testing.assert_allclose(team, info["agent_reward"].sum(1) / 3)


def test_termination_and_truncation_are_kept_apart_when_bootstrapping():
    """scout terminates (no bootstrap); carrier is truncated (bootstrapped from its last obs)."""
    cfg = TrainConfig(env="fakezoo/coming_and_going_v0", algo="ippo", envs_per_worker=1)
    worker = Worker(0, worker_settings(cfg), describe(cfg.env))
    rollout = worker.runner.collect(worker.model, ComingAndGoing.LIMIT, worker.generator)
    assert rollout.terminated[2, 0, 0] and not rollout.truncated[2, 0, 0]
    assert rollout.final_index.tolist() == [[5, 0, 1], [5, 0, 2]]  # late and carrier

    class FirstFeature(torch.nn.Module):  # V(obs) = the first observation feature
        central = False

        def value(self, obs, state=None):
            return obs[..., 0] * 10

        def log_prob_entropy(self, obs, actions):
            return torch.zeros(actions.shape), torch.zeros(actions.shape)

    gamma = 0.5
    batch = prepare_multiagent(FirstFeature(), rollout, gamma, 1.0, None, normalize_adv=False)
    adv = batch.advantages.view(ComingAndGoing.LIMIT, 3)
    v = rollout.obs[:, 0, :, 0] * 10
    r = rollout.rewards[:, 0]
    # scout's last step: r − V, nothing after a terminal state.
    assert adv[2, 0] == pytest.approx(float(r[2, 0] - v[2, 0]), abs=1e-5)
    # carrier's last step: r + γ·V(final obs) − V.
    final = float(rollout.final_obs[1, 0] * 10)
    assert adv[5, 2] == pytest.approx(float(r[5, 2] + gamma * final - v[5, 2]), abs=1e-5)
    # Slots that did not act carry no advantage and no target.
    assert (adv[~rollout.active[:, 0]] == 0).all()
    worker.close()


def test_the_adapter_is_deterministic_over_many_steps_and_episodes():
    check_seed_determinism(SPREAD, steps=130)  # five episodes of 25 steps and more
    check_seed_determinism("fakezoo/coming_and_going_v0", steps=40)
    with pytest.raises(AssertionError, match="differ at step"):
        check_seed_determinism("fakezoo/unseeded_v0", steps=40)


def test_aec_envs_go_through_aec_to_parallel():
    """An AEC-only module gives the same trajectories as the env's own parallel_env()."""
    runs = []
    for env_id in ("fakezoo/spread_aec_v0", SPREAD):
        envs = PettingZooVectorEnv(env_id, 2)
        envs.reset(seed=5)
        rng = np.random.default_rng(0)
        out = [envs.step(rng.integers(0, 5, (2, 3)))[0] for _ in range(30)]
        runs.append(np.stack(out))
    np.testing.assert_array_equal(runs[0], runs[1])


# --- the model -------------------------------------------------------------------------------


@pytest.mark.parametrize("sharing", ["all", "none", "speaker_0;listener_0"])
def test_agents_with_different_spaces_share_or_own_parameters(sharing):
    cfg = TrainConfig(env=SPEAKER, algo="mappo", param_sharing=sharing)
    model = build_model(algo_settings(cfg))
    spec = describe_spec(SPEAKER)
    obs = torch.randn(64, 2, spec.obs_pad)
    actions = model.act(obs, torch.Generator().manual_seed(0))
    assert actions.shape == (64, 2)
    assert (actions[:, 0] < 3).all()  # the speaker has 3 actions, the listener 5
    logp, entropy = model.log_prob_entropy(obs, torch.full((64, 2), 2))
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all()
    # The speaker's entropy cannot exceed log 3: masked actions carry no probability.
    assert (entropy[:, 0] <= np.log(3) + 1e-5).all()
    groups = 1 if sharing == "all" else 2
    assert len(model.actors) == groups and len(model.critics) == groups


def test_per_agent_parameters_do_not_leak_between_agents():
    model = build_model(algo_settings(TrainConfig(env=SPREAD, algo="ippo", param_sharing="none")))
    obs = torch.randn(8, 3, 18)
    loss = model.log_prob_entropy(obs, torch.zeros(8, 3, dtype=torch.long))[0][:, 1].sum()
    loss.backward()
    grads = [sum(float(p.grad.abs().sum()) for p in a.parameters()) for a in model.actors]
    assert grads[0] == 0 and grads[1] > 0 and grads[2] == 0


def test_value_norm_tracks_targets():
    norm = ValueNorm()
    for _ in range(200):
        norm.update(torch.randn(500) * 3 - 20)
    mean, std = norm.stats()
    assert mean == pytest.approx(-20, abs=0.2) and std == pytest.approx(3, abs=0.2)
    x = torch.tensor([-25.0, -20.0])
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x)


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"env": "numpy/linalg"}, "not a PettingZoo env"),
        ({"env": "mpe2/simple_spread_v9"}, "has no module 'simple_spread_v9'; mpe2 has:"),
        ({"env": "nosuchpackage/thing_v0"}, "neither a registered Gymnasium id"),
        ({"env": "pettingzoo.classic/tictactoe_v3"}, "cannot run in parallel"),
        (
            {"env": "pettingzoo.test.example_envs/generated_agents_parallel_v0"},
            "has no possible_agents",
        ),
        ({"env": "fakezoo/no_state_v0", "algo": "mappo"}, "does not implement"),
        ({"env": "fakezoo/no_state_v0", "critic": "central"}, "does not implement"),
        ({"param_sharing": "agent_0;agent_7"}, "'agent_7' is not an agent of"),
        ({"param_sharing": "agent_0;agent_1"}, "agent_2 are in no group"),
        ({"env": "CartPole-v1", "algo": "mappo"}, "needs a multi-agent PettingZoo env"),
        ({"algo": "nstep_q"}, "does not run on multi-agent envs"),
        ({"wrappers": "ClipReward(-1, 1)"}, "not supported on multi-agent"),
    ],
)
def test_bad_multiagent_settings_are_clear_config_errors(changes, message):
    cfg = TrainConfig(env=SPREAD, algo="ippo").replace(**changes)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_namespaced_gymnasium_ids_stay_gymnasium():
    assert is_multiagent_id(SPREAD)
    assert not is_multiagent_id("CartPole-v1")
    gym.register("testns/Dummy-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        assert not is_multiagent_id("testns/Dummy-v0")
    finally:
        del gym.registry["testns/Dummy-v0"]


def test_cli_reports_a_non_pettingzoo_id_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--env", "numpy/linalg", "--algo", "mappo"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not a PettingZoo env" in proc.stderr
    assert not any(tmp_path.iterdir())


# --- every scheduler and runtime, unchanged ----------------------------------------------------


def _tiny(tmp_path: Path, **changes) -> TrainConfig:
    base = TrainConfig(
        env=SPREAD,
        algo="mappo",
        workers=2,
        envs_per_worker=3,  # not TrainConfig's default 2, which the env's defaults replace
        rollout_steps=25,
        total_env_steps=400,
        eval_every=400,
        eval_episodes=2,
        log_every=200,
        ppo_epochs=2,
        progress=False,
        out=str(tmp_path / "run"),
    )
    return base.replace(**changes)


@pytest.mark.parametrize(
    ("algo", "scheduler", "extra"),
    [
        ("mappo", "sync", {}),
        ("mappo", "async", {}),
        ("ippo", "bounded", {"staleness_bound": 1}),
        ("mappo", "hybrid", {"learner_batch": 2}),
        ("ippo", "fedavg", {"clients": 4, "client_fraction": 0.5, "local_steps": 2}),
        ("a2c", "async", {}),
        ("a2c", "hybrid", {"learner_batch": 2}),
    ],
)
def test_every_scheduler_runs_multiagent_tasks(tmp_path, algo, scheduler, extra):
    result = hybrid.train(_tiny(tmp_path, algo=algo, scheduler=scheduler, **extra))
    s = result.summary
    assert s["env_steps"] >= 400 and s["env_steps"] % 50 == 0  # joint steps, 2 envs × 25
    assert s["updates"] > 0 and np.isfinite(s["final_eval_return"])
    assert "random_return_mean" in s  # the random policy's return, beside the trained one's
    kinds = {row.get("kind") for row in result.metrics()}
    assert {"train", "eval"} <= kinds


def test_continuous_actions_train_within_their_bounds(tmp_path):
    spec = describe_spec("fakezoo/spread_box_v0")
    assert not spec.discrete and spec.action_low is not None
    result = hybrid.train(_tiny(tmp_path, env="fakezoo/spread_box_v0", scheduler="sync"))
    assert np.isfinite(result.summary["final_eval_return"])
    cfg = TrainConfig(env="fakezoo/spread_box_v0", algo="ippo", envs_per_worker=2)
    worker = Worker(0, worker_settings(cfg), describe(cfg.env))
    rollout = worker.runner.collect(worker.model, 10, worker.generator)
    assert rollout.actions.shape == (10, 2, 3, spec.action_pad)
    worker.close()


def test_ppo_payload_is_a_delta_and_a2c_a_gradient():
    for algo, kind in (("mappo", "delta"), ("a2c", "gradient")):
        cfg = TrainConfig(env=SPREAD, algo=algo, envs_per_worker=1, rollout_steps=5, ppo_epochs=2)
        worker = Worker(0, worker_settings(cfg), describe(SPREAD))
        update = worker.run_task(Snapshot(worker.flat.flat.clone(), 0))
        assert update.kind == kind and update.env_steps == 5
        worker.close()


def test_async_multiagent_runs_are_bit_reproducible(tmp_path):
    hashes = [
        hybrid.train(_tiny(tmp_path, scheduler="async", out=str(tmp_path / f"r{i}"))).summary[
            "final_params_sha256"
        ]
        for i in range(2)
    ]
    assert hashes[0] == hashes[1]


@pytest.mark.parametrize("runtime,scheduler", [("processes", "async"), ("ray", "sync")])
def test_parallel_runtimes_run_multiagent_tasks(tmp_path, runtime, scheduler):
    """processes/async is Hogwild!: the workers apply MAPPO's Δ to the shared θ themselves."""
    if runtime == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")
    cfg = _tiny(tmp_path, runtime=runtime, scheduler=scheduler, total_env_steps=200)
    result = hybrid.train(cfg)
    assert result.summary["env_steps"] >= 200 and result.summary["updates"] > 0
    assert np.isfinite(result.summary["final_eval_return"])


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_speaker_listener_trains_with_and_without_parameter_sharing(tmp_path, sharing):
    cfg = _tiny(tmp_path, env=SPEAKER, param_sharing=sharing, total_env_steps=900)
    result = hybrid.train(cfg)
    assert result.summary["env_steps"] == 900
    assert np.isfinite(result.summary["final_eval_return"])


# --- runner state, checkpoints, normalization ---------------------------------------------------


def _continue_both(cfg: TrainConfig, steps_before: int = 37, steps_after: int = 40):
    """A worker that has collected ``steps_before`` steps, and a fresh one loaded with its
    state (through a checkpoint's plain data); both collect ``steps_after`` more."""
    info = describe(cfg.env)
    original = Worker(0, worker_settings(cfg), info)
    original.runner.collect(original.model, steps_before, original.generator)
    state = from_plain(to_plain(original.state_dict()))
    resumed = Worker(0, worker_settings(cfg), info)
    resumed.flat.load(original.flat.flat.clone())
    resumed.load_state_dict(state)
    rollouts = [w.runner.collect(w.model, steps_after, w.generator) for w in (original, resumed)]
    for w in (original, resumed):
        w.close()
    return state, rollouts


@pytest.mark.parametrize(
    "changes",
    [
        {"algo": "mappo", "normalize_obs": True, "normalize_reward": True},
        {"algo": "ippo"},
        {"env": "fakezoo/coming_and_going_v0", "algo": "mappo", "normalize_obs": True},
    ],
    ids=["spread-mappo-normalized", "spread-ippo", "coming-and-going"],
)
def test_runner_state_round_trip_continues_the_same_rollout(changes):
    cfg = TrainConfig(env=SPREAD, envs_per_worker=2).replace(**changes)
    state, (a, b) = _continue_both(cfg)
    assert all(saved["exact"] for saved in state["runner"]["envs"]["envs"])
    for name in ("obs", "state", "actions", "rewards", "active", "last_obs", "final_obs"):
        if getattr(a, name) is not None:
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.episode_returns == b.episode_returns and len(a.episode_returns) > 0


def test_an_env_whose_state_is_not_plain_data_restarts_its_episode_on_load():
    cfg = TrainConfig(env="fakezoo/opaque_v0", algo="ippo", envs_per_worker=2)
    state, (_, resumed) = _continue_both(cfg, steps_before=4, steps_after=6)
    assert not any(saved["exact"] for saved in state["runner"]["envs"]["envs"])
    # Restarted at load: each env's first episode after it ends at step 6 of the new one.
    assert resumed.episode_lengths == [6, 6]


def test_multiagent_obs_normalization_uses_per_agent_rows_and_counts_present_agents():
    cfg = TrainConfig(env="fakezoo/coming_and_going_v0", algo="ippo", envs_per_worker=2)
    cfg = cfg.replace(normalize_obs=True, obs_clip=100.0)
    info = describe(cfg.env)
    assert info.obs_stats_shape == (3, 6)
    worker = Worker(0, worker_settings(cfg), info)
    mean = np.arange(18, dtype=np.float32).reshape(3, 6) / 10
    worker.load_extras({"obs_mean": torch.from_numpy(mean), "obs_var": torch.full((3, 6), 4.0)})
    worker.runner.collect(worker.model, 1, worker.generator)  # the first collect resets
    worker.runner.take_obs_stats()
    raw, present = worker.runner.envs.obs.copy(), worker.runner.envs.active.copy()
    rollout = worker.runner.collect(worker.model, 12, worker.generator)
    active = rollout.active.numpy()
    padding = np.array([[False] * 4 + [True] * 2] * 2 + [[False] * 6])  # scout, late: 4 features
    expected = (raw - mean) / 2.0 * (present[..., None] & ~padding)
    np.testing.assert_allclose(rollout.obs[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not rollout.obs.numpy()[~active].any()  # absent agents' rows stay zero
    assert not rollout.obs.numpy()[:, :, :2, 4:].any()  # so do padding features
    stats = worker.runner.take_obs_stats()
    np.testing.assert_array_equal(stats["count"].reshape(-1), active.sum(axis=(0, 1)))
    assert stats["count"][0, 0] < stats["count"][2, 0]  # the scout leaves, the carrier stays
    worker.close()


def _resumable(tmp_path: Path, **changes) -> TrainConfig:
    return _tiny(
        tmp_path,
        total_env_steps=600,
        eval_every=300,
        log_every=100,
        keep_checkpoints=100,
        **changes,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"algo": "mappo", "scheduler": "sync", "checkpoint_every": 1},
        {"algo": "ippo", "scheduler": "async", "checkpoint_every": 2},
        {
            "algo": "mappo",
            "scheduler": "async",
            "checkpoint_every": 2,
            "normalize_obs": True,
            "normalize_reward": True,
        },
        {"algo": "mappo", "scheduler": "hybrid", "learner_batch": 2, "checkpoint_every": 2},
    ],
    ids=["mappo-sync", "ippo-async", "mappo-async-normalized", "mappo-hybrid"],
)
def test_multiagent_resume_is_bit_exact(tmp_path, changes):
    full = hybrid.train(_resumable(tmp_path, **changes))
    assert len(list_checkpoints(full.run_dir)) >= 4
    crashed = crash_copy(full.run_dir, tmp_path / "crashed")
    resumed = hybrid.train(resume=str(crashed))
    assert resumed.summary["final_params_sha256"] == full.summary["final_params_sha256"]
    assert metric_rows(crashed) == metric_rows(full.run_dir)
    for key in ("env_steps", "updates", "final_eval_return", "tasks", "staleness_histogram"):
        assert resumed.summary[key] == full.summary[key], key


def test_multiagent_normalization_learns_and_the_global_statistics_grow(tmp_path):
    cfg = _resumable(
        tmp_path, scheduler="sync", checkpoint_every=1, normalize_obs=True, normalize_reward=True
    )
    result = hybrid.train(cfg)
    assert torch.isfinite(result.params).all() and result.summary["updates"] > 0
    assert np.isfinite(result.summary["final_eval_return"])
    counts = []
    for path in list_checkpoints(result.run_dir):
        stats = from_plain(load(path))["global_model"]["obs_stats"]
        assert stats["mean"].shape == (3, describe(SPREAD).obs_dim)
        counts.append(stats["count"].reshape(-1))
    # Every agent of simple_spread is present at every joint step: each row counts them all.
    np.testing.assert_array_equal(counts[-1], np.full(3, result.summary["env_steps"]))
    assert all((later > earlier).all() for earlier, later in itertools.pairwise(counts))


def test_sigterm_stops_a_multiagent_run_with_a_checkpoint_and_resume_finishes_it(tmp_path):
    common = [
        *("--env", SPREAD, "--algo", "mappo", "--scheduler", "async", "--workers", "2"),
        *("--envs-per-worker", "3", "--rollout-steps", "25", "--ppo-epochs", "2"),
        *("--total-env-steps", "2000", "--eval-every", "2000", "--eval-episodes", "2"),
        *("--log-every", "100", "--checkpoint-every", "2", "--normalize-obs", "--progress=False"),
    ]
    env = dict(os.environ, WANDB_MODE="offline")
    command = [sys.executable, "-m", "hybrid.cli", "train", *common]
    reference = subprocess.run(
        [*command, "--out", str(tmp_path / "ref")], capture_output=True, text=True, env=env
    )
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [*command, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        list_checkpoints(out) and metrics.exists() and metrics.stat().st_size > 0
    ):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("the run finished before SIGTERM arrived; raise the budget")
    assert proc.returncode == 143, stderr
    assert "stopped by SIGTERM" in stderr and not (out / "summary.json").exists()

    resumed = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--resume", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "summary.json").read_text())
    expected = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert final["final_params_sha256"] == expected["final_params_sha256"]
    assert metric_rows(out) == metric_rows(tmp_path / "ref")


# --- learning --------------------------------------------------------------------------------


@pytest.mark.slow
def test_mappo_sync_beats_the_random_policy_on_simple_spread(tmp_path):
    """Per-agent mean return of the greedy policy (50 episodes) against a random policy
    measured here over the same 50 episode seeds. Seed 1's curve (eval every 8k steps):
    -24.6, -26.1, -22.6, -22.4, -20.5 at 40k (the budget here), -19.8, -19.3, -19.7 at 64k,
    against a bar of -23.1: failed at 8k-16k, cleared narrowly at 24k-32k, by 2.5 at 40k."""
    cfg = TrainConfig(
        env=SPREAD,
        algo="mappo",
        scheduler="sync",
        workers=4,
        envs_per_worker=4,
        rollout_steps=25,
        total_env_steps=40_000,
        gamma=0.95,
        gae_lambda=0.95,
        eval_every=40_000,
        eval_episodes=50,
        log_every=4_000,
        seed=1,
        progress=False,
        out=str(tmp_path / "run"),
    )
    result = hybrid.train(cfg)
    random = random_policy_returns(SPREAD, 50, seed=1).mean()
    trained = result.final_eval_return
    assert random < -20  # sanity: the documented random level (about −27)
    assert trained >= random + 0.15 * abs(random), (trained, random)
    assert result.summary["random_return_mean"] < trained
