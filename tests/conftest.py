from __future__ import annotations

import inspect
import json
import os
import re
import shutil

import pytest
import torch

from hybrid.config import TrainConfig
from hybrid.protocol import Update

# Tests never reach the network.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def tiny_config(tmp_path):
    """A CartPole run small enough for a unit test (a few hundred env steps)."""

    def make(**changes) -> TrainConfig:
        base = TrainConfig(
            env="CartPole-v1",
            workers=3,
            envs_per_worker=2,
            rollout_steps=5,
            total_env_steps=600,
            eval_every=300,
            eval_episodes=2,
            log_every=100,
            progress=False,
            out=str(tmp_path / "run"),
            # The global defaults, not the classic-control family's: the pinned hashes of
            # tests/test_determinism.py and tests/test_device.py were taken with them.
            env_defaults=False,
        )
        return base.replace(**changes)

    return make


def make_update(worker_id: int, base_version: int, values, env_steps: int = 10, **kw) -> Update:
    return Update(
        worker_id=worker_id,
        base_version=base_version,
        payload=torch.tensor(values, dtype=torch.float32),
        env_steps=env_steps,
        **kw,
    )


WALL_CLOCK_FIELDS = {"wall_s", "perf/env_steps_per_s", "perf/virtual_clock_s"}


def metric_rows(run_dir) -> list[dict]:
    """metrics.jsonl without the fields that measure wall-clock time (they never repeat)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK_FIELDS} for line in lines
    ]


def crash_copy(run_dir, dest):
    """A copy of a finished run as a crash would have left it: no summary, and nothing
    newer than its middle checkpoint."""
    from hybrid.checkpoint import list_checkpoints

    shutil.copytree(run_dir, dest)
    (dest / "summary.json").unlink()
    checkpoints = list_checkpoints(dest)
    keep = checkpoints[len(checkpoints) // 2]
    for later in checkpoints:
        if later.name > keep.name:
            later.unlink()
    return dest


# `make test` runs the suite on two xdist workers (`-n 2 --dist loadgroup`). Tests that
# start worker processes or Ray share one group, so they run one after another in one
# xdist worker: the leak checks (/dev/shm, the process tree) then see only their own
# run's segments, and two Ray sessions never compete for one machine's ports.
_SPAWNS = re.compile(r"\bray\b|processes|hogwild|ProcessRuntime|RayRuntime", re.I)
# Module-scoped Ray instances: a test that takes one starts Ray whatever its source says.
_RAY_FIXTURES = {"ray_session", "cluster"}


def _spawning_text(item: pytest.Item) -> str:
    """The test's source, plus the code cells of the notebook it runs (when it runs one)."""
    try:
        source = inspect.getsource(item.function)
    except (OSError, TypeError):
        source = ""
    notebook = getattr(item, "callspec", None) and item.callspec.params.get("path")
    if isinstance(notebook, os.PathLike) and str(notebook).endswith(".ipynb"):
        import nbformat

        cells = nbformat.read(notebook, as_version=4).cells
        source += "\n".join(c.source for c in cells if c.cell_type == "code")
    return source


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if (
            _SPAWNS.search(item.nodeid)
            or _RAY_FIXTURES & set(getattr(item, "fixturenames", ()))
            or _SPAWNS.search(_spawning_text(item))
        ):
            item.add_marker(pytest.mark.xdist_group("spawns-processes"))
