"""Every TrainConfig field has one owner (hybrid.config.FIELD_OWNERS); only the assembly
reads the config. A module outside it reads at most the fields its own component owns
(none does today: each component receives its own settings dataclass, built in
hybrid/assembly.py), and does not import TrainConfig at all, so it cannot take the whole
config under another name. A read is an attribute ``cfg.<field>`` / ``config.<field>``
(also ``self.cfg.<field>``) or ``getattr(cfg, "<field>")``; both are found with ``ast`` in
every module of hybrid, federated and multiagent.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

from hybrid.config import FIELD_OWNERS, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybrid", "federated", "multiagent")
CONFIG_NAMES = ("cfg", "config")

ASSEMBLY = {
    "hybrid.config",  # and its checks:
    "hybrid.registry",
    "hybrid.defaults",  # per-env defaults of the fields themselves
    "hybrid.assembly",  # builds every component's settings from the config
    "hybrid.trainer",  # train(): reads the run's own fields, builds through hybrid.assembly
    "hybrid.cli",
    "hybrid.flags",
    # hybrid sweep: its file, the runs it plans and checks, what it finds on disk, its command
    "hybrid.sweep.spec",
    "hybrid.sweep.planning",
    "hybrid.sweep.state",
    "hybrid.sweep.command",
    "hybrid.calibrate",  # a subcommand that builds its own configs
    "hybrid.speedup",  # runs the clock on configs it builds from a profile
    "hybrid.reproduce.entries.a3c_speedup",  # hybrid reproduce: calibrates with its own config
    # A plug-in's registration is its part of the assembly: its check of the config and the
    # builder of its own settings (EnvFamily.settings, FinalEvaluation.settings).
    "multiagent",
    "federated",
}
"""May read any field."""

# module -> the owners whose fields it may read. No component reads the config today (each
# receives its own settings from the assembly); the owner rule stays for one that would.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "hybrid.algorithms": ("a2c", "nstep_q", "nets"),
    "hybrid.algorithms.ppo": ("ppo",),
    "hybrid.atari": ("atari",),
    "hybrid.clients": ("clients",),
    "hybrid.core.global_model": ("global_model",),
    "hybrid.envs": ("envs",),
    "hybrid.evaluation": ("evaluation",),
    "hybrid.normalization": ("normalization",),
    "hybrid.runtimes": ("parallel", "serial"),
    "hybrid.runtimes._parallel": ("parallel",),
    "hybrid.runtimes.processes": ("parallel",),
    "hybrid.runtimes.ray": ("parallel", "ray"),
    "hybrid.runtimes.serial": ("serial",),
    "hybrid.runtimes.virtual_cluster": ("serial",),
    "hybrid.schedulers": ("bounded", "actor_learner"),
    "hybrid.schedulers.bounded": ("bounded",),
    "hybrid.schedulers.fedavg": ("fedavg",),
    "hybrid.tracking": ("tracking",),
    "multiagent.mappo": ("multiagent",),
    "federated.evaluation": ("federated",),
}

TYPE_HOOKS = {
    "hybrid",  # re-exports TrainConfig: the public API
    "hybrid.plugins",  # the type of a plug-in's check and settings hooks (TYPE_CHECKING)
}
"""Modules outside the assembly that may name TrainConfig in an import, without reading it."""


def config_reads(source: str, fields: set[str]) -> list[tuple[str, int]]:
    """(field, line) for every read of a config field in ``source``."""
    reads = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in fields:
            base = node.value
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if name in CONFIG_NAMES:
                reads.append((node.attr, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in CONFIG_NAMES
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in fields
        ):
            reads.append((node.args[1].value, node.lineno))
    return reads


def violations(modules: dict[str, str]) -> list[str]:
    owner = {field: who for who, fields in FIELD_OWNERS.items() for field in fields}
    found = []
    for module, source in sorted(modules.items()):
        if module in ASSEMBLY:
            continue
        allowed = set(COMPONENTS.get(module, ()))
        for field, line in sorted(config_reads(source, set(owner)), key=lambda r: r[1]):
            if owner[field] not in allowed:
                found.append(f"{module}:{line} reads {field} (owner {owner[field]})")
    return found


def library_sources() -> dict[str, str]:
    sources = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            sources[name.removesuffix(".__init__")] = path.read_text()
    return sources


def test_every_field_has_exactly_one_owner() -> None:
    listed = [field for fields in FIELD_OWNERS.values() for field in fields]
    assert len(listed) == len(set(listed)), "a field listed twice"
    assert set(listed) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_no_module_reads_fields_it_does_not_own() -> None:
    found = violations(library_sources())
    assert not found, "config fields read outside their owner:\n" + "\n".join(found)


def test_the_table_names_real_modules_and_owners() -> None:
    sources = library_sources()
    assert set(COMPONENTS) <= set(sources)
    assert set(sources) >= ASSEMBLY | TYPE_HOOKS
    for owns in COMPONENTS.values():
        assert set(owns) <= set(FIELD_OWNERS)


def test_the_check_sees_a_foreign_read() -> None:
    source = textwrap.dedent(
        """
        def build(cfg, self):
            a = cfg.staleness_bound          # bounded's own
            b = self.cfg.lr                  # global_model's
            return getattr(cfg, "codec"), a, b, cfg.unrelated
        """
    )
    found = violations({"hybrid.schedulers.bounded": source})
    assert found == [
        "hybrid.schedulers.bounded:4 reads lr (owner global_model)",
        "hybrid.schedulers.bounded:5 reads codec (owner codecs)",
    ]
    assert violations({"hybrid.trainer": source}) == []  # the assembly reads anything


def train_config_imports(source: str) -> list[int]:
    """Lines that import ``TrainConfig`` (also under ``TYPE_CHECKING``)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and node.module == "hybrid.config"
        and any(alias.name == "TrainConfig" for alias in node.names)
    ]


def importers(modules: dict[str, str]) -> list[str]:
    allowed = ASSEMBLY | TYPE_HOOKS
    return [
        f"{module}:{line} imports TrainConfig"
        for module, source in sorted(modules.items())
        if module not in allowed
        for line in train_config_imports(source)
    ]


def test_components_do_not_import_the_config() -> None:
    found = importers(library_sources())
    assert not found, "TrainConfig imported outside the assembly:\n" + "\n".join(found)


def test_the_import_check_sees_a_component_taking_the_config() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from hybrid.config import TrainConfig
        def build(settings: "TrainConfig") -> int:
            return settings.workers      # not named cfg: only the import gives it away
        """
    )
    assert importers({"hybrid.schedulers.bounded": source}) == [
        "hybrid.schedulers.bounded:4 imports TrainConfig"
    ]
    assert importers({"hybrid.assembly": source}) == []
