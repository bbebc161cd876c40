"""Every TrainConfig field has one owner (hybrid.config.FIELD_OWNERS), and a module outside
the assembly reads only the fields its component owns, plus the others listed below with
the reason. A read is an attribute ``cfg.<field>`` / ``config.<field>`` (also
``self.cfg.<field>``) or ``getattr(cfg, "<field>")``, found with ``ast`` in every module
of hybrid, federated and multiagent.
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
    "hybrid.core.loop",  # train(): builds every component from the config
    "hybrid.cli",
    "hybrid.flags",
    "hybrid.sweep",
    "hybrid.calibrate",  # a subcommand that builds its own configs
}
"""May read any field."""

# module -> (owners it is, {other owner: why it reads that owner's fields})
COMPONENTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "hybrid.algorithms": (
        ("a2c", "nstep_q", "nets"),
        {"run": "algo and env pick the form; seed the learner's; workers the Ape-X ε spread"},
    ),
    "hybrid.algorithms.ppo": (
        ("ppo",),
        {
            "a2c": "PPO's loss shares gamma, gae_lambda, ent_coef, vf_coef",
            "global_model": "its local epochs clip like the server (max_grad_norm, adam_eps)",
            "run": "seed of the minibatch order",
        },
    ),
    "hybrid.atari": (("atari",), {}),
    "hybrid.clients": (
        ("clients",),
        {"run": "workers (no clients) and seed", "serial": "a client's task cost on the clock"},
    ),
    "hybrid.core.global_model": (
        ("global_model",),
        {
            "nstep_q": "target_every: the target network (issue 17, point 2: left to its applier)",
            "run": "algo == nstep_q, for the same",
            "normalization": "normalize_obs: the global observation statistics",
        },
    ),
    "hybrid.core.worker": (
        (),
        {
            "run": "its env, rollout and seeds",
            "codecs": "it encodes its own update",
            "clients": "its edge client's env variant",
            "global_model": "a local optimizer's clip and RMSProp α",
        },
    ),
    "hybrid.envs": (("envs",), {"run": "runtime: processes need picklable factories"}),
    "hybrid.evaluation": (
        ("evaluation",),
        {"run": "env and seed", "normalization": "obs_clip of the evaluator's normalizer"},
    ),
    "hybrid.normalization": (("normalization",), {"a2c": "gamma of the returns it scales by"}),
    "hybrid.runtimes": (
        ("parallel", "serial"),
        {"run": "runtime names the entry", "codecs": "Hogwild! only without a codec"},
    ),
    "hybrid.runtimes._parallel": (("parallel",), {"run": "seed of the fault draws"}),
    "hybrid.runtimes.pool": (
        (),
        {"run": "workers: the persistent pool's size", "clients": "K: the edge pool's size"},
    ),
    "hybrid.runtimes.processes": (("parallel",), {"run": "workers and seed"}),
    "hybrid.runtimes.ray": (
        ("parallel", "ray"),
        {"run": "seed"},
    ),
    "hybrid.runtimes.serial": (("serial",), {"run": "workers and seed", "clients": "K clients"}),
    "hybrid.runtimes.virtual_cluster": (
        ("serial",),
        {"parallel": "lock_free", "codecs": "codec: it models the processes runtime's Hogwild!"},
    ),
    "hybrid.schedulers": (
        ("bounded", "actor_learner"),
        {"run": "workers, scheduler and scheduler_args build the scheduler"},
    ),
    "hybrid.schedulers.bounded": (("bounded",), {}),
    "hybrid.schedulers.fedavg": (("fedavg",), {"run": "seed of the client sampling"}),
    "hybrid.tracking": (
        ("tracking",),
        {"run": "names the run", "serial": "cluster: keeps a copy of the profile"},
    ),
    "multiagent": (
        ("multiagent",),
        {"run": "env and algo", "envs": "wrappers are refused on PettingZoo envs"},
    ),
    "multiagent.mappo": (
        ("multiagent",),
        {"a2c": "gamma, gae_lambda, normalize_advantages", "nets": "hidden, layers", "run": "seed"},
    ),
    "federated": (("federated",), {"clients": "it applies when there are clients"}),
    "federated.evaluation": (("federated",), {"run": "env and seed"}),
}


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
        owns, also = COMPONENTS.get(module, ((), {}))
        allowed = set(owns) | set(also)
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
    assert set(sources) >= ASSEMBLY
    for owns, also in COMPONENTS.values():
        assert set(owns) | set(also) <= set(FIELD_OWNERS)


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
    assert violations({"hybrid.core.loop": source}) == []  # the assembly reads anything
