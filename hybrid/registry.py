"""The names a config may use, each with its check, importing no component.

``TrainConfig.validate`` checks ``scheduler``, ``runtime``, ``algo``, ``codec``,
``optimizer`` and ``ppo_advantage_norm`` here, so validating a config imports neither
torch-heavy components nor Ray. Each registry names the mapping that holds its builders
(``"module:NAME"``, imported only when a run builds the component):

- schedulers: ``hybrid.schedulers.SCHEDULERS`` (users add theirs with
  ``hybrid.register_scheduler`` or name a class by path; those are checked there),
- runtimes: ``hybrid.runtimes.RUNTIMES``,
- algorithms: ``hybrid.algorithms.ALGORITHMS`` (on a plug-in's env family, its own form).

A new built-in goes into its package's mapping and here; ``tests/test_import_cycles.py``
checks that both list the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybrid.errors import ConfigError
from hybrid.plugins import resolve

if TYPE_CHECKING:
    from hybrid.config import TrainConfig

Check = Callable[["TrainConfig"], None]


@dataclass(frozen=True)
class Registry:
    """Names for one ``TrainConfig`` field: each with an optional check of the whole config."""

    field: str
    """The config field that names an entry."""
    builders: str
    """``"module:NAME"`` of the mapping name -> builder, imported only by ``builder()``."""
    checks: Mapping[str, Check | None] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.checks

    def names(self) -> tuple[str, ...]:
        return tuple(self.checks)

    def require(self, name: object) -> None:
        """ConfigError unless ``name`` is registered."""
        if name not in self.checks:
            options = ", ".join(self.checks)
            raise ConfigError(f"{self.field}: unknown {name!r}; choose one of {options}")

    def check(self, cfg: TrainConfig) -> None:
        """ConfigError unless the field names an entry whose check passes."""
        name = getattr(cfg, self.field)
        self.require(name)
        entry_check = self.checks[name]
        if entry_check is not None:
            entry_check(cfg)

    def builder(self, name: str) -> Any:
        return resolve(self.builders)[name]


def _needs_env_family(cfg: TrainConfig) -> None:
    from hybrid.envs import env_family  # gymnasium's registry, no component

    if env_family(cfg.env) is None:
        raise ConfigError(
            f"algo: {cfg.algo} needs a multi-agent PettingZoo env (package/module, e.g. "
            "mpe2/simple_spread_v3); use ppo on Gymnasium envs"
        )


SCHEDULERS = Registry(
    "scheduler",
    "hybrid.schedulers:SCHEDULERS",
    {"sync": None, "async": None, "bounded": None, "hybrid": None, "fedavg": None},
)
"""The built-in schedulers. Their settings are TrainConfig fields whose defaults and checks
are each one's ``Settings`` dataclass's (``hybrid.scheduler_settings``)."""

RUNTIMES = Registry(
    "runtime", "hybrid.runtimes:RUNTIMES", {"serial": None, "processes": None, "ray": None}
)
ALGORITHMS = Registry(
    "algo",
    "hybrid.algorithms:ALGORITHMS",
    {
        "a2c": None,
        "nstep_q": None,
        "ppo": None,
        "mappo": _needs_env_family,
        "ippo": _needs_env_family,
    },
)


def check_user_scheduler(name: str, args: Mapping[str, Any]) -> None:
    """ConfigError unless ``name`` is a scheduler of your own (registered, ``module:Class``
    or ``file.py:Class``) whose ``Settings`` take ``args``. Checked by
    ``hybrid.schedulers.check_scheduler``, imported on use only: your class imports the
    scheduler base anyway."""
    resolve("hybrid.schedulers:check_scheduler")(name, args)


def scheduler_task_kind(name: str) -> type:
    """The ``task_kind`` of scheduler ``name`` (built-in, registered, or a path to your class).

    The config side (``hybrid.defaults``) asks this to choose a recipe; the scheduler is
    resolved by ``hybrid.schedulers``, imported here on use only, as builders are."""
    return resolve("hybrid.schedulers:resolve_scheduler")(name).cls.task_kind


def loaded_task_kind(name: str) -> type | None:
    """The ``task_kind`` of scheduler ``name``, or None where it is not known without
    importing a file (a sweep's dry run) or ``name`` is no scheduler (validation says why)."""
    return resolve("hybrid.schedulers:task_kind_of")(name)


def env_spaces(env_id: str, cfg: TrainConfig | None) -> tuple[bool, bool]:
    """(image observations, continuous actions) of ``env_id`` under ``cfg``'s wrappers, from
    one probe of the env; the env settings are the assembly's, imported here on use only."""
    from hybrid.envs import describe  # gymnasium's registry and one env, no component

    settings = resolve("hybrid.assembly:env_settings")(cfg) if cfg is not None else None
    info = describe(env_id, settings)
    return info.image, info.continuous


# Plain choices of one field: the component that reads the field owns the same tuple
# (hybrid.codecs.CODEC_NAMES, hybrid.core.global_model.OPTIMIZERS,
# hybrid.algorithms.ppo.ADVANTAGE_NORMS); tests/test_import_cycles.py keeps them equal.
CODECS = ("none", "fp16", "bf16", "int8", "topk")
OPTIMIZERS = ("adam", "rmsprop", "sgd", "fedadam", "fedyogi", "fedadagrad")
ADVANTAGE_NORMS = ("auto", "minibatch", "batch", "none")

__all__ = [
    "ADVANTAGE_NORMS",
    "ALGORITHMS",
    "CODECS",
    "OPTIMIZERS",
    "RUNTIMES",
    "SCHEDULERS",
    "Registry",
    "check_user_scheduler",
    "env_spaces",
    "loaded_task_kind",
    "scheduler_task_kind",
]
