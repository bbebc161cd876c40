"""Mutation testing (``make mutation``): mutmut on the scheduling and statistics core.

Each module is mutated on its own and its mutants are run against that module's own test
files only (the table below), so a score says how well *its* tests pin it down, not
whether some end-to-end run happens to notice. Each module runs in a throw-away copy of
the repository with its own mutmut configuration: mutmut keeps one ``mutants/`` folder
and one configuration per directory, and the repository's own tree is never touched.

    python .ci/mutation.py                      # every module in the table
    python .ci/mutation.py hybrid/fedopt.py     # some of them
    python .ci/mutation.py --list-survivors     # also print each surviving mutant's diff
    python .ci/mutation.py hybrid/stats.py --tests tests/test_stats.py \
        --mutants 'hybrid.stats.x__chunk_size*'   # some mutants, against some of its tests

Not part of ``make test``: it runs the listed tests once per mutant (minutes to hours).
The score is killed / (killed + survived); mutants that time out count as killed (the
tests noticed), mutants no test reaches count as survivors.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SCHEDULER_TESTS = ["tests/test_schedulers.py", "tests/test_scheduler_units.py"]
"""The built-in schedulers' own tests: the policies and their edge cases, by hand-made updates."""

MODULE_TESTS: dict[str, list[str]] = {
    "hybrid/schedulers/bounded.py": SCHEDULER_TESTS,
    "hybrid/schedulers/synchronous.py": SCHEDULER_TESTS,
    "hybrid/schedulers/asynchronous.py": SCHEDULER_TESTS,
    "hybrid/schedulers/actor_learner.py": SCHEDULER_TESTS,
    "hybrid/schedulers/aggregate.py": SCHEDULER_TESTS,
    "hybrid/schedulers/base.py": SCHEDULER_TESTS,
    "hybrid/schedulers/fedavg.py": ["tests/test_federated.py"],
    "hybrid/stats.py": ["tests/test_stats.py", "tests/test_analysis.py"],
    "hybrid/fedopt.py": ["tests/test_fedopt.py"],
    "hybrid/algorithms/vtrace.py": ["tests/test_vtrace.py"],
    "hybrid/schedulers/gossip.py": ["tests/test_decentralized.py"],
    "hybrid/schedulers/ad_psgd.py": ["tests/test_decentralized.py"],
    "hybrid/schedulers/sgp.py": ["tests/test_decentralized.py"],
    "hybrid/topology.py": ["tests/test_decentralized.py"],
    "hybrid/aggregation.py": ["tests/test_aggregation.py"],
    "hybrid/privacy.py": ["tests/test_privacy.py"],
}
"""Each module and the test files that are its own. A file that does not exist (yet) is
left out; a module with none is skipped and said so. Of each file only the unit tests run
(``unit_tests``): a test that trains (``train(``, a subprocess, the ``tiny_config``
fixture, the ``slow`` mark) would run once per mutant, for hours."""

COPIED = ["hybrid", "tests", "examples", "federated", "multiagent", "benchmarks", "pyproject.toml"]
"""What the throw-away copy holds: the package, its plug-ins, the tests and what they
load (fixtures, and the benchmarks whose configurations some unit tests validate)."""

ALSO_COPIED = [f"{name}/" for name in COPIED if name not in ("hybrid", "tests", "pyproject.toml")]
"""The folders mutmut is told to copy into its ``mutants/`` folder, where the tests run:
it copies only the package and ``tests/`` unless told."""

# mutmut's exit codes by outcome (mutmut.__main__.status_by_exit_code)
KILLED, SURVIVED, NO_TESTS, TIMEOUT = "killed", "survived", "no tests", "timeout"
NOT_CHECKED = "not checked"
"""Never run: mutmut stops before the mutants when none of the selected tests calls the
module (``Stopping early, because we could not find any test case``), and leaves them all
so. They are unreached, so they count as survivors, not left out of the score."""


TRAINS = ("train(", "subprocess", "Popen")
"""Words in a test's source that mean it runs a whole training run (or the CLI)."""


class _UnitTests:
    """A pytest plugin that lists the collected tests that train nothing."""

    def __init__(self) -> None:
        self.node_ids: list[str] = []

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            function = getattr(item, "function", None)
            source = inspect.getsource(function) if function is not None else ""
            trains = any(word in source for word in TRAINS)
            trains |= "tiny_config" in getattr(item, "fixturenames", ())
            if not trains and item.get_closest_marker("slow") is None:
                self.node_ids.append(item.nodeid)


def unit_tests(test_files: list[str]) -> list[str]:
    """The node ids of the unit tests in ``test_files`` (collected, not run)."""
    listing = subprocess.run(
        [sys.executable, __file__, "--collect", *test_files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(listing.strip().splitlines()[-1])


def _collect(test_files: list[str]) -> None:
    import pytest

    plugin = _UnitTests()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", "-q", "-p", "no:randomly", *test_files], plugins=[plugin])
    print(json.dumps(plugin.node_ids))


def mutmut_config(module: str, tests: list[str]) -> str:
    """The ``[tool.mutmut]`` table for one module against its own tests."""

    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(item) for item in items) + "]"  # JSON strings are TOML

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["hybrid/"]\n'
        f"only_mutate = {toml_list([module])}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        f"also_copy = {toml_list(ALSO_COPIED)}\n"
        # one process per mutant, plugins that reorder or parallelise tests off
        'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider", '
        '"-q", "-x", "-o", "addopts="]\n'
        # torch is not fork-safe after it has run: fork each mutant from a clean server
        'process_isolation = "forkserver"\n'
        "use_git_change_detection = false\n"
    )


def without_mutmut_table(pyproject: str) -> str:
    """``pyproject`` with any ``[tool.mutmut]`` table removed (ours replaces it)."""
    return re.sub(r"\n\[tool\.mutmut\][^\[]*", "\n", pyproject)


def run_module(
    module: str, tests: list[str], workdir: Path, children: int, mutants: list[str] | None = None
) -> Counter[str]:
    """Mutate ``module`` in a copy under ``workdir``; the count of mutants by outcome."""
    copy = workdir / Path(module).stem
    copy.mkdir(parents=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy2(source, copy / name)
    pyproject = copy / "pyproject.toml"
    selected = unit_tests(tests)
    pyproject.write_text(
        without_mutmut_table(pyproject.read_text()) + mutmut_config(module, selected)
    )
    mutmut = [sys.executable, "-m", "mutmut"]
    env = os.environ | {"WANDB_MODE": "offline", "PYTHONHASHSEED": "0"}
    subprocess.run(
        [*mutmut, "run", "--max-children", str(children), *(mutants or [])],
        cwd=copy,
        env=env,
        check=False,
        stdout=subprocess.DEVNULL,  # a progress bar redrawn in place: useless in a log
    )
    listing = subprocess.run(
        [*mutmut, "results", "--all", "true"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    outcomes: Counter[str] = Counter()
    for line in listing.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            outcomes[status] += 1
            if status in (SURVIVED, NO_TESTS, NOT_CHECKED):
                outcomes.setdefault("_names", 0)
                SURVIVORS.setdefault(module, []).append(name)
    outcomes.pop("_names", None)
    return outcomes


SURVIVORS: dict[str, list[str]] = {}


def score(outcomes: Counter[str]) -> float | None:
    killed = outcomes[KILLED] + outcomes[TIMEOUT]
    total = killed + outcomes[SURVIVED] + outcomes[NO_TESTS] + outcomes[NOT_CHECKED]
    return killed / total if total else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--collect"]:  # run in a child: pytest's collection imports the tests
        _collect(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: the table)")
    parser.add_argument("--children", type=int, default=1, help="mutants run at once")
    parser.add_argument("--list-survivors", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the copies in this folder")
    parser.add_argument(
        "--tests",
        nargs="+",
        help="run the mutants against these of the module's test files only (a mutant they "
        "kill, the module's whole list kills too)",
    )
    parser.add_argument(
        "--mutants",
        nargs="+",
        help="mutant names or patterns to run (mutmut's, e.g. 'hybrid.stats.x__chunk_size*'); "
        "the others are counted as not checked",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULE_TESTS]
    if unknown:
        parser.error(
            f"not in the table: {', '.join(unknown)}; choose from {', '.join(MODULE_TESTS)}"
        )
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="hybrid-mutation-"))
    rows = []
    try:
        for module in args.modules or list(MODULE_TESTS):
            tests = [t for t in MODULE_TESTS[module] if (ROOT / t).is_file()]
            if args.tests:
                outside = [t for t in args.tests if t not in tests]
                if outside:
                    parser.error(f"--tests: {', '.join(outside)} not among {module}'s {tests}")
                tests = list(args.tests)
            if not (ROOT / module).is_file() or not tests:
                print(f"{module}: skipped (no module or none of its tests exist)", flush=True)
                continue
            outcomes = run_module(module, tests, workdir, args.children, args.mutants)
            module_score = score(outcomes)
            shown = "n/a" if module_score is None else f"{module_score:.0%}"
            detail = ", ".join(f"{count} {status}" for status, count in sorted(outcomes.items()))
            rows.append((module, shown))
            print(f"{module}: {shown} ({detail}) against {' '.join(tests)}", flush=True)
            if args.list_survivors:
                copy = workdir / Path(module).stem
                for name in SURVIVORS.get(module, []):
                    shown_diff = subprocess.run(
                        [sys.executable, "-m", "mutmut", "show", name],
                        cwd=copy,
                        capture_output=True,
                        text=True,
                        check=False,
                    ).stdout
                    print(shown_diff, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\nmodule score (killed + timeout) / all, before marking equivalent mutants:")
    for module, shown in rows:
        print(f"  {module:40} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
