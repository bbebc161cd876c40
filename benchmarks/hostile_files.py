"""The hostile-file suite at full size: how hybrid's readers answer generated hostile files.

tests/test_hostile_files.py generates run directories, sweep YAML, cluster profiles and
checkpoints with hostile values or damaged bytes, and checks that each reader either reads
the file or refuses it with its one-line error. ``make test`` runs a few files of each
kind; this runs ``--examples`` of each (250: 1,000 files in all) in survey mode, where an
unexpected exception is counted by type and place instead of stopping the run, and prints
the outcomes per kind.

    python benchmarks/hostile_files.py                  # 250 files per kind
    python benchmarks/hostile_files.py --examples 50    # a quicker look

The draws are derandomized (hypothesis's fixed seed): the same command generates the same
files. Exit code 1 when any file ended in an unexpected exception (a DEFECT row).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES_PER_KIND = {  # the outcome line that stands for one generated file of each kind
    "profile": "cluster profiles",
    "sweep": "sweep YAML",
    "run dir (resume)": "run directories",
    "checkpoint": "checkpoints",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=250, help="files per kind")
    parser.add_argument("--log", type=Path, help="keep each file's outcome here (JSONL)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hybrid-hostile-bench-") as scratch:
        log = args.log or Path(scratch) / "outcomes.jsonl"
        log.unlink(missing_ok=True)
        env = os.environ | {
            "HYBRID_HOSTILE_EXAMPLES": str(args.examples),
            "HYBRID_HOSTILE_SURVEY": "1",
            "HYBRID_HOSTILE_LOG": str(log),
            "WANDB_MODE": "offline",
        }
        started = time.perf_counter()
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-n", "0",
             "-p", "no:cacheprovider", str(ROOT / "tests" / "test_hostile_files.py")],
            env=env, cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if tests.returncode != 0:
        print(tests.stdout[-4000:], tests.stderr[-2000:], sep="\n")
    outcomes = Counter((row["kind"], row["outcome"]) for row in rows)
    files = {name: sum(n for (k, _), n in outcomes.items() if k == kind)
             for kind, name in FILES_PER_KIND.items()}  # fmt: skip
    print(f"{sum(files.values()):,} generated files in {seconds:.0f} s: "
          + ", ".join(f"{n:,} {name}" for name, n in files.items()))  # fmt: skip
    print("\n| reader | outcome | files |\n| --- | --- | ---: |")
    for (kind, outcome), count in sorted(outcomes.items()):
        print(f"| {kind} | {outcome.replace('|', '/')} | {count:,} |")
    defects = sum(n for (_, outcome), n in outcomes.items() if outcome.startswith("DEFECT"))
    print(f"\nunexpected exceptions: {defects}; pytest exit code {tests.returncode}")
    return 1 if defects or tests.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
