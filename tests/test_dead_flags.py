"""A flag that does nothing in a run is refused in one line (exit 2), by a rule derived from
who owns each field (``hybrid.config.FIELD_OWNERS``): a field is judged by where its owner
takes part (``OWNER_APPLIES``), or by a condition of its own (``FIELD_APPLIES``)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import hybrid
from hybrid.config import (
    FIELD_APPLIES,
    FIELD_OWNERS,
    OWNER_APPLIES,
    ConfigError,
    TrainConfig,
    check_flags_take_effect,
    field_applies,
)

FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]
PLAIN = TrainConfig()  # CartPole, a2c, async, serial: the run most flags are tried on

TAKES_EFFECT_IN_A_PLAIN_RUN = {
    # The fields a plain run uses. A new field lands in neither this set nor the refused
    # ones by accident: the test below fails until it is judged here or by its owner.
    *FIELD_OWNERS["run"],
    *FIELD_OWNERS["nets"],
    *FIELD_OWNERS["a2c"],
    *FIELD_OWNERS["evaluation"],
    *FIELD_OWNERS["tracking"],
    *FIELD_OWNERS["envs"],
    *FIELD_OWNERS["clients"],
    *FIELD_OWNERS["serial"],
    "optimizer", "lr", "lr_schedule", "max_grad_norm", "adam_eps", "rmsprop_alpha",
    "codec", "normalize_obs", "normalize_reward", "checkpoint_every", "resume",
    "torch_threads",
}  # fmt: skip
TAKES_EFFECT_IN_A_PLAIN_RUN -= {"wandb_project", "wandb_checkpoint"}  # they need --track


def other_value(name: str) -> object:
    """A value of the field's type that differs from its default (the rule reads no value)."""
    default = getattr(PLAIN, name)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 + 0.125
    if isinstance(default, str):
        return default + "x"
    if isinstance(default, dict):
        return {"k": 1}
    return 3  # None-defaulted (clients)


def test_every_owner_and_field_has_a_rule():
    assert set(OWNER_APPLIES) == set(FIELD_OWNERS)
    owned = {name for names in FIELD_OWNERS.values() for name in names}
    assert owned == set(FIELDS)
    assert set(FIELD_APPLIES) <= set(FIELDS)


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_set_in_a_plain_run_takes_effect_or_is_refused(name):
    cfg = PLAIN.replace(**{name: other_value(name)})
    if name in TAKES_EFFECT_IN_A_PLAIN_RUN:
        check_flags_take_effect(cfg, {name})
        return
    with pytest.raises(ConfigError, match=rf"^{name}: .* has no effect here; it applies only"):
        check_flags_take_effect(cfg, {name})


@pytest.mark.parametrize("name", sorted(set(FIELDS) - TAKES_EFFECT_IN_A_PLAIN_RUN))
def test_a_refused_field_is_taken_where_its_rule_holds(name):
    """Each refused field has a run where it takes effect: the rule is not 'always no'."""
    where = {
        "nstep_q": dict(algo="nstep_q", scheduler="hybrid", checkpoint_every=5),
        "ppo": dict(algo="ppo"),
        "bounded": dict(scheduler="bounded"),
        "actor_learner": dict(scheduler="hybrid"),
        "fedavg": dict(scheduler="fedavg"),
        "federated": dict(scheduler="fedavg", clients=10),
        "aggregation": dict(scheduler="fedavg"),
        "privacy": dict(scheduler="fedavg"),
        "byzantine": dict(scheduler="fedavg", clients=10),
        "traces": dict(scheduler="fedavg", clients=10),
        "parallel": dict(runtime="processes"),
        "ray": dict(runtime="ray"),
        "multiagent": dict(env="mpe2/simple_spread_v3"),
        "mappo": dict(env="mpe2/simple_spread_v3", algo="mappo"),
        "atari": dict(env="ALE/Pong-v5"),
    }
    owner = next(o for o, names in FIELD_OWNERS.items() if name in names)
    context = {
        "server_beta1": dict(optimizer="fedadam"),
        "server_beta2": dict(optimizer="fedyogi"),
        "server_momentum": dict(optimizer="sgd"),
        "topk_ratio": dict(codec="topk"),
        "error_feedback": dict(codec="topk"),
        "obs_clip": dict(normalize_obs=True),
        "reward_clip": dict(normalize_reward=True),
        "keep_checkpoints": dict(checkpoint_every=5),
        "checkpoint_replay": dict(checkpoint_every=5, algo="nstep_q"),
        "wandb_project": dict(track=True),
        "wandb_checkpoint": dict(track=True, checkpoint_every=5),
        "lock_free": dict(runtime="processes"),
    }.get(name, where.get(owner, {}))
    if owner in ("multiagent", "mappo"):
        pytest.importorskip("mpe2", reason="the multi-agent extra is not installed")
    cfg = PLAIN.replace(**context, **{name: other_value(name)})
    check_flags_take_effect(cfg, {name})
    assert field_applies(name) is not None


def test_a_user_schedulers_task_kind_decides_its_local_training_flags(tmp_path):
    fedbuff = "examples/schedulers/fedbuff.py:FedBuff"
    dc_asgd = "examples/schedulers/dc_asgd.py:DCASGD"
    check_flags_take_effect(PLAIN.replace(scheduler=fedbuff, local_steps=3), {"local_steps"})
    with pytest.raises(ConfigError, match="local_steps: 3 has no effect"):
        check_flags_take_effect(PLAIN.replace(scheduler=dc_asgd, local_steps=3), {"local_steps"})
    with pytest.raises(ConfigError, match="client_fraction"):
        check_flags_take_effect(
            PLAIN.replace(scheduler=fedbuff, client_fraction=0.5), {"client_fraction"}
        )


def test_env_defaults_are_not_flags_the_user_gave(tiny_config):
    """Pendulum's recipe is PPO (10 epochs...): a run there with --algo a2c is not refused
    for the recipe's PPO settings, which the user never gave."""
    cfg = tiny_config(env="Pendulum-v1", env_defaults=True, total_env_steps=200)
    result = hybrid.train(cfg, algo="a2c")  # a keyword: given, although a2c is the default
    assert result.config.algo == "a2c" and result.config.ppo_epochs == 10
    with pytest.raises(ConfigError, match="ppo_epochs: 3 has no effect"):
        hybrid.train(cfg.replace(ppo_epochs=3, out=cfg.out + "2"), algo="a2c")


CASES = [
    (["--scheduler", "sync", "--learner-batch", "16"], "learner_batch"),
    (["--runtime", "serial", "--inject-worker-faults", "0.5"], "inject_worker_faults"),
    (["--late-policy", "admit"], "late_policy"),
    (["--local-optimizer", "sgd"], "local_optimizer"),
    (["--codec", "none", "--topk-ratio", "0.5"], "topk_ratio"),
    (["--optimizer", "adam", "--server-beta1", "0.5"], "server_beta1"),
    (["--algo", "a2c", "--ppo-epochs", "3"], "ppo_epochs"),
    (["--algo", "a2c", "--replay-capacity", "5000"], "replay_capacity"),
    (["--obs-clip", "3"], "obs_clip"),
    (["--atari-frame-skip", "2"], "atari_frame_skip"),
    (["--keep-checkpoints", "5", "--checkpoint-every", "0"], "keep_checkpoints"),
    (["--no-lock-free"], "lock_free"),
    (["--max-policy-lag", "3"], "max_policy_lag"),
    (["--client-fraction", "0.5"], "client_fraction"),
    (["--prox-mu", "0.1"], "prox_mu"),
]


@pytest.mark.parametrize(("flags", "field"), CASES, ids=[c[1] for c in CASES])
def test_flags_that_do_nothing_are_refused_before_the_run(tmp_path, flags, field):
    """Through train() (as the CLI calls it): one line naming the field, nothing written."""
    from hybrid.flags import given_fields, parse_train_args

    argv = [*flags, "--out", str(tmp_path / "run"), "--total-env-steps", "100"]
    cfg = parse_train_args(argv)
    with pytest.raises(ConfigError, match=rf"^{field}: .* has no effect here"):
        hybrid.train(cfg, **{name: getattr(cfg, name) for name in given_fields(argv)})
    assert not (tmp_path / "run").exists()


def test_the_cli_refuses_a_flag_that_does_nothing_with_exit_2(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "hybrid.cli", "train", "--scheduler", "sync", "--learner-batch",
         "16", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "learner_batch: 16 has no effect here" in lines[0], run.stderr
