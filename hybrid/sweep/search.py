"""Which runs, in what order: ``FixedRuns`` (grid and random, planned up front) and
``BayesRuns`` (proposed by TPE in batches), and ``Search``, Optuna behind ``method: bayes``
and ``early_terminate: hyperband``."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from hybrid.sweep.params import SweepError, _unique
from hybrid.sweep.planning import PlannedRun, RunBuilder
from hybrid.sweep.spec import Sweep
from hybrid.sweep.state import Outcome, _EvalTail, _read_json, check_finished, objective


class Search:
    """Optuna behind ``method: bayes`` (TPE) and ``early_terminate: hyperband`` (Hyperband).

    Optuna's TPE sampler is seeded from ``--seed`` and the study has a fixed name (Hyperband
    assigns brackets from it), so the same file and seed ask the same questions and, fed the
    same results in the same order, propose the same configs and prune the same runs. Each run
    is one trial; its eval rows are the trial's intermediate values (step = how many eval rows,
    wandb's "iteration"), and its metric, when it ends, the trial's value.
    """

    def __init__(self, sweep: Sweep, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        assert sweep.metric is not None
        self.sweep, self.metric = sweep, sweep.metric
        hb = sweep.early_terminate
        pruner: optuna.pruners.BasePruner = (
            optuna.pruners.HyperbandPruner(
                min_resource=hb.min_iter,
                max_resource=hb.max_iter if hb.max_iter is not None else "auto",
                reduction_factor=hb.eta,
            )
            if hb is not None
            else optuna.pruners.NopPruner()
        )
        self.pruning = hb is not None
        self.optuna = optuna
        self.study = optuna.create_study(
            study_name=f"hybrid-sweep/{sweep.name}/{seed}",
            direction=self.metric.goal,
            sampler=optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=self.startup_trials(sweep.run_cap)
            ),
            pruner=pruner,
        )
        self.trials: dict[str, Any] = {}
        self.reported: dict[str, int] = {}
        self.tails: dict[str, _EvalTail] = {}
        self.pruned_at: dict[str, dict[str, Any]] = {}

    @staticmethod
    def startup_trials(run_cap: int | None) -> int:
        """Random draws before TPE models the results: Optuna's 10, fewer for a small run_cap
        (a third of it, at least 2) so that a 10-run search is not all random. From the file
        only: --max-runs changes how many runs, never which."""
        return 10 if run_cap is None else max(2, min(10, run_cap // 3))

    def ask(self) -> Any:
        return self.study.ask()

    def suggest(self, trial: Any) -> dict[str, Any]:
        """A config from the trial: categorical values by index, any other distribution
        through its quantile in [0, 1) (the same inverse-CDF draw as random search)."""
        values = {}
        for p in self.sweep.params:
            if p.fixed():
                values[p.name] = p.draw(0.0)
            elif p.distribution == "categorical":
                choices = _unique(p.spec["values"])
                index = trial.suggest_categorical(p.name, list(range(len(choices))))
                values[p.name] = choices[index]
            else:
                u = trial.suggest_float(p.name, 0.0, 1.0)
                values[p.name] = p.draw(min(u, 1.0 - 1e-12))
        return values

    def bind(self, run: PlannedRun, trial: Any) -> None:
        self.trials[run.name] = trial
        self.reported[run.name] = 0
        self.tails[run.name] = _EvalTail(run.run_dir)

    def watch(self, run: PlannedRun, upto: int | None = None) -> dict[str, Any] | None:
        """Report the run's new eval rows; where Hyperband prunes it, say at which row."""
        trial = self.trials[run.name]
        rows = self.tails[run.name].read()[: upto if upto is not None else None]
        for step in range(self.reported[run.name] + 1, len(rows) + 1):
            value = rows[step - 1].get(self.metric.eval_key)
            self.reported[run.name] = step
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            trial.report(float(value), step)
            if self.pruning and trial.should_prune():
                row = rows[step - 1]
                verdict = {"step": step, "env_steps": row.get("env_steps"), "value": value}
                self.pruned_at[run.name] = verdict
                return verdict
        return None

    def tell(self, run: PlannedRun, status: str) -> None:
        """End the run's trial: its value, pruned, or failed (a failure tells TPE nothing)."""
        trial = self.trials.pop(run.name, None)
        self.tails.pop(run.name, None)
        if trial is None:
            return
        state = self.optuna.trial.TrialState
        if status == "pruned":
            self.study.tell(trial, state=state.PRUNED)
            return
        value = objective(run.run_dir, self.metric) if status in ("done", "skipped") else None
        if value is None or not math.isfinite(value):
            self.study.tell(trial, state=state.FAIL)
        else:
            self.study.tell(trial, value)

    def replay(self, run: PlannedRun, trial: Any) -> str:
        """Feed a finished run (an earlier session's, or a repeated proposal's) to a trial:
        its eval rows up to where it was pruned, then its value (a failed run's: none)."""
        self.bind(run, trial)
        pruned = _read_json(run.run_dir / "pruned.json")
        upto = int(pruned["step"]) if isinstance(pruned, dict) and "step" in pruned else None
        self.watch(run, upto)
        status = "pruned" if upto is not None else "skipped"
        self.tell(run, status)
        return status


class FixedRuns:
    """The runs of a grid or random search, planned up front, started in order."""

    def __init__(self, runs: Sequence[PlannedRun]) -> None:
        self.pending = list(runs)

    def take(self, free: int, running: int) -> list[PlannedRun]:
        taken, self.pending = self.pending[:free], self.pending[free:]
        return taken

    def finished(self, outcome: Outcome) -> None:
        pass

    @property
    def exhausted(self) -> bool:
        return not self.pending


REPEAT_LIMIT = 200
"""Proposals in a row that meet configs already run, after which a bayes search stops: its
space (a small grid of values, or continuous values rounded to a few digits) is used up."""


def search_space_size(sweep: Sweep) -> int | None:
    """How many distinct configs the parameters can make, when all are discrete (values,
    constants, int_uniform); None when any is continuous."""
    size = 1
    for p in sweep.params:
        d, s = p.distribution, p.spec
        if d == "constant":
            continue
        if d in ("categorical", "categorical_w_probabilities"):
            size *= len(_unique(s["values"]))
        elif d == "int_uniform":
            size *= s["max"] - s["min"] + 1
        else:
            return None
    return size


class BayesRuns:
    """Runs proposed by TPE in batches of ``batch``: every trial of a batch is asked before
    any is told, and told in trial order once the whole batch is over, so the proposals do
    not depend on which run finished first. A proposal already finished on disk (an earlier
    session) or met earlier is told its known result instead of running again.
    """

    def __init__(
        self, search: Search, build: RunBuilder, count: int, batch: int, done: set[str]
    ) -> None:
        self.search, self.build, self.count, self.batch = search, build, count, batch
        self.done_before = done
        self.results: dict[str, str] = {}  # run name -> status, for every distinct config
        self.asks = 0
        self.max_asks = 100 * count + 100  # a small discrete space may hold fewer configs
        self.space = search_space_size(build.sweep)
        self.repeats = 0  # proposals in a row that met a config already known
        self.stopped_because = ""
        self.open: list[tuple[Any, PlannedRun, bool]] = []  # (trial, run, runs this session)
        self.exhausted = False
        self.skipped: list[PlannedRun] = []

    def take(self, free: int, running: int) -> list[PlannedRun]:
        if running or self.open or self.exhausted:
            return []
        while not self.exhausted:
            new = self._next_batch()
            if new:
                return new
        return []

    def _next_batch(self) -> list[PlannedRun]:
        size = min(self.batch, self.count - len(self.results))
        if self.space is not None and len(self.results) >= self.space:
            self.stopped_because = (
                f"the search space holds {self.space} distinct configs and all of them ran"
            )
        elif self.repeats >= REPEAT_LIMIT:
            self.stopped_because = (
                f"Optuna proposed {self.repeats} configs in a row that had already run; "
                "the search space is exhausted"
            )
        if size <= 0 or self.asks >= self.max_asks or self.stopped_because:
            self.exhausted = True
            return []
        batch_names: set[str] = set()
        to_run = []
        for _ in range(size):
            self.asks += 1
            trial = self.search.ask()
            try:
                run = self.build(self.search.suggest(trial))
            except SweepError as exc:  # a proposal that hybrid train would refuse
                self.search.study.tell(trial, state=self.search.optuna.trial.TrialState.FAIL)
                print(f"hybrid sweep: proposal refused: {exc}", file=sys.stderr)
                continue
            fresh = run.name not in self.results and run.name not in batch_names
            self.repeats = 0 if fresh else self.repeats + 1
            runs_now = fresh and run.name not in self.done_before
            if fresh and not runs_now:  # finished in an earlier session: with these values?
                check_finished(run, self.build.sweep)
            self.open.append((trial, run, runs_now))
            if runs_now:
                self.search.bind(run, trial)
                to_run.append(run)
            elif fresh:
                self.skipped.append(run)
            batch_names.add(run.name)
        if not to_run:
            self._close_batch()
        return to_run

    def finished(self, outcome: Outcome) -> None:
        self.results[outcome.run.name] = outcome.status
        if all(name in self.results for name in (r.name for _, r, now in self.open if now)):
            self._close_batch()

    def _close_batch(self) -> None:
        for trial, run, runs_now in self.open:
            if runs_now:  # bound when proposed: its rows were reported while it ran
                status = self.results[run.name]
                if status != "pruned":
                    self.search.watch(run)
                self.search.tell(run, status)
            elif run.name in self.results:  # met before: its result again (runs are seeded)
                self.search.replay(run, trial)
            else:  # finished in an earlier session
                self.results[run.name] = self.search.replay(run, trial)
        self.open = []
        if len(self.results) >= self.count:
            self.exhausted = True
