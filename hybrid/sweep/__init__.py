"""``hybrid sweep``: run a wandb-format sweep file offline, in parallel, resumably.

    hybrid sweep sweeps/scheduler_ablation.yaml --jobs 2 --out runs/sweep
    hybrid sweep sweeps/lr_bayes.yaml --backend ray --ray-address auto

The YAML is wandb's sweep format, so the same file runs online with ``wandb sweep`` +
``wandb agent``. This runner mirrors wandb's meaning of ``method`` (grid / random /
bayes), ``parameters`` (``value``, ``values``, ``distribution`` with ``min``/``max``/``q``/
``mu``/``sigma``...), ``run_cap``, ``metric`` and ``early_terminate`` (hyperband), and
needs no server: every run is one ``hybrid train`` process with ``WANDB_MODE=offline``
(here, or in a Ray task with ``--backend ray``), written to ``OUT/<name>`` where the name
is built from the parameter values that vary (``scheduler=async,seed=1``). bayes is
Optuna's TPE sampler and hyperband Optuna's HyperbandPruner (``Search``), fed by the runs'
eval rows; a pruned run's directory holds ``pruned.json``.

A run directory holding ``summary.json`` (or ``pruned.json``) is finished and skipped, so
rerunning the same command after a crash or Ctrl-C resumes the sweep; a directory without
one is a run that died half-way and is removed and rerun. Random search draws from a
seeded stream (``--seed``), and bayes is seeded and fed results in a fixed order, so a
rerun draws the same configs and resumes too.

Bad input (an unknown field, an empty grid, an unknown method...) ends in one line on
stderr and exit code 2 before any run starts; every expanded config is checked the way
``hybrid train`` checks it first.

The package by concern: ``spec`` (the YAML file), ``params`` (one parameter's distribution),
``planning`` (runs, their names and checks), ``search`` (grid/random order, bayes proposals,
hyperband), ``state`` (what run directories say), ``backends`` (a run as a process here or a
Ray task), ``running`` (``execute``), ``report`` (sweep_summary.json), ``command`` (the CLI).
"""

# The names below were all importable from hybrid.sweep when it was one module: re-exported
# so that they stay importable (only __all__'s are the documented API).
# ruff: noqa: F401

from __future__ import annotations

import sys
import types
from typing import Any

from hybrid.sweep import planning
from hybrid.sweep.backends import RUN_ENV, RUN_ENV_REMOVED, LocalBackend, run_on_node
from hybrid.sweep.command import BACKENDS, sweep_command
from hybrid.sweep.params import (
    CONTINUOUS_DIGITS,
    DEFAULTS,
    DISTRIBUTIONS,
    MAX_STEPS,
    Param,
    SweepError,
)
from hybrid.sweep.planning import (
    MAX_NAME,
    MAX_RUNS,
    TRAIN_COMMAND,
    PlannedRun,
    RunBuilder,
    expand,
    grid_size,
    iter_configs,
    plan,
    planned_runs,
    run_name,
)
from hybrid.sweep.report import SUMMARY_FILE
from hybrid.sweep.running import execute
from hybrid.sweep.search import REPEAT_LIMIT, BayesRuns, FixedRuns, Search, search_space_size
from hybrid.sweep.spec import (
    EARLY_TERMINATE_KEYS,
    GOALS,
    GRID_DISTRIBUTIONS,
    MAX_YAML_ALIASES,
    MAX_YAML_CHARS,
    MAX_YAML_ITEMS,
    METHODS,
    REFUSED_FIELDS,
    RUNNER_FIELDS,
    SCHEDULER_ARG,
    TOP_LEVEL_KEYS,
    Hyperband,
    Metric,
    Sweep,
    load_sweep,
)
from hybrid.sweep.state import (
    Outcome,
    _eval_rows,
    check_finished,
    is_complete,
    is_finished,
    is_pruned,
    objective,
    write_json,
)


# Setting hybrid.sweep.TRAIN_COMMAND (tests swap in a fake ``hybrid train``) must reach
# the module that builds each run's argv, as it did when the sweep was one module.
class _SweepPackage(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name == "TRAIN_COMMAND":
            planning.TRAIN_COMMAND = value
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _SweepPackage

__all__ = [
    "Outcome",
    "Param",
    "PlannedRun",
    "Sweep",
    "SweepError",
    "execute",
    "expand",
    "is_complete",
    "load_sweep",
    "plan",
    "run_name",
    "sweep_command",
]
