# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# torch is installed first and pinned here, where you can see and change it.
# Without a GPU we ask for the CPU build: an unpinned torch resolves to a CUDA
# build of several GB. On a generic CPU machine whose pip knows no CPU wheel, add
#   TORCH_INDEX="--extra-index-url https://download.pytorch.org/whl/cpu"
# With a GPU: make TORCH=torch==2.13.0 (or the CUDA build your driver wants).
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
TORCH ?= $(if $(HAS_GPU),torch==2.13.0,torch==2.13.0+cpu)
TORCH_INDEX ?=
EXTRAS ?= dev

.PHONY: setup demo test wheel-smoke docs lint bench peers clean mutation

$(BIN)/.installed: pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH)" $(TORCH_INDEX) \
	  || { echo "Could not install $(TORCH); set TORCH / TORCH_INDEX (see the Makefile)"; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	touch $@

setup: $(BIN)/.installed

demo: setup
	WANDB_MODE=offline $(BIN)/hybrid demo --out runs/demo

# Two xdist workers (the CI machine has 2 cores); tests that start processes or Ray run
# one after another in one of them (tests/conftest.py).
test: setup
	$(BIN)/ruff check .
	WANDB_MODE=offline $(BIN)/python -m pytest -q -n 2 --dist loadgroup

# Mutation testing (mutmut) of the schedulers, stats, FedOpt and V-trace, each module against
# its own unit tests; prints each module's score. Slow (tens of minutes): not part of `make
# test`. `make mutation MODULES=hybrid/fedopt.py` for some of them (.ci/mutation.py).
MODULES ?=
mutation: setup
	WANDB_MODE=offline $(BIN)/python .ci/mutation.py --list-survivors $(MODULES)

# The built wheel in a fresh venv outside the repo: --version, a short train, a notebook.
wheel-smoke: setup
	PYTHON=$(abspath $(BIN))/python TORCH="$(TORCH)" TORCH_INDEX="$(TORCH_INDEX)" bash .ci/wheel_smoke.sh

# The documentation site into site/; --strict: a broken link, a missing reference or a
# docstring that does not render fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/cartpole.py

# The peers the performance targets are measured against (SB3, TorchRL, Flower) in a venv of their own: Flower pins a ray
# that conflicts with hybrid's. benchmarks/cartpole.py and perf_compare.py use it when present.
PEERS_VENV ?= .venv-peers

$(PEERS_VENV)/.installed: benchmarks/peers/requirements.txt
	test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(TORCH)" $(TORCH_INDEX)
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(TORCH_INDEX) \
	  -r benchmarks/peers/requirements.txt
	touch $@

peers: $(PEERS_VENV)/.installed

clean:
	rm -rf $(VENV) runs wandb .pytest_cache .ruff_cache site .cache
