"""Sweep files that would hang, overflow or run code where they must not: each is refused
in one line (exit 2), or finishes, instead of spinning."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from hybrid import sweep
from hybrid.sweep import load_sweep, sweep_command

FAKE_TRAIN = """\
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
os.makedirs(args["out"])
json.dump({"seed": int(args.get("seed", 0))}, open(os.path.join(args["out"], "config.json"), "w"))
json.dump({"final_eval_return": float(args.get("seed", 0))},
          open(os.path.join(args["out"], "summary.json"), "w"))
"""


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def refused(capsys, argv: list[str], *needles: str) -> str:
    assert sweep_command(argv) == 2  # a hang would meet pytest's timeout instead
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("{distribution: log_uniform, min: 0, max: 1000}", "log_uniform"),
        ("{distribution: log_normal, mu: 1000, sigma: 1}", "log_normal"),
        ("{distribution: q_log_normal, mu: 1000, sigma: 1, q: 1}", "q_log_normal"),
        ("{distribution: q_uniform, min: 0, max: 1, q: 1.0e-300}", "q:"),
        ("{distribution: inv_log_uniform, min: -1000, max: 0}", "inv_log_uniform"),
        ("{distribution: normal, mu: 1.0e+308, sigma: 1.0e+308}", "normal"),
    ],
)
def test_distributions_that_overflow_are_one_line(tmp_path, capsys, spec, needle):
    path = write(tmp_path, f"method: random\nrun_cap: 2\nparameters:\n  lr: {spec}\n")
    refused(capsys, [str(path), "--dry-run", "--out", str(tmp_path / "o")], "lr", needle)


def test_a_huge_hyperband_s_is_planned_at_once(tmp_path, capsys):
    path = write(
        tmp_path,
        """\
        method: grid
        metric: {name: final_eval_return, goal: maximize}
        early_terminate: {type: hyperband, max_iter: 27, eta: 3, s: 10000000000}
        parameters:
          seed: {values: [0, 1]}
        """,
    )
    loaded = load_sweep(path)  # eta ** s would hold 4.8e9 digits
    assert loaded.early_terminate.min_iter == 1


def test_an_alias_bomb_is_refused(tmp_path, capsys):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    body = "\n".join(f"  {line}" for line in levels)
    # 10^12 values from 1 KB: the anchors come first, the parameter names the last
    path = write(
        tmp_path, "anchors:\n" + body + "\nmethod: grid\nparameters:\n  seed: {values: *a11}\n"
    )
    refused(capsys, [str(path), "--dry-run"], "expands to more than")


def test_many_aliases_are_refused(tmp_path, capsys):
    path = write(
        tmp_path,
        "method: grid\nparameters:\n  seed: {values: &v [0]}\n"
        + "".join(f"  k{i}: {{values: *v}}\n" for i in range(1_100)),
    )
    refused(capsys, [str(path), "--dry-run"], "aliases")


def test_a_bayes_sweep_stops_when_its_space_is_used_up(tmp_path, capsys, monkeypatch):
    pytest.importorskip("optuna", reason="bayes is an extra: hybrid-rl[sweeps]")
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    monkeypatch.setattr(sweep, "TRAIN_COMMAND", [sys.executable, str(fake)])
    path = write(
        tmp_path,
        """\
        method: bayes
        metric: {name: final_eval_return, goal: maximize}
        run_cap: 100000000000000000000
        parameters:
          seed: {values: [0, 1]}
        """,
    )
    out = tmp_path / "out"
    assert sweep_command([str(path), "--out", str(out), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    assert "bayes stopped early" in captured.err and "2 distinct configs" in captured.err
    runs = json.loads((out / "sweep_summary.json").read_text())["runs"]
    assert sorted(r["name"] for r in runs) == ["seed=0", "seed=1"]


def test_a_dry_run_imports_no_scheduler_file(tmp_path, capsys):
    marker = tmp_path / "imported"
    rule = tmp_path / "rule.py"
    rule.write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from hybrid import Scheduler\n"
        "class Rule(Scheduler):\n"
        "    def ready(self, idle, version):\n"
        "        return list(idle)\n"
        "    def full(self):\n"
        "        return True\n"
    )
    path = write(
        tmp_path,
        f"""\
        method: grid
        parameters:
          scheduler: {{value: "{rule}:Rule"}}
          seed: {{values: [0, 1]}}
        """,
    )
    assert sweep_command([str(path), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert "seed=0" in capsys.readouterr().out
    assert not marker.exists(), "--dry-run ran the scheduler file"
    assert not (tmp_path / "o").exists()
    # a missing file is still a one-line error under --dry-run
    path.write_text(path.read_text().replace("rule.py", "missing.py"))
    refused(capsys, [str(path), "--dry-run"], "no file")
