"""One default per knob: a component's settings either take every value from the config
(no defaults of their own), or, where the component is usable without a config (an env
built in a notebook, a normalizer in a test), keep defaults that equal the config's."""

from __future__ import annotations

import dataclasses

import pytest

from hybrid import TrainConfig
from hybrid.atari import AtariSettings
from hybrid.core.global_model import ServerSettings
from hybrid.core.worker import WorkerSettings
from hybrid.envs import EnvSettings
from hybrid.evaluation import EvalSettings
from hybrid.normalization import NormalizationSettings
from hybrid.runtimes.settings import ClockSettings, RuntimeSettings
from hybrid.tracking import TrackingSettings

FILLED_BY_THE_ASSEMBLY = [
    ServerSettings,
    WorkerSettings,
    EvalSettings,
    TrackingSettings,
    RuntimeSettings,
    ClockSettings,
]
USABLE_WITHOUT_A_CONFIG = {  # settings class: the prefix of its config fields
    EnvSettings: "",
    NormalizationSettings: "",
    AtariSettings: "atari_",
}


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


@pytest.mark.parametrize("settings", FILLED_BY_THE_ASSEMBLY, ids=lambda c: c.__name__)
def test_settings_the_assembly_fills_have_no_defaults_of_their_own(settings: type) -> None:
    with_default = [f.name for f in dataclasses.fields(settings) if _has_default(f)]
    assert with_default == [], f"{settings.__name__} repeats config defaults: {with_default}"


@pytest.mark.parametrize("settings", list(USABLE_WITHOUT_A_CONFIG), ids=lambda c: c.__name__)
def test_defaults_of_standalone_settings_equal_the_configs(settings: type) -> None:
    prefix = USABLE_WITHOUT_A_CONFIG[settings]
    config = {f.name: f for f in dataclasses.fields(TrainConfig)}
    instance = settings()
    compared = 0
    for f in dataclasses.fields(settings):
        name = prefix + f.name
        if name not in config or dataclasses.is_dataclass(getattr(instance, f.name)):
            continue  # not a config knob (e.g. ``spawned``), or nested settings checked alone
        assert getattr(instance, f.name) == getattr(TrainConfig(), name), (
            f"{settings.__name__}.{f.name} defaults differently from the config's {name}"
        )
        compared += 1
    assert compared > 0  # the prefix still names config fields
