#!/usr/bin/env bash
# The package as a user installs it: build the sdist and the wheel (the wheel from the
# sdist), install the wheel in a fresh virtual environment outside the source tree, and
# run the installed `hybrid` there with no repository in sight: `hybrid --version`, a
# short `hybrid train` and notebooks/01_quickstart.ipynb. An editable install hides what
# this catches: files missing from the package, dependencies missing from pyproject.toml,
# imports of folders that only the repository has.
#
#   make wheel-smoke        (CI runs it after make test; it passes TORCH / TORCH_INDEX)
#
# PYTHON builds (it needs `build`, in the dev extra) and makes the fresh venv.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
TORCH="${TORCH:-torch==2.13.0+cpu}"
TORCH_INDEX="${TORCH_INDEX:-}"
PIP_QUIET=(--quiet --disable-pip-version-check)

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/hybrid-wheel-smoke.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
case "$SCRATCH/" in
"$REPO"/*) echo "wheel-smoke: the scratch folder $SCRATCH is inside the repository" >&2; exit 1 ;;
esac
started=$SECONDS
step() { echo "wheel-smoke [$((SECONDS - started)) s]: $*"; }

step "building the sdist and the wheel"
"$PYTHON" -m build --outdir "$SCRATCH/dist" "$REPO" >"$SCRATCH/build.log" 2>&1 \
  || { cat "$SCRATCH/build.log"; exit 1; }
wheels=("$SCRATCH"/dist/*.whl)
sdists=("$SCRATCH"/dist/*.tar.gz)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${sdists[0]}" ] || { ls -l "$SCRATCH/dist"; exit 1; }
wheel="${wheels[0]}"
step "built $(basename "${sdists[0]}") and $(basename "$wheel")"

# From here on nothing of the repository is reachable: no PYTHONPATH (pip would count
# what it holds as installed), later another folder and Jupyter kernel specs only from
# the fresh venv.
unset PYTHONPATH PYTHONHOME JUPYTER_PATH
step "installing $TORCH, then the wheel with its notebooks extra, in a fresh venv"
"$PYTHON" -m venv "$SCRATCH/venv"
venv_python="$SCRATCH/venv/bin/python"
# torch first, as the Makefile does: the CPU build unless TORCH says otherwise.
# --no-compile: a throwaway venv byte-compiles only what it imports, on first import.
# shellcheck disable=SC2086  # TORCH_INDEX holds zero or more pip arguments
"$venv_python" -m pip install "${PIP_QUIET[@]}" --no-compile "$TORCH" $TORCH_INDEX
"$venv_python" -m pip install "${PIP_QUIET[@]}" --no-compile "$wheel[notebooks]"

mkdir "$SCRATCH/work"
cp "$REPO/notebooks/01_quickstart.ipynb" "$SCRATCH/work/"
cd "$SCRATCH/work"
export JUPYTER_DATA_DIR="$SCRATCH/jupyter" JUPYTER_CONFIG_DIR="$SCRATCH/jupyter"
export WANDB_MODE=offline WANDB_SILENT=true MPLBACKEND=Agg
hybrid="$SCRATCH/venv/bin/hybrid"

version="$("$hybrid" --version)"
expected="hybrid $(basename "$wheel" | cut -d- -f2)"
[ "$version" = "$expected" ] || { echo "hybrid --version: '$version', expected '$expected'" >&2; exit 1; }
step "$version"

"$venv_python" - "$SCRATCH/venv" <<'EOF'
import sys
from importlib.resources import files
from pathlib import Path

import federated
import hybrid
import multiagent

venv = Path(sys.argv[1]).resolve()
for package in (hybrid, federated, multiagent):
    where = Path(package.__file__).resolve()
    assert venv in where.parents, f"{package.__name__} imported from {where}, not the wheel"
assert files("hybrid").joinpath("py.typed").is_file(), "py.typed is not in the wheel"
EOF
step "hybrid, federated and multiagent import from the wheel; py.typed ships"

"$hybrid" train --env CartPole-v1 --scheduler async --total-env-steps 2000 --out run
[ -f run/summary.json ] && [ -s run/metrics.jsonl ] || { echo "hybrid train wrote no run" >&2; exit 1; }
step "hybrid train wrote run/summary.json"

"$venv_python" - "$SCRATCH/venv" 01_quickstart.ipynb <<'EOF'
import os
import sys

import nbformat
from nbclient import NotebookClient

venv, path = os.path.realpath(sys.argv[1]), sys.argv[2]
nb = nbformat.read(path, as_version=4)
# This checks the package, not learning (the test suite runs the notebook in full): after
# the cell that sets BUDGET, a cell that makes it small.
budget_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                and any(line.startswith("BUDGET =") for line in c.source.splitlines())]
if budget_cells:
    nb.cells.insert(budget_cells[0] + 1, nbformat.v4.new_code_cell("BUDGET = 4_000"))
else:
    print("wheel-smoke: no BUDGET in the notebook; it runs on its own budget")
# a last cell: the kernel ran the venv's Python and its installed hybrid
nb.cells.append(nbformat.v4.new_code_cell(
    "import os, sys, hybrid\n"
    f"assert os.path.realpath(sys.prefix) == {venv!r}, sys.prefix\n"
    f"assert os.path.realpath(hybrid.__file__).startswith({venv!r}), hybrid.__file__"
))
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
EOF
step "notebooks/01_quickstart.ipynb ran on the installed package"
step "passed"
