"""The library's modules import each other one way: no cycle, and hybrid never imports its
plug-ins (multiagent, federated). Validating a config imports no component.

The graph counts every ``import`` / ``from ... import`` anywhere in a module (at module
level and inside functions), with relative imports resolved. Imports under
``if TYPE_CHECKING:`` are left out: they never run. An import names its most specific
module (``from a.b import c`` depends on ``a.b.c`` if that is a module, else on ``a.b``);
a package importing its own submodules, or a module its enclosing package, is not
counted as a cycle (Python runs the package's ``__init__`` first either way).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybrid", "federated", "multiagent")
PLUGINS = ("multiagent", "federated")


# --- the cycle finder ---------------------------------------------------------------------------


def find_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under each package directory."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:  # the else branch does run
                skipped |= {id(n) for n in ast.walk(child)}
    return skipped


def imported_names(module: str, path: Path) -> list[tuple[str, int]]:
    """Every module name ``module`` imports (absolute, relative ones resolved), with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_nodes(tree)
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package (``.``) or one above per extra dot
                parts = module.split(".")
                package = parts if is_package else parts[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.append((base, node.lineno))
            names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}."""

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for name, line in imported_names(module, path):
            dep = owner(name)
            if dep is None or dep == module:
                continue
            if dep.startswith(module + ".") or module.startswith(dep + "."):
                continue  # a package and its own submodules
            graph[module].setdefault(dep, line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): every set of two or more modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe_cycles(graph: dict[str, dict[str, int]], cycles: list[list[str]]) -> str:
    lines = []
    for component in cycles:
        lines.append(f"cycle of {len(component)} modules: {', '.join(component)}")
        members = set(component)
        for a in component:
            for b, line in graph[a].items():
                if b in members:
                    lines.append(f"    {a} -> {b} (line {line})")
    return "\n".join(lines)


# --- the walls: which module may not import which ------------------------------------------

COMPONENTS = (
    "hybrid.schedulers",
    "hybrid.runtimes",
    "hybrid.algorithms",
    "hybrid.core",
    "hybrid.assembly",
    "hybrid.trainer",
)
"""What is built from settings; the config side names it only through the registry."""

WALLS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (the rule, the modules it binds, the modules they may not import); prefixes of names
    (
        "the config side imports no component",
        (
            "hybrid.config",
            "hybrid.defaults",
            "hybrid.registry",
            "hybrid.scheduler_settings",
            "hybrid.flags",
        ),
        COMPONENTS,
    ),
    (
        "runtimes import no scheduler (they receive booleans)",
        ("hybrid.runtimes",),
        ("hybrid.schedulers",),
    ),
    ("nothing under runtimes imports the sweep", ("hybrid.runtimes",), ("hybrid.sweep",)),
    (
        "schedulers import no runtime and no algorithm",
        ("hybrid.schedulers", "hybrid.scheduler_settings"),
        ("hybrid.runtimes", "hybrid.algorithms", "hybrid.core"),
    ),
    ("the protocol imports nothing of ours", ("hybrid.protocol",), PACKAGES),
    (
        "no component reads the config",
        ("hybrid.schedulers", "hybrid.runtimes", "hybrid.algorithms", "hybrid.core"),
        ("hybrid.config", "hybrid.assembly", "hybrid.trainer", "hybrid.defaults"),
    ),
)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def wall_violations(
    graph: dict[str, dict[str, int]],
    walls: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = WALLS,
) -> list[str]:
    """Every import that crosses a wall (at module level or inside a function, as the cycle
    finder counts them; a module importing itself or its own package is not a crossing)."""
    crossings = []
    for rule, bound, forbidden in walls:
        for module, deps in graph.items():
            if not _under(module, bound):
                continue
            for dep, line in deps.items():
                if _under(dep, forbidden) and not _under(dep, (module,)):
                    crossings.append(f"{rule}: {module} -> {dep} (line {line})")
    return crossings


def test_no_wall_is_crossed() -> None:
    graph = import_graph(find_modules(ROOT, PACKAGES))
    crossings = wall_violations(graph)
    assert not crossings, "walls crossed:\n" + "\n".join(crossings)


def test_the_walls_fail_on_a_package_that_crosses_them(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "hybrid/__init__.py": "",
            "hybrid/config.py": "def check():\n    from hybrid.schedulers import bounded\n",
            "hybrid/defaults.py": "from hybrid.assembly import env_settings\n",
            "hybrid/assembly.py": "from hybrid.config import TrainConfig\n",
            "hybrid/protocol.py": "import hybrid.errors\n",
            "hybrid/errors.py": "",
            "hybrid/schedulers/__init__.py": "from . import bounded\n",
            "hybrid/schedulers/bounded.py": "from hybrid.runtimes.serial import SerialRuntime\n",
            "hybrid/runtimes/__init__.py": "",
            "hybrid/runtimes/serial.py": (
                "from hybrid.schedulers.bounded import Bounded\n\n\n"
                "def sweep():\n    from hybrid.sweep import PlannedRun\n"
            ),
            "hybrid/sweep.py": "",
        },
    )
    graph = import_graph(find_modules(tmp_path, ("hybrid",)))
    crossings = wall_violations(graph)
    expected = [
        # inside a function, and counted twice: the package and the module it names
        "the config side imports no component: hybrid.config -> hybrid.schedulers (line 2)",
        "the config side imports no component: hybrid.config -> hybrid.schedulers.bounded (line 2)",
        "the config side imports no component: hybrid.defaults -> hybrid.assembly (line 1)",
        "runtimes import no scheduler (they receive booleans): "
        "hybrid.runtimes.serial -> hybrid.schedulers.bounded (line 1)",
        "nothing under runtimes imports the sweep: hybrid.runtimes.serial -> hybrid.sweep (line 5)",
        "schedulers import no runtime and no algorithm: "
        "hybrid.schedulers.bounded -> hybrid.runtimes.serial (line 1)",
        "the protocol imports nothing of ours: hybrid.protocol -> hybrid.errors (line 1)",
    ]
    assert sorted(crossings) == sorted(expected)


# --- the library ----------------------------------------------------------------------------


def test_no_import_cycle_in_the_library() -> None:
    graph = import_graph(find_modules(ROOT, PACKAGES))
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + describe_cycles(graph, cycles)


def test_hybrid_does_not_import_its_plugins() -> None:
    """multiagent and federated plug in through hybrid.plugins; hybrid names neither."""
    graph = import_graph(find_modules(ROOT, PACKAGES))
    wrong = [
        f"{module} -> {dep} (line {line})"
        for module, deps in graph.items()
        if module.split(".")[0] == "hybrid"
        for dep, line in deps.items()
        if dep.split(".")[0] in PLUGINS
    ]
    assert not wrong, "hybrid imports a plug-in:\n" + "\n".join(wrong)


def test_validating_a_config_imports_no_component() -> None:
    code = textwrap.dedent(
        """
        import sys
        from hybrid.config import TrainConfig

        TrainConfig().validate()
        TrainConfig(algo="ppo", runtime="ray", scheduler="fedavg", clients=20,
                    client_dynamics="pole_length", codec="topk").validate()
        TrainConfig(algo="nstep_q", scheduler="hybrid", optimizer="fedyogi").validate()
        heavy = ("torch", "ray", "pettingzoo", "hybrid.algorithms", "hybrid.schedulers",
                 "hybrid.runtimes", "hybrid.core", "hybrid.protocol", "multiagent.mappo",
                 "multiagent.pettingzoo", "federated.evaluation")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_validating_a_multiagent_config_imports_no_algorithm() -> None:
    """The multiagent plug-in's check probes the env (PettingZoo, the adapter) but builds
    no model: MAPPO and hybrid's algorithms stay unimported."""
    code = textwrap.dedent(
        """
        import sys
        from hybrid.config import TrainConfig

        TrainConfig(env="mpe2/simple_spread_v3", algo="mappo").validate()
        heavy = ("ray", "hybrid.algorithms", "hybrid.schedulers", "hybrid.runtimes",
                 "hybrid.core", "multiagent.mappo", "federated.evaluation")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        print("multiagent.pettingzoo" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["[]", "True"], out.stdout + out.stderr


def test_registries_list_the_names_their_builders_have() -> None:
    from hybrid import registry
    from hybrid.algorithms import ALGORITHMS
    from hybrid.algorithms.ppo import ADVANTAGE_NORMS
    from hybrid.codecs import CODEC_NAMES
    from hybrid.core.global_model import OPTIMIZERS
    from hybrid.runtimes import RUNTIMES
    from hybrid.schedulers import BUILT_IN

    assert set(registry.ALGORITHMS.names()) == set(ALGORITHMS)
    assert set(registry.RUNTIMES.names()) == set(RUNTIMES)
    assert set(registry.SCHEDULERS.names()) == set(BUILT_IN)
    assert registry.CODECS == CODEC_NAMES  # the order is the codec id in a payload
    assert set(registry.OPTIMIZERS) == set(OPTIMIZERS)
    assert set(registry.ADVANTAGE_NORMS) == set(ADVANTAGE_NORMS)
    assert registry.RUNTIMES.builder("serial") is RUNTIMES["serial"]


def test_plugins_register_what_they_name() -> None:
    from hybrid import plugins

    families = {f.name: f for f in plugins.env_families()}
    assert set(families) == {"multiagent"}
    for path in ("describe", "make_vector_env", "runner", "algorithm", "baseline_returns"):
        assert plugins.resolve(getattr(families["multiagent"], path)) is not None
    evaluations = {e.name: e for e in plugins.final_evaluations()}
    assert callable(plugins.resolve(evaluations["client_fairness"].run))


# --- the finder itself: it must be able to fail ----------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_finder_reports_a_cycle_hidden_in_functions_and_relative_imports(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from . import a\n",  # a package importing its own: no cycle
            "pkg/a.py": "def f():\n    from . import b\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from ..a import f\n",
            "pkg/b.py": "import os\n\n\ndef g():\n    from .sub.c import f\n",
            "pkg/d.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg import e\n"
            ),
            "pkg/e.py": "import pkg.d\n",
            "other/__init__.py": "",
            "other/x.py": "from pkg.b import g\n",
        },
    )
    modules = find_modules(tmp_path, ("pkg", "other"))
    graph = import_graph(modules)
    assert graph["pkg.sub.c"] == {"pkg.a": 1}
    cycles = strongly_connected(graph)
    # a -> b -> sub.c -> a is a cycle; d <-> e is not (d's import is for type checkers only)
    assert cycles == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    report = describe_cycles(graph, cycles)
    assert "pkg.a -> pkg.b (line 2)" in report
    assert "pkg.b -> pkg.sub.c (line 5)" in report


@pytest.mark.parametrize(
    "file, module, text, expected",
    [
        ("pkg/sub/m.py", "pkg.sub.m", "from .y import z", ["pkg.sub.y", "pkg.sub.y.z"]),
        ("pkg/sub/m.py", "pkg.sub.m", "from ..y import z", ["pkg.y", "pkg.y.z"]),
        ("pkg/sub/m.py", "pkg.sub.m", "from .. import y", ["pkg", "pkg.y"]),
        ("pkg/sub/__init__.py", "pkg.sub", "from .y import z", ["pkg.sub.y", "pkg.sub.y.z"]),
        ("pkg/sub/__init__.py", "pkg.sub", "from .. import y", ["pkg", "pkg.y"]),
    ],
)
def test_relative_imports_resolve_from_the_module_package(
    tmp_path: Path, file: str, module: str, text: str, expected: list[str]
) -> None:
    _write(tmp_path, {file: text + "\n"})
    assert [name for name, _ in imported_names(module, tmp_path / file)] == expected
