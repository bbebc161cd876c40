"""``execute``: starts runs on a backend ``jobs`` at a time, feeds the search their eval
rows, stops the runs Hyperband prunes, and turns an exit code into an ``Outcome``."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid.errors import TaskLost
from hybrid.sweep.backends import LocalBackend
from hybrid.sweep.planning import PlannedRun
from hybrid.sweep.search import BayesRuns, FixedRuns, Search
from hybrid.sweep.state import Outcome, is_complete, write_json

if TYPE_CHECKING:
    from hybrid.runtimes.ray_tasks import RayBackend


def execute(
    runs: Sequence[PlannedRun] | FixedRuns | BayesRuns,
    jobs: int,
    log_dir: Path,
    on_finish: Callable[[Outcome], None] = lambda outcome: None,
    *,
    backend: LocalBackend | RayBackend | None = None,
    search: Search | None = None,
) -> list[Outcome]:
    """Run each on the backend, ``jobs`` at a time; a failure does not stop the others.

    stdout and stderr of a run go to ``log_dir/<name>.out`` / ``.err`` (its run directory
    must be empty when hybrid train starts). With a ``search``, each running run's new eval
    rows are reported as they appear, and a run that Hyperband prunes is stopped and marked
    (``pruned.json`` in its directory). Ctrl-C or SIGTERM stops the running runs; their
    directories stay incomplete and the next invocation reruns them; a runner that is
    SIGKILLed takes its running children with it (``_die_with_parent``).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    backend = backend or LocalBackend(log_dir)
    source = runs if isinstance(runs, (FixedRuns, BayesRuns)) else FixedRuns(runs)
    running: dict[Any, tuple[PlannedRun, float]] = {}
    outcomes = []

    def finish(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if search is not None and isinstance(source, FixedRuns):
            search.tell(outcome.run, outcome.status)
        source.finished(outcome)
        on_finish(outcome)

    try:
        with _sigterm_raises():
            while not source.exhausted or running:
                for run in source.take(jobs - len(running), len(running)):
                    running[backend.start(run)] = (run, time.monotonic())
                finished = []
                for handle, (run, start) in list(running.items()):
                    try:
                        code = backend.poll(handle)
                    except TaskLost as exc:
                        del running[handle]
                        finish(Outcome(run, "failed", time.monotonic() - start, str(exc)[:300]))
                        continue
                    if code is not None:
                        finished.append((handle, code))
                    elif search is not None and search.pruning:
                        verdict = search.watch(run)
                        if verdict is not None:
                            backend.stop([handle])
                            del running[handle]
                            write_json(run.run_dir / "pruned.json", verdict)
                            seconds = time.monotonic() - start
                            finish(Outcome(run, "pruned", seconds, _pruned_text(verdict)))
                if not finished:
                    time.sleep(0.05)
                for handle, code in finished:
                    run, start = running.pop(handle)
                    if search is not None:
                        search.watch(run)
                    finish(_outcome(run, code, time.monotonic() - start, log_dir))
    finally:
        if running:
            backend.stop(list(running))
    return outcomes


def _pruned_text(verdict: dict[str, Any]) -> str:
    steps = verdict.get("env_steps")
    at = f" ({int(steps):,} env steps)" if isinstance(steps, int) else ""
    return f"pruned at eval {verdict['step']}{at}, value {float(verdict['value']):.4g}"


def _outcome(run: PlannedRun, code: int, seconds: float, log_dir: Path) -> Outcome:
    if code == 0 and is_complete(run.run_dir):
        return Outcome(run, "done", seconds)
    lines = (log_dir / f"{run.name}.err").read_text(errors="replace").splitlines()
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if not last:
        if code < 0:
            last = f"killed by {signal.Signals(-code).name}"
        elif code == 0:
            last = "exited 0 without writing summary.json"
        else:
            last = f"exit code {code}, nothing on stderr"
    return Outcome(run, "failed", seconds, last[:300])


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM (a job scheduler, `kill`) into KeyboardInterrupt so children are stopped."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
