"""``hybrid sweep``: wandb-format sweep files run locally, offline, in parallel, resumably."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from hybrid import sweep
from hybrid.cli import parse_train_args
from hybrid.sweep import expand, load_sweep, plan, run_name, sweep_command

REPO = Path(__file__).resolve().parents[1]

# A CartPole run of a few hundred env steps: ~3 s in a fresh process, mostly imports.
TINY = """
  total_env_steps: {value: 300}
  eval_every: {value: 300}
  eval_episodes: {value: 2}
  log_every: {value: 300}
  workers: {value: 2}
  envs_per_worker: {value: 2}
  rollout_steps: {value: 5}
"""


def write_sweep(tmp_path: Path, body: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def grid_2x2(tmp_path: Path, steps: int = 300) -> Path:
    head = (
        "program: hybrid/cli.py\n"
        'command: ["${env}", hybrid, train, "${args}"]\n'
        "method: grid\n"
        "parameters:\n"
        "  scheduler: {values: [sync, async]}\n"
        "  seed: {values: [0, 1]}"
    )
    return write_sweep(tmp_path, head + TINY.replace("{value: 300}", f"{{value: {steps}}}", 1))


def counts(stdout: str) -> dict[str, int]:
    rows = [line.split() for line in stdout.splitlines()]
    return {r[0]: int(r[1]) for r in rows if len(r) >= 2 and r[0] in ("done", "skipped", "failed")}


def test_grid_runs_in_parallel_skips_finished_runs_and_resumes(tmp_path, capsys):
    spec, out = grid_2x2(tmp_path), tmp_path / "out"
    names = ["scheduler=async,seed=0", "scheduler=async,seed=1"]
    names += ["scheduler=sync,seed=0", "scheduler=sync,seed=1"]

    # A sweep stopped after its first two runs, with the third killed half-way:
    # its directory exists but has no summary.json.
    assert sweep_command([str(spec), "--jobs", "2", "--out", str(out), "--max-runs", "2"]) == 0
    assert counts(capsys.readouterr().out) == {"done": 2, "skipped": 0, "failed": 0}
    first = sorted(p.parent.name for p in out.glob("*/summary.json"))
    assert first == ["scheduler=sync,seed=0", "scheduler=sync,seed=1"]  # grid order: wandb's
    stamps = {n: (out / n / "summary.json").stat().st_mtime_ns for n in first}
    (out / "scheduler=async,seed=0").mkdir()
    (out / "scheduler=async,seed=0" / "metrics.jsonl").write_text('{"kind": "train"}\n')

    # Rerun: the two finished runs are skipped, the incomplete one is redone, the last one run.
    assert sweep_command([str(spec), "--jobs", "2", "--out", str(out)]) == 0
    assert counts(capsys.readouterr().out) == {"done": 2, "skipped": 2, "failed": 0}
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == names
    assert {n: (out / n / "summary.json").stat().st_mtime_ns for n in first} == stamps
    for name in names:
        config = json.loads((out / name / "config.json").read_text())
        assert f"scheduler={config['scheduler']},seed={config['seed']}" == name
        assert config["total_env_steps"] == 300 and config["progress"] is False

    # A finished sweep reruns nothing.
    stamps = {n: (out / n / "summary.json").stat().st_mtime_ns for n in names}
    assert sweep_command([str(spec), "--jobs", "2", "--out", str(out)]) == 0
    assert counts(capsys.readouterr().out) == {"done": 0, "skipped": 4, "failed": 0}
    assert {n: (out / n / "summary.json").stat().st_mtime_ns for n in names} == stamps

    # Edited constants must not pass the old runs off as this sweep's.
    assert sweep_command([str(grid_2x2(tmp_path, steps=600)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "total_env_steps=300" in err and "total_env_steps=600" in err


FAKE_TRAIN = """
import json, pathlib, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
if args["seed"] == "1":
    print("warming up", file=sys.stderr)
    sys.exit("RuntimeError: boom at seed 1")
out = pathlib.Path(args["out"])
out.mkdir(parents=True)
(out / "config.json").write_text(json.dumps({"seed": int(args["seed"])}))
(out / "summary.json").write_text(json.dumps({"final_eval_return": 9.0, "solved": False}))
"""


def test_failed_runs_are_reported_and_the_others_finish(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    monkeypatch.setattr(sweep, "TRAIN_COMMAND", [sys.executable, str(fake)])
    spec = write_sweep(tmp_path, "method: grid\nparameters:\n  seed: {values: [0, 1, 2]}\n")
    out = tmp_path / "out"

    assert sweep_command([str(spec), "--jobs", "2", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert counts(captured.out) == {"done": 2, "skipped": 0, "failed": 1}
    assert "seed=1: RuntimeError: boom at seed 1" in captured.err  # the last stderr line
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == ["seed=0", "seed=2"]

    # The failed run left an incomplete directory or none; a rerun retries only it.
    assert sweep_command([str(spec), "--out", str(out)]) == 1
    assert counts(capsys.readouterr().out) == {"done": 0, "skipped": 2, "failed": 1}


RANDOM = """\
    method: random
    run_cap: 6
    parameters:
      lr: {distribution: log_uniform_values, min: 1.0e-4, max: 1.0e-2}
      ent_coef: {min: 0.0, max: 0.05}
      hidden: {min: 16, max: 128}
      rollout_steps: {distribution: q_uniform, min: 4, max: 32, q: 4}
      gamma:
        distribution: categorical_w_probabilities
        values: [0.9, 0.99]
        probabilities: [0.2, 0.8]
      scheduler: {values: [sync, async, bounded]}
      workers: {value: 2}
"""


def test_random_search_draws_the_same_configs_for_the_same_seed(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, RANDOM))
    draws = expand(spec, seed=0)
    assert len(draws) == 6  # run_cap
    assert expand(spec, seed=0) == draws
    assert expand(load_sweep(spec.path), seed=0) == draws  # a later process, same draws
    assert expand(spec, seed=1) != draws
    assert expand(spec, max_runs=3, seed=0) == draws[:3]  # more runs keep the first ones
    for d in draws:
        assert 1e-4 <= d["lr"] <= 1e-2 and 0.0 <= d["ent_coef"] <= 0.05
        assert isinstance(d["hidden"], int) and 16 <= d["hidden"] <= 128
        assert isinstance(d["rollout_steps"], int) and d["rollout_steps"] % 4 == 0
        assert d["gamma"] in (0.9, 0.99) and d["scheduler"] in ("sync", "async", "bounded")
        assert d["workers"] == 2

    runs = plan(spec, tmp_path / "out", seed=0)
    assert len({r.name for r in runs}) == 6
    assert "workers" not in runs[0].name and "lr=" in runs[0].name  # only what varies
    assert runs[0].config.lr == draws[0]["lr"]  # the name states the exact value


def test_random_search_over_a_small_finite_space_runs_each_config_once(tmp_path):
    body = "method: random\nparameters:\n  seed: {values: [0, 1, 2]}\n"
    spec = load_sweep(write_sweep(tmp_path, body))
    assert sorted(d["seed"] for d in expand(spec, max_runs=10)) == [0, 1, 2]


def test_grid_semantics_follow_wandb(tmp_path):
    body = """\
        method: grid
        parameters:
          workers: {min: 2, max: 4}
          rollout_steps: {distribution: q_uniform, min: 4, max: 12, q: 4}
          scheduler: {values: [sync, sync, async]}
          env: {value: CartPole-v1}
        """
    spec = load_sweep(write_sweep(tmp_path, body))
    configs = expand(spec)
    # int_uniform includes max; q_uniform is np.arange(min, max, q), without max; duplicates
    # dropped; parameters sorted by name with the last one varying fastest.
    assert len(configs) == 3 * 2 * 2
    assert [c["workers"] for c in configs[:3]] == [2, 3, 4]
    assert sorted({c["rollout_steps"] for c in configs}) == [4, 8]
    assert configs[0] == {
        "env": "CartPole-v1",
        "rollout_steps": 4,
        "scheduler": "sync",
        "workers": 2,
    }
    assert expand(spec, max_runs=5) == configs[:5]


def test_run_names_are_readable_safe_and_unique():
    assert run_name({"seed": 1, "scheduler": "async", "lr": 0.001}, ["seed", "scheduler"]) == (
        "scheduler=async,seed=1"
    )
    assert run_name({"lr": 1e-05}, ["lr"]) == "lr=1e-05"
    assert run_name({"env": "CartPole-v1"}, []) == "run"
    slash, under = (
        run_name({"env": "ALE/Pong-v5"}, ["env"]),
        run_name({"env": "ALE_Pong-v5"}, ["env"]),
    )
    assert "/" not in slash and slash.startswith("env=ALE_Pong-v5-") and slash != under
    long = run_name({f"k{i}": "x" * 20 for i in range(10)}, [f"k{i}" for i in range(10)])
    assert len(long) <= 120


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep_command([str(grid_2x2(tmp_path)), "--out", str(out), "--dry-run"]) == 0
    stdout = capsys.readouterr().out
    assert "4 runs" in stdout and stdout.count(" new ") == 4
    assert not out.exists()


def test_ablation_file_plans_nine_runs_and_expands_under_wandb_agent(tmp_path):
    spec = load_sweep(REPO / "sweeps" / "scheduler_ablation.yaml")
    runs = plan(spec, tmp_path / "out")
    assert [r.name for r in runs[:4]] == [
        "scheduler=sync,seed=0",
        "scheduler=sync,seed=1",
        "scheduler=sync,seed=2",
        "scheduler=async,seed=0",
    ]
    assert len(runs) == 9 and not spec.notes
    cfg = runs[-1].config
    assert (cfg.scheduler, cfg.seed, cfg.env) == ("bounded", 2, "CartPole-v1")
    assert (cfg.total_env_steps, cfg.workers, cfg.track) == (100_000, 8, True)

    # What `wandb agent` runs for one grid point, built with wandb's own helpers.
    import yaml

    # wandb's internal helpers; skip rather than fail if a wandb release moves them.
    wandb_sweep_utils = pytest.importorskip(
        "wandb.sdk.launch.sweeps.utils", reason="this wandb release moved its sweep helpers"
    )

    doc = yaml.safe_load((REPO / "sweeps" / "scheduler_ablation.yaml").read_text())
    args = {
        k: {"value": v.get("value", (v.get("values") or [None])[-1])}
        for k, v in doc["parameters"].items()
    }
    macros = wandb_sweep_utils.create_sweep_command_args({"args": args})
    macros["env"] = ["/usr/bin/env"]
    argv = []
    for token in wandb_sweep_utils.create_sweep_command(doc["command"]):
        is_macro = token.startswith("${") and token.endswith("}")
        argv += macros[token[2:-1]] if is_macro else [token]
    assert argv[:3] == ["/usr/bin/env", "hybrid", "train"]
    online = parse_train_args(argv[3:])
    assert online.replace(out="", progress=True) == cfg.replace(out="", progress=True)


BAD = {
    "unknown field": (
        "method: grid\nparameters:\n  schedular: {values: [sync, async]}\n",
        "did you mean 'scheduler'",
    ),
    "empty grid": ("method: grid\nparameters:\n  seed: {values: []}\n", "values: [] is empty"),
    "bayes": (
        "method: bayes\nparameters:\n  lr: {min: 0.0001, max: 0.01}\n",
        "wandb sweep` + `wandb agent`",
    ),
    "unknown method": ("method: hyperband\nparameters:\n  seed: {values: [0]}\n", "grid or random"),
    "grid over continuous": (
        "method: grid\nparameters:\n  lr: {distribution: log_uniform_values, min: 0.001, max: 1}\n",
        "cannot enumerate the continuous log_uniform_values",
    ),
    "malformed yaml": ("method: grid\nparameters:\n  seed: {values: [0, 1}\n", "not valid YAML"),
    "invalid config": (
        "method: grid\nparameters:\n  scheduler: {values: [sync, hogwild]}\n",
        "run scheduler=hogwild: scheduler: unknown 'hogwild'",
    ),
    "bad type": ("method: grid\nparameters:\n  workers: {values: [2.5]}\n", "--workers"),
    "numbers as text": (
        "method: random\nrun_cap: 2\nparameters:\n  lr: {min: 1e-4, max: 1}\n",
        "write 1.0e-4",
    ),
    "random without a count": (
        "method: random\nparameters:\n  lr: {min: 0.0001, max: 0.01}\n",
        "--max-runs K or run_cap",
    ),
    "runner-owned field": ("method: grid\nparameters:\n  out: {value: somewhere}\n", "out: set by"),
    "field at the top level": (
        "method: grid\nseed: 1\nparameters:\n  lr: {value: 0.001}\n",
        "under parameters",
    ),
    "arguments macro": (
        'method: grid\ncommand: [hybrid, train, "${args_json}"]\nparameters:\n  seed: {value: 0}\n',
        "use ${args}",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    text, message = BAD[case]
    out = tmp_path / "out"
    assert sweep_command([str(write_sweep(tmp_path, text)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("hybrid sweep: error:")
    assert message in err
    assert not out.exists()


def test_missing_file_and_bad_flags_exit_2(tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep_command([str(tmp_path / "nope.yaml"), "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    spec = grid_2x2(tmp_path)
    for flags in (["--jobs", "0"], ["--max-runs", "0"], ["--bogus"]):
        assert sweep_command([str(spec), "--out", str(out), *flags]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists()


def test_module_entry_point_runs_offline(tmp_path):
    import subprocess

    env = dict(os.environ, WANDB_MODE="offline")
    spec = grid_2x2(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid.sweep",
            str(spec),
            "--dry-run",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "grid, 4 runs" in proc.stdout


# --- hostile and careless inputs -------------------------------------------------------------

HUGE_GRID = "method: grid\nparameters:\n  seed: {min: 0, max: 100000000000}\n"


def test_a_huge_grid_is_refused_by_its_size_without_expanding_it(tmp_path):
    import resource
    import subprocess

    def small_address_space() -> None:  # a grid that is expanded fails fast, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    spec = write_sweep(tmp_path, HUGE_GRID)
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.sweep", str(spec), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=small_address_space,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "100,000,000,001 runs" in proc.stderr and "--max-runs" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_max_runs_takes_the_first_runs_of_a_huge_grid(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, HUGE_GRID))
    runs = plan(spec, tmp_path / "out", max_runs=3)
    assert [r.name for r in runs] == ["seed=0", "seed=1", "seed=2"]
    assert [r.config.seed for r in runs] == [0, 1, 2]


def test_a_large_grid_parses_each_distinct_value_once_not_each_run(tmp_path, monkeypatch):
    from hybrid import cli

    calls = []
    real = cli.parse_train_args

    def counting(argv):
        calls.append(list(argv))
        return real(argv)

    monkeypatch.setattr(cli, "parse_train_args", counting)
    body = "method: grid\nparameters:\n  seed: {min: 0, max: 199}\n"
    body += "  scheduler: {values: [sync, async]}\n  lr: {values: [0.001, 0.0007]}\n"
    runs = plan(load_sweep(write_sweep(tmp_path, body)), tmp_path / "out")
    assert len(runs) == 800 and len({r.name for r in runs}) == 800
    assert len(calls) <= 8, f"{len(calls)} parses for 800 runs"
    last = runs[-1].config
    assert (last.seed, last.scheduler, last.lr) == (199, "async", 0.0007)  # typed as the CLI does
    assert isinstance(last.seed, int) and runs[0].config.out == str(tmp_path / "out" / runs[0].name)


def test_a_bad_value_deep_in_a_grid_is_still_named(tmp_path, capsys):
    body = "method: grid\nparameters:\n  seed: {min: 0, max: 99}\n"
    body += "  workers: {values: [2, 0]}\n"  # workers=0 fails TrainConfig.validate
    spec = write_sweep(tmp_path, body)
    assert sweep_command([str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "run seed=0,workers=0: workers" in err and len(err.strip().splitlines()) == 1


REFUSED_DRY = {
    "resume parameter": (
        "method: grid\nparameters:\n  resume: {value: runs/old}\n  seed: {values: [0, 1]}\n",
        "resume: ",
    ),
    "resume in command": (
        'method: grid\ncommand: [hybrid, train, --resume=runs/old, "${args}"]\n'
        "parameters:\n  seed: {values: [0, 1]}\n",
        "--resume",
    ),
    "duplicate parameter": (
        "method: grid\nparameters:\n  seed: {values: [0, 1]}\n  seed: {values: [2]}\n",
        "duplicate key 'seed' (line 4",
    ),
    "duplicate top-level key": (
        "method: grid\nparameters:\n  seed: {values: [0]}\nmethod: random\n",
        "duplicate key 'method' (line 4",
    ),
    "grid above the cap": (
        "method: grid\nparameters:\n  seed: {min: 0, max: 199}\n  lr: {min: 1, max: 60}\n",
        "12,000 runs",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_DRY))
def test_careless_sweeps_are_refused_up_front(tmp_path, capsys, case):
    text, message = REFUSED_DRY[case]
    out = tmp_path / "out"
    code = sweep_command([str(write_sweep(tmp_path, text)), "--out", str(out), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("hybrid sweep: error:")
    assert message in err
    assert not out.exists()


def test_max_runs_lifts_the_grid_cap(tmp_path, capsys):
    text = REFUSED_DRY["grid above the cap"][0].replace("max: 199}", "max: 9}", 1)
    spec = write_sweep(tmp_path, text.replace("max: 60}", "max: 1001}"))  # 10,010 runs
    assert sweep_command([str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert "10,010 runs" in capsys.readouterr().err
    argv = [str(spec), "--out", str(tmp_path / "o"), "--dry-run", "--max-runs", "10010"]
    assert sweep_command(argv) == 0
    assert "10010 runs" in capsys.readouterr().out


SLEEPY_TRAIN = """\
import os, sys, time
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--out="))
with open(os.path.join(os.path.dirname(out), "child.pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


def test_a_sigkilled_sweep_takes_its_running_train_with_it(tmp_path):
    import signal
    import subprocess
    import time

    fake = tmp_path / "sleepy_train.py"
    fake.write_text(SLEEPY_TRAIN)
    spec = write_sweep(tmp_path, "method: grid\nparameters:\n  seed: {values: [0]}\n")
    out = tmp_path / "out"
    runner = (
        "import sys; from hybrid import sweep\n"
        f"sweep.TRAIN_COMMAND = [sys.executable, {str(fake)!r}]\n"
        f"sys.exit(sweep.sweep_command([{str(spec)!r}, '--out', {str(out)!r}]))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", runner], cwd=REPO)
    child = 0
    try:
        deadline = time.monotonic() + 120
        while not (out / "child.pid").exists():
            assert parent.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.1)
        while not child:  # written but maybe not flushed yet
            child = int((out / "child.pid").read_text() or 0)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the run outlived its SIGKILLed sweep"
    finally:
        if parent.poll() is None:
            parent.kill()
        if child and _alive(child):
            os.kill(child, 9)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
