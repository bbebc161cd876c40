"""benchmarks/peers: the issue's targets as ratios, the side-by-side cells, measure.py's output.

None of these needs the peers' venv: measure.py is run through a stand-in interpreter that
prints what the real one would.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

PEERS = Path(__file__).resolve().parents[1] / "benchmarks" / "peers"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"peers_{name}", PEERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def side():
    return load("side_by_side")


def test_targets_are_the_issues_figures_over_the_peers(side):
    """The performance targets: sync 30k and async 20k env steps/s against SB3's 16.3k that day."""
    assert side.target_text(side.RATE["sync"]) == ">= 1.84x SB3 A2C"
    assert side.target_text(side.RATE["async"]) == ">= 1.23x SB3 A2C"
    assert side.target_text(side.STEPS_TO_SOLVE["async"]) == "<= 1.50x SB3 A2C"
    assert side.target_text(side.WALL_TO_SOLVE["sync"]) == "<= 0.50x SB3 A2C"
    assert side.target_text(side.PERF_CELLS["fedavg ms per round"]) == "<= 0.10x Flower"
    processes = side.PERF_CELLS["processes async 2x8 env steps/s"]
    assert side.target_text(processes) == ">= 8.00x TorchRL collector"
    # start-up's target is absolute: no ratio to meet
    assert side.target_text(side.PERF_CELLS["fedavg s from start to first round's end"]) == "-"


def test_verdict_follows_the_direction_of_better(side):
    rate, steps = side.RATE["sync"], side.STEPS_TO_SOLVE["sync"]
    assert side.verdict(rate, 2.0) == "met"
    assert side.verdict(rate, 1.5) == "missed"
    assert side.verdict(steps, 0.9) == "met"  # fewer env steps to solve is better
    assert side.verdict(steps, 1.1) == "missed"
    assert side.verdict(rate, None) == "-"


def test_paired_ratio_is_the_median_of_per_repeat_ratios(side):
    hybrid, peer = [1.0, 2.0, 3.0], [1.0, 1.0, 6.0]
    assert side.ratio(hybrid, peer, paired=True) == pytest.approx(1.0)  # 1, 2, 0.5
    assert side.ratio(hybrid, peer, paired=False) == pytest.approx(2.0)  # medians 2 / 1


def test_an_unsolved_peer_gives_no_ratio(side):
    figure = side.STEPS_TO_SOLVE["sync"]
    cells = side.peer_cells(figure, [10_000.0], [math.inf, math.inf, 9_000.0], paired=False)
    assert cells[1] == "not solved" and cells[2] == "-" and cells[4] == "-"


@pytest.mark.parametrize("measured", [True, False])
def test_rows_have_as_many_cells_as_the_header(side, measured):
    """A row with a cell too many or too few breaks the Markdown table."""
    columns = side.peer_columns(measured)
    peer = [15_000.0, 17_000.0] if measured else None
    for figure in (side.RATE["sync"], None):
        cells = side.peer_cells(figure, [30_000.0, 32_000.0], peer, paired=True)
        assert len(cells) == len(columns)
    if measured:
        cells = side.peer_cells(side.RATE["sync"], [30_000.0, 32_000.0], peer, paired=True)
        assert cells == ["16,300", "16,000", "1.94x", ">= 1.84x SB3 A2C", "met"]
    else:
        assert side.peer_cells(side.RATE["sync"], [1.0], None, paired=True) == ["SB3 A2C 16,300"]
    header = side.markdown_header(["figure", *columns]).splitlines()
    assert header[1].count("|") == header[0].count("|")


def test_measure_reads_the_figures_the_peers_python_prints(side, tmp_path):
    """The JSON lines of measure.py become runs; an unsolved run (null) becomes inf."""
    record = {"name": "sb3_a2c_env_steps_to_solve", "value": None, "unit": "env steps",
              "repeats": 2, "runs": [12_000.0, None], "settings": {}}  # fmt: skip
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho 'a log line'\necho '{json.dumps(record)}'\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    figures = side.measure(python, "sb3-solve", "--seeds", "0")
    assert figures == {"sb3_a2c_env_steps_to_solve": [12_000.0, math.inf]}


def test_peers_python_falls_back_to_quoted_figures(side, tmp_path):
    assert side.peers_python(None, disabled=True) is None
    with pytest.raises(SystemExit):
        side.peers_python(str(tmp_path / "missing"), disabled=False)


def test_measure_emits_medians_and_unsolved_runs_as_null(capsys):
    measure = load("measure")
    measure.emit("x", [3.0, 1.0, math.inf], "s", {"a": 1})
    record = json.loads(capsys.readouterr().out)
    assert record["value"] == 3.0 and record["runs"] == [3.0, 1.0, None]
    assert record["settings"]["torch_threads"] == 1 and record["settings"]["finite_runs"] == 2
    measure.emit("y", [math.inf, math.inf], "s", {})
    assert json.loads(capsys.readouterr().out)["value"] is None


def test_tree_rss_counts_this_process():
    measure = load("measure")
    own = measure.tree_rss_mb(os.getpid())
    assert own > 1.0  # a Python interpreter with pytest loaded holds more than 1 MB


def test_peers_run_torch_with_hybrids_thread_count():
    """The tables say the peers run torch as hybrid does; a new default must reach them."""
    from hybrid import TrainConfig

    peer_threads = load("measure").TORCH_THREADS
    assert peer_threads == TrainConfig().torch_threads
