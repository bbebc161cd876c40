"""Every built-in scheduler follows the contract a user's does, and its settings have one
source: its ``Settings`` dataclass. The flat ``TrainConfig`` fields, their checks and
``FIELD_OWNERS`` are derived from it; no component's settings repeat a config default."""

from __future__ import annotations

import dataclasses
import inspect
import shutil
from pathlib import Path

import pytest

import hybrid
from hybrid.config import FIELD_OWNERS, ConfigError, TrainConfig
from hybrid.protocol import TASK_KINDS
from hybrid.scheduler_settings import BUILT_IN_SETTINGS, field_defaults
from hybrid.schedulers import SCHEDULERS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(BUILT_IN_SETTINGS))
def test_a_built_in_scheduler_is_written_as_a_user_s(name: str) -> None:
    cls = SCHEDULERS[name].cls
    assert cls.Settings is BUILT_IN_SETTINGS[name]
    assert dataclasses.is_dataclass(cls.Settings)
    declared = vars(cls)  # declared by the class itself, not inherited by default
    assert declared.get("task_kind") in TASK_KINDS, name
    assert isinstance(declared.get("staleness_unit"), str), name
    assert list(inspect.signature(cls.__init__).parameters)[:3] == ["self", "workers", "settings"]
    assert isinstance(cls(3, cls.Settings()), cls)


@pytest.mark.parametrize("name", sorted(BUILT_IN_SETTINGS))
def test_the_config_fields_are_derived_from_the_settings(name: str) -> None:
    """Same names, same defaults, same checks: one source of truth."""
    config_defaults = TrainConfig()
    for field, default in field_defaults(BUILT_IN_SETTINGS[name]).items():
        assert getattr(config_defaults, field) == default, field
    owner = {"bounded": "bounded", "hybrid": "actor_learner", "fedavg": "fedavg"}.get(name)
    if owner is not None:
        assert set(field_defaults(BUILT_IN_SETTINGS[name])) <= set(FIELD_OWNERS[owner])


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"staleness_bound": -1}, "staleness_bound"),
        ({"learner_batch": 0}, "learner_batch"),
        ({"max_policy_lag": -1}, "max_policy_lag"),
        ({"client_fraction": 0.0}, "client_fraction"),
        ({"late_policy": "later"}, "late_policy"),
        ({"staleness_bound": "four"}, "staleness_bound"),
        ({"staleness_aware_lr": 1}, "staleness_aware_lr"),
    ],
)
def test_the_settings_checks_are_the_config_checks(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: ") as err:
        TrainConfig(**changes).validate()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "file", "cls", "args"),
    [
        ("sync", "synchronous.py", "Sync", {}),
        ("async", "asynchronous.py", "Async", {}),
        ("bounded", "bounded.py", "Bounded", {"staleness_bound": 1}),
        ("gossip", "gossip.py", "Gossip", {"topology": "ring"}),
        ("ad-psgd", "ad_psgd.py", "AdPsgd", {"topology": "ring"}),
        ("sgp", "sgp.py", "Sgp", {"delay": 1}),
    ],
)
def test_a_built_in_scheduler_copied_out_of_the_package_runs_as_a_user_scheduler(
    tiny_config, tmp_path: Path, name: str, file: str, cls: str, args: dict
) -> None:
    """A built-in scheduler's file, copied as it is to a folder of its own and named by
    path, runs the same run as the built-in (the same parameters to the last bit)."""
    copy = tmp_path / "my_schedulers" / f"{name}_copy.py"
    copy.parent.mkdir()
    shutil.copy(ROOT / "hybrid" / "schedulers" / file, copy)
    built_in = hybrid.train(
        tiny_config(out=str(tmp_path / "built_in"), scheduler=name, scheduler_args=dict(args))
    )
    copied = hybrid.train(
        tiny_config(out=str(tmp_path / "copied"), scheduler=f"{copy}:{cls}", scheduler_args=args)
    )
    assert copied.summary["final_params_sha256"] == built_in.summary["final_params_sha256"]
    assert copied.summary["staleness_histogram"] == built_in.summary["staleness_histogram"]
    assert copied.summary["staleness_unit"] == built_in.summary["staleness_unit"]
    assert copied.summary["evaluated_model"] == built_in.summary["evaluated_model"]


# --- no default written twice -------------------------------------------------------------------


def component_settings() -> list[type]:
    """The settings dataclasses the assembly fills from config fields of the same names."""
    from hybrid.algorithms import A2CSettings, AlgoSettings, NetSettings, NStepQSettings
    from hybrid.clients import ClientSettings
    from hybrid.runtimes.settings import ClockSettings, RuntimeSettings

    return [
        A2CSettings,
        NStepQSettings,
        NetSettings,
        AlgoSettings,
        RuntimeSettings,
        ClockSettings,
        ClientSettings,
    ]


def second_copies(settings_classes: list[type], config: type = TrainConfig) -> list[str]:
    """Fields of ``settings_classes`` that repeat a default of a config field of the same name
    (a field without a default is filled by the assembly: the config's default is the one)."""
    config_fields = {f.name for f in dataclasses.fields(config)}
    copies = []
    for cls in settings_classes:
        for f in dataclasses.fields(cls):
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            if has_default and f.name in config_fields:
                copies.append(f"{cls.__name__}.{f.name}")
    return copies


def test_no_component_repeats_a_config_default() -> None:
    copies = second_copies(component_settings())
    assert not copies, "defaults written a second time (the config's is the one):\n" + "\n".join(
        copies
    )


def test_the_check_finds_a_second_copy() -> None:
    @dataclasses.dataclass
    class Config:
        lr: float = 1e-3
        workers: int = 8

    @dataclasses.dataclass
    class Copied:
        workers: int
        lr: float = 1e-3  # the config's default, written again
        own: int = 3  # not a config field: the component's own

    assert second_copies([Copied], Config) == ["Copied.lr"]


def test_a_scheduler_arg_and_the_flag_reach_the_same_setting() -> None:
    from hybrid.assembly import scheduler_settings
    from hybrid.cli import parse_train_args

    by_flag = parse_train_args(["--scheduler", "bounded", "--staleness-bound", "2"])
    by_arg = parse_train_args(["--scheduler", "bounded", "--scheduler-arg", "staleness_bound=2"])
    assert by_arg == by_flag  # recorded once, as the flat field (config.json, sweeps)
    assert by_arg.scheduler_args == {} and by_arg.staleness_bound == 2
    assert scheduler_settings(by_arg).args == scheduler_settings(by_flag).args
    with pytest.raises(ConfigError, match=r"^scheduler_args: staleness_bound='two' is not"):
        TrainConfig(scheduler="bounded", scheduler_args={"staleness_bound": "two"}).validate()
