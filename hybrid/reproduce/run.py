"""Run a paper check: every arm over its seeds, then the table beside the published figure.

Each run is one ``python -m hybrid.reproduce._one`` process (``--jobs`` at once), which
writes its run directory; a run whose summary.json already exists is kept, so an
interrupted check resumes. The tables are Markdown and LaTeX, written to ``--out``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid.reproduce.entry import (
    ArmStats,
    Entry,
    scaled_budget,
    series,
    speedups,
    time_ratio,
    verdict,
)


@dataclass(frozen=True)
class PlannedRun:
    arm: str
    seed: int
    run_dir: Path
    config: dict[str, Any]


@dataclass(frozen=True)
class Report:
    """An entry's outcome: the arms' statistics, the verdict and how long it took."""

    entry: Entry
    arms: tuple[ArmStats, ...]
    seeds: tuple[int, ...]
    budget_scale: float
    wall_s: float
    verdict: str

    @property
    def env_steps(self) -> int:
        return scaled_budget(self.entry.budget, self.budget_scale)


def plan(entry: Entry, seeds: Sequence[int], out: Path, budget_scale: float) -> list[PlannedRun]:
    """Every run of the check, with its config (``prepare``'s extras included)."""
    extras = entry.prepare(str(out), budget_scale) if entry.prepare is not None else {}
    runs = []
    for arm in entry.arms:
        for seed in seeds:
            run_dir = out / _slug(arm.label) / f"s{seed}"
            config = entry.run_config(arm, seed, budget_scale) | dict(extras.get(arm.label, {}))
            runs.append(PlannedRun(arm.label, seed, run_dir, config | {"out": str(run_dir)}))
    return runs


def _slug(label: str) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in label).strip("-")


def execute(
    runs: Sequence[PlannedRun], jobs: int, say: Callable[[str], None] = print
) -> dict[Path, dict[str, Any]]:
    """Run what has no summary.json yet, ``jobs`` at a time; return every run's summary."""
    summaries: dict[Path, dict[str, Any]] = {}
    pending = []
    for run in runs:
        summary = _summary(run.run_dir)
        if summary is not None:
            summaries[run.run_dir] = summary
        else:
            shutil.rmtree(run.run_dir, ignore_errors=True)  # an interrupted earlier attempt
            pending.append(run)
    done = len(summaries)
    if done:
        say(f"{done}/{len(runs)} runs done before, kept")
    if jobs == 1:  # in this process: no interpreter and torch import per run
        for run in pending:
            done += 1
            started = time.perf_counter()
            try:
                summaries[run.run_dir] = train_one(run.config)
            except Exception as exc:  # counted as failed, as a crashed subprocess is below
                first_line = (str(exc).splitlines() or [""])[0]
                why = f"{type(exc).__name__}: {first_line}"
                say(f"[{done}/{len(runs)}] {run.arm} seed {run.seed}: failed ({why})")
                continue
            _report(say, done, len(runs), run, summaries[run.run_dir], started)
        return summaries
    running: dict[subprocess.Popen[bytes], tuple[PlannedRun, float]] = {}
    queue = list(pending)
    try:
        while queue or running:
            while queue and len(running) < jobs:
                run = queue.pop(0)
                running[_start(run)] = (run, time.perf_counter())
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                run, started = running.pop(proc)
                done += 1
                summary = _summary(run.run_dir)
                if proc.returncode != 0 or summary is None:
                    log = run.run_dir.parent / f"{run.run_dir.name}.log"
                    say(f"[{done}/{len(runs)}] {run.arm} seed {run.seed}: failed (see {log})")
                    continue
                summaries[run.run_dir] = summary
                _report(say, done, len(runs), run, summary, started)
    finally:  # interrupted (Ctrl-C): no run outlives the check; a rerun resumes
        for proc in running:
            proc.terminate()
        for proc in running:
            proc.wait()
    return summaries


def train_one(fields: dict[str, Any]) -> dict[str, Any]:
    """One run from its ``TrainConfig`` fields; its summary. Every field is passed as a
    keyword too, so none is mistaken for one left at its global default."""
    import hybrid

    return dict(hybrid.train(hybrid.TrainConfig(**fields), **fields).summary)


def _report(
    say: Callable[[str], None],
    done: int,
    total: int,
    run: PlannedRun,
    summary: dict[str, Any],
    started: float,
) -> None:
    final = summary.get("final_eval_return")
    say(
        f"[{done}/{total}] {run.arm} seed {run.seed}: final eval "
        f"{float('nan') if final is None else final:.1f}, {summary['env_steps']:,} env steps, "
        f"{time.perf_counter() - started:.0f} s"
    )


def _summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    with open(path) as f:
        summary: dict[str, Any] = json.load(f)
    return summary


def _start(run: PlannedRun) -> subprocess.Popen[bytes]:
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    config_path = run.run_dir.parent / f"{run.run_dir.name}.config.json"
    config_path.write_text(json.dumps(run.config, indent=1) + "\n")
    log = open(run.run_dir.parent / f"{run.run_dir.name}.log", "wb")  # noqa: SIM115
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "hybrid.reproduce._one", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    finally:
        log.close()  # the child holds its own descriptor


def reproduce(
    entry: Entry,
    seeds: Sequence[int],
    out: str | Path,
    jobs: int = 1,
    budget_scale: float = 1.0,
    say: Callable[[str], None] = print,
) -> Report:
    """Run ``entry`` over ``seeds`` (``jobs`` at once) and judge it; writes the tables."""
    out = Path(out)
    started = time.perf_counter()
    runs = plan(entry, seeds, out, budget_scale)
    say(
        f"{entry.name}: {len(entry.arms)} arm(s) x {len(seeds)} seeds, "
        f"{scaled_budget(entry.budget, budget_scale):,} env steps each "
        f"(source: {entry.budget:,}), {jobs} at a time"
    )
    summaries = execute(runs, jobs, say)
    arms = []
    for arm in entry.arms:
        planned = [r for r in runs if r.arm == arm.label]
        mine = [summaries[r.run_dir] for r in planned if r.run_dir in summaries]
        arms.append(
            ArmStats(
                arm.label,
                tuple(entry.figure(s) for s in mine),
                sum(bool(s.get("solved")) for s in mine)
                if entry.kind != "speedup"
                and any(s.get("reward_threshold") is not None for s in mine)
                else None,
                failed=len(planned) - len(mine),
            )
        )
    report = Report(
        entry,
        tuple(arms),
        tuple(seeds),
        budget_scale,
        time.perf_counter() - started,
        verdict(entry, arms, budget_scale),
    )
    write_tables([report], out)
    return report


# --- tables --------------------------------------------------------------------------------------

HEADER = (
    "entry",
    "arm",
    "env",
    "env steps (source)",
    "seeds",
    "metric",
    "IQM",
    "mean ± std",
    "solved",
    "published",
    "verdict",
)


def _number(x: float) -> str:
    if math.isnan(x):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:,.1f}" if abs(x) < 1e5 else f"{x:,.0f}"


def rows(report: Report) -> list[tuple[str, ...]]:
    """The table's rows of one report: one per arm, then a summary row for comparisons."""
    entry = report.entry
    out = []
    for i, arm in enumerate(report.arms):
        out.append(
            (
                entry.name if i == 0 else "",
                arm.label,
                entry.env_id if i == 0 else "",
                f"{report.env_steps:,} ({entry.budget:,})" if i == 0 else "",
                f"{arm.n} + {arm.failed} failed" if arm.failed else str(arm.n),
                entry.metric_name,
                _number(arm.iqm),
                f"{_number(arm.mean)} ± {_number(arm.std)}",
                "n/a" if arm.solved is None else f"{arm.solved}/{arm.n}",
                entry.published.text if i == 0 else "",
                report.verdict if i == len(report.arms) - 1 and entry.kind == "return" else "",
            )
        )
    if entry.kind != "return":
        out.append(("", "", "", "", "", "", "", "", "", _comparison(report), report.verdict))
    if entry.name.startswith("mappo"):
        out.extend(_team_sum_rows(report))
    return out


def _comparison(report: Report) -> str:
    """The figure a comparison entry compares with its source: a ratio, a speedup row."""
    entry, arms = report.entry, report.arms
    if entry.kind == "speedup":
        rows = []
        for name, members in series(entry, arms).items():
            measured = " / ".join(f"{s:.1f}" for s in speedups(members))
            rows.append(f"{name or 'hybrid'} speedup {measured}")
        return "; ".join(rows)
    if entry.kind == "time_ratio":
        ratio = time_ratio(arms[0], arms[1])
        return f"hybrid ratio {arms[0].label}/{arms[1].label}: {_number(ratio)}"
    return f"{arms[0].label} IQM − {arms[1].label} IQM: {_number(arms[0].iqm - arms[1].iqm)}"


def _team_sum_rows(report: Report) -> list[tuple[str, ...]]:
    """Multi-agent: the same runs under the other return convention (sum over agents)."""
    from hybrid.reproduce.entries.mappo_vs_ippo import AGENTS

    out = []
    for arm in report.arms:
        total = ArmStats(arm.label, tuple(v * AGENTS for v in arm.values), None)
        out.append(
            (
                "",
                arm.label,
                "",
                "",
                str(total.n),
                f"team sum over {AGENTS} agents",
                _number(total.iqm),
                f"{_number(total.mean)} ± {_number(total.std)}",
                "",
                "",
                "",
            )
        )
    return out


def to_markdown(reports: Sequence[Report]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for report in reports:
        for row in rows(report):
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "−": "-",
    "∞": r"$\infty$",
    "×": r"$\times$",
    "–": "--",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def to_latex(reports: Sequence[Report]) -> str:
    lines = [
        r"\begin{tabular}{" + "l" * 3 + "r" * 2 + "l" + "r" * 3 + "ll}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in HEADER) + r" \\",
        r"\midrule",
    ]
    for report in reports:
        for row in rows(report):
            lines.append(" & ".join(latex_escape(cell) for cell in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(reports: Sequence[Report], out: str | Path) -> tuple[Path, Path]:
    """``reproduce.md`` and ``reproduce.tex`` in ``out``, and the reports as JSON."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md, tex = out / "reproduce.md", out / "reproduce.tex"
    md.write_text(to_markdown(reports))
    tex.write_text(to_latex(reports))
    (out / "reproduce.json").write_text(json.dumps([_as_json(r) for r in reports], indent=1))
    return md, tex


def _as_json(report: Report) -> dict[str, Any]:
    return {
        "entry": report.entry.name,
        "seeds": list(report.seeds),
        "budget_scale": report.budget_scale,
        "env_steps": report.env_steps,
        "wall_s": report.wall_s,
        "verdict": report.verdict,
        "arms": {
            a.label: {"values": list(a.values), "solved": a.solved, "failed": a.failed}
            for a in report.arms
        },
    }
