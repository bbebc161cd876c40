"""Every notebook is committed without outputs and runs top to bottom on its small budget."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))

# The smallest parameters that still run every cell: the test swaps these texts in each
# notebook's parameters cell (the one that sets SCALE). SCALE = 1 is sized for a reader on 2
# cores; the test needs every cell to run, not the curves a reader looks at. The seeds stay:
# the cells that compare or group runs need them. 06 keeps its workers (2 processes, 2 actors).
SMALLEST: dict[str, dict[str, str]] = {
    "01_quickstart.ipynb": {"BUDGET = 60_000 * SCALE": "BUDGET = 5_000"},
    "02_scheduler_comparison.ipynb": {"BUDGET = 40_000 * SCALE": "BUDGET = 3_000"},
    # eval_every is 4,000 there: two evaluations per run for the curves' means
    "03_staleness_ablation.ipynb": {"BUDGET = 30_000 * SCALE": "BUDGET = 8_000"},
    # 20 clients, half of them per round: client_eval and topk's compression are per client
    "04_federated_edge_clients.ipynb": {"ROUNDS = 12 * SCALE": "ROUNDS = 2"},
    # five updates of 400 joint steps per run; each run still ends on an evaluation
    "05_cooperative_multiagent.ipynb": {"BUDGET = 20_000 * SCALE": "BUDGET = 2_000"},
    "06_scale_out.ipynb": {"total_env_steps=15_000 * SCALE": "total_env_steps=2_000"},
    # eval_every is 2,000 there
    "07_your_own_scheduler.ipynb": {"BUDGET = 6_000 * SCALE": "BUDGET = 4_000"},
}


def test_there_are_notebooks():
    assert NOTEBOOKS
    assert set(SMALLEST) == {p.name for p in NOTEBOOKS}, "a notebook without its smallest size"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path.name


def at_smallest_size(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """``nb`` with SMALLEST[name]'s texts swapped in its parameters cell (each found once)."""
    parameters = [c for c in nb.cells if c.cell_type == "code" and "SCALE = 1" in c.source]
    assert len(parameters) == 1, f"{name}: one parameters cell sets SCALE"
    source = parameters[0].source
    for old, new in SMALLEST[name].items():
        assert source.count(old) == 1, f"{name}: {old!r} is not in its parameters cell"
        source = source.replace(old, new)
    parameters[0].source = source
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = at_smallest_size(nbformat.read(path, as_version=4), path.name)
    # A failing cell raises CellExecutionError carrying that cell's source and error.
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert os.listdir(tmp_path)  # the runs went to the scratch folder, not the repo
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "a cell did not run"
