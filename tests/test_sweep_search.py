"""``hybrid sweep``: method: bayes (Optuna TPE), early_terminate: hyperband (Optuna's
Hyperband), and scheduler settings (``scheduler_arg.KEY``) as sweep parameters.

The search tests run a fake ``hybrid train`` (a few lines of Python, no torch) whose eval rows
follow a known function of lr, so that they are fast and their results are known.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

from hybrid import sweep
from hybrid.flags import parse_train_args
from hybrid.sweep import load_sweep, plan, sweep_command

pytest.importorskip("optuna", reason="bayes and hyperband are an extra: hybrid-rl[sweeps]")

REPO = Path(__file__).resolve().parents[1]

# Writes config.json, then EVALS eval rows (one every PAUSE s) climbing to a score that peaks
# at lr = 1e-3 (times FAKE_SIGN), then summary.json. SIGTERM (a pruned run) ends it at once.
FAKE_TRAIN = """\
import json, math, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
out = args["out"]
os.makedirs(out)
lr = float(args.get("lr", "0.001"))
sign = float(os.environ.get("FAKE_SIGN", "1"))
score = sign * (100.0 - 30.0 * (math.log10(lr) + 3.0) ** 2)
json.dump({"lr": lr, "seed": int(args.get("seed", 0))}, open(os.path.join(out, "config.json"), "w"))
evals = int(os.environ.get("FAKE_EVALS", "3"))
with open(os.path.join(out, "metrics.jsonl"), "w", buffering=1) as f:
    for i in range(1, evals + 1):
        row = {"kind": "eval", "env_steps": 100 * i, "eval/return_mean": score * i / evals}
        f.write(json.dumps(row) + "\\n")
        time.sleep(float(os.environ.get("FAKE_PAUSE", "0")))
json.dump({"final_eval_return": score}, open(os.path.join(out, "summary.json"), "w"))
"""

BAYES = """\
method: bayes
metric: {name: final_eval_return, goal: maximize}
run_cap: 10
parameters:
  lr: {distribution: log_uniform_values, min: 1.0e-5, max: 1.0e-1}
  seed: {value: 0}
"""

HYPERBAND = """\
method: grid
metric: {name: final_eval_return, goal: maximize}
early_terminate: {type: hyperband, min_iter: 1, max_iter: 9, eta: 3}
parameters:
  lr: {values: [1.0e-5, 1.0e-4, 3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2, 1.0e-1, 2.0e-3, 5.0e-4]}
"""


@pytest.fixture
def fake_train(tmp_path, monkeypatch):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    monkeypatch.setattr(sweep, "TRAIN_COMMAND", [sys.executable, str(fake)])
    return fake


def write(tmp_path: Path, text: str, name: str = "search.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def summary(out: Path) -> dict:
    return json.loads((out / "sweep_summary.json").read_text())


def proposals(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if (p / "config.json").exists())


def test_bayes_is_reproducible_from_its_seed_and_resumes(tmp_path, capsys, fake_train):
    spec = write(tmp_path, BAYES)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert sweep_command([str(spec), "--out", str(a), "--jobs", "2", "--seed", "3"]) == 0
    assert len(proposals(a)) == 10
    assert all(r["status"] == "done" for r in summary(a)["runs"])

    # Interrupted after two batches of two, then resumed: the same ten proposals.
    cmd = [str(spec), "--out", str(b), "--jobs", "2", "--seed", "3"]
    assert sweep_command([*cmd, "--max-runs", "4"]) == 0
    assert len(proposals(b)) == 4
    capsys.readouterr()
    assert sweep_command(cmd) == 0
    printed = capsys.readouterr().out
    assert "4 finished in" in printed and "skipped     4" in printed
    assert proposals(b) == proposals(a)

    # Another seed proposes other configs.
    assert sweep_command([str(spec), "--out", str(c), "--jobs", "2", "--seed", "4"]) == 0
    assert proposals(c) != proposals(a)


def test_bayes_proposals_follow_the_results(tmp_path, fake_train, monkeypatch):
    """TPE is told each run's metric: flip the sign of the score and, after the seeded start-up
    draws (identical), it proposes other configs, nearer the new optimum (the range's ends)."""
    spec = write(tmp_path, BAYES)
    up, down = tmp_path / "up", tmp_path / "down"
    assert sweep_command([str(spec), "--out", str(up)]) == 0
    monkeypatch.setenv("FAKE_SIGN", "-1")
    assert sweep_command([str(spec), "--out", str(down)]) == 0

    def lrs(out: Path) -> list[float]:
        return [r["values"]["lr"] for r in summary(out)["runs"]]

    startup = sweep.Search.startup_trials(10)
    assert lrs(up)[:startup] == lrs(down)[:startup]
    assert lrs(up)[startup:] != lrs(down)[startup:]

    def distance(lr: float) -> float:
        return abs(math.log10(lr) + 3.0)

    def best(out: Path) -> float:
        name = summary(out)["best"]
        return next(r["values"]["lr"] for r in summary(out)["runs"] if r["name"] == name)

    # The best of each search is near its own optimum: lr = 1e-3, or an end of the range.
    assert distance(best(up)) < 0.5 and distance(best(down)) > 1.5


def test_hyperband_prunes_the_worst_runs_from_their_eval_rows(
    tmp_path, capsys, fake_train, monkeypatch
):
    monkeypatch.setenv("FAKE_EVALS", "9")
    monkeypatch.setenv("FAKE_PAUSE", "0.15")
    spec = write(tmp_path, HYPERBAND)
    out = tmp_path / "out"
    assert sweep_command([str(spec), "--out", str(out)]) == 0
    runs = {r["name"]: r for r in summary(out)["runs"]}
    pruned = {name for name, r in runs.items() if r["status"] == "pruned"}
    assert pruned and len(pruned) < len(runs)
    for name in pruned:  # stopped early, marked in its directory and in the summary
        assert (out / name / "pruned.json").exists() and not (out / name / "summary.json").exists()
        assert runs[name]["pruned"]["step"] < 9
    assert "lr=0.001" not in pruned and summary(out)["best"] == "lr=0.001"
    best = [r for r in sweep._eval_rows(out / "lr=0.001")]
    for name in pruned:  # below the best run where it was cut (successive halving's rule)
        step, value = runs[name]["pruned"]["step"], runs[name]["pruned"]["value"]
        assert value < best[step - 1]["eval/return_mean"]
    capsys.readouterr()

    # Pruned runs are finished: a rerun runs nothing.
    assert sweep_command([str(spec), "--out", str(out)]) == 0
    assert "skipped     9" in capsys.readouterr().out


def test_search_keys_are_checked_in_one_line(tmp_path, capsys):
    cases = {
        "early_terminate: {type: median}\n": "only type: hyperband",
        "early_terminate: {type: hyperband}\n": "give min_iter, or max_iter and s",
        "early_terminate: {type: hyperband, min_iter: 0}\n": "min_iter must be an integer >= 1",
        "early_terminate: {type: hyperband, min_iter: 3, max_iter: 2}\n": "below min_iter",
    }
    for extra, message in cases.items():
        text = "method: grid\nmetric: {name: x}\nparameters:\n  seed: {values: [0]}\n" + extra
        assert sweep_command([str(write(tmp_path, text)), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, err
    no_metric = "method: grid\nearly_terminate: {type: hyperband, min_iter: 1}\n"
    no_metric += "parameters:\n  seed: {value: 0}\n"
    assert sweep_command([str(write(tmp_path, no_metric))]) == 2
    assert "needs metric:" in capsys.readouterr().err
    bad_goal = "method: bayes\nrun_cap: 2\nmetric: {name: x, goal: up}\n"
    bad_goal += "parameters:\n  seed: {values: [0]}\n"
    assert sweep_command([str(write(tmp_path, bad_goal))]) == 2
    assert "goal must be minimize or maximize" in capsys.readouterr().err
    # A bayes range whose end hybrid train refuses is refused before anything runs.
    bad_range = (
        "method: bayes\nrun_cap: 2\nmetric: {name: x}\nparameters:\n  gamma: {min: 0.5, max: 1.5}\n"
    )
    assert sweep_command([str(write(tmp_path, bad_range)), "--out", str(tmp_path / "o")]) == 2
    assert "gamma" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert sweep_command([str(write(tmp_path, BAYES)), "--backend", "slurm"]) == 2
    assert "--backend must be local or ray" in capsys.readouterr().err
    assert sweep_command([str(write(tmp_path, BAYES)), "--ray-address", "auto"]) == 2
    assert "--ray-address applies with --backend ray only" in capsys.readouterr().err


# --- scheduler settings as sweep parameters --------------------------------------------------

DC_ASGD = str(REPO / "examples" / "schedulers" / "dc_asgd.py") + ":DCASGD"


def test_scheduler_arg_parameters_reach_the_runs_and_the_finished_check(tmp_path, capsys):
    text = f"""\
    method: grid
    parameters:
      scheduler: {{value: "{DC_ASGD}"}}
      scheduler_arg.lam: {{values: [0.5, 2]}}
      total_env_steps: {{value: 200}}
      eval_every: {{value: 200}}
      eval_episodes: {{value: 1}}
      workers: {{value: 2}}
      rollout_steps: {{value: 5}}
    """
    spec, out = write(tmp_path, text), tmp_path / "out"
    runs = plan(load_sweep(spec), out)
    assert [r.name for r in runs] == ["scheduler_arg.lam=0.5", "scheduler_arg.lam=2"]
    assert runs[1].config.scheduler_args == {"lam": 2.0}  # typed, as config.json records it
    assert "--scheduler_arg.lam=2" in runs[1].argv
    # What the run parses (and what wandb agent passes online) is the same setting.
    dotted = parse_train_args(["--scheduler_arg.lam=2", "--scheduler_arg.adaptive=true"])
    flags = parse_train_args(["--scheduler-arg", "lam=2", "--scheduler-arg=adaptive=true"])
    assert dotted.scheduler_args == flags.scheduler_args and set(flags.scheduler_args) == {
        "lam",
        "adaptive",
    }

    assert sweep_command([str(spec), "--out", str(out), "--jobs", "2"]) == 0
    stored = json.loads((out / "scheduler_arg.lam=2" / "config.json").read_text())
    assert stored["scheduler_args"] == {"lam": 2.0}
    capsys.readouterr()

    # The same directory under another value of the setting is refused, not counted as done.
    changed = text.replace(
        "scheduler_arg.lam: {values: [0.5, 2]}",
        "scheduler_arg.lam: {values: [0.5, 2]}\n      scheduler_arg.adaptive: {value: true}",
    )
    assert sweep_command([str(write(tmp_path, changed, "changed.yaml")), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "scheduler_arg.adaptive=unset but this sweep sets scheduler_arg.adaptive=True" in err

    # Checked against the class's Settings when the sweep runs (before any run starts); a
    # --dry-run imports no scheduler file, so it cannot check them and says so.
    bad = write(tmp_path, text.replace("values: [0.5, 2]", "values: [lots]"), "bad.yaml")
    assert sweep_command([str(bad), "--out", str(tmp_path / "bad")]) == 2
    assert "scheduler_args: lam='lots' is not a float" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert sweep_command([str(bad), "--dry-run"]) == 0
    assert "checked when the sweep runs" in capsys.readouterr().err

    # hybrid compare groups by a setting.
    from hybrid.analysis import compare

    comparison = compare(out, tmp_path / "report", group_by=["scheduler_arg.lam"], x_axes=())
    assert sorted(comparison.groups) == ["scheduler_arg.lam=0.5", "scheduler_arg.lam=2.0"]
