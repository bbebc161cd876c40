"""The version is written once; CITATION.cff and CHANGELOG.md agree with it.

Building and installing the wheel is checked by `.ci/wheel_smoke.sh` (`make wheel-smoke`),
not here: it takes minutes and a fresh virtual environment.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import hybrid
from hybrid.cli import main

ROOT = Path(__file__).parent.parent


def test_hybrid_version_prints_the_package_version(capsys):
    assert re.fullmatch(r"\d+\.\d+\.\d+", hybrid.__version__)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"hybrid {hybrid.__version__}\n"


def test_the_build_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]  # not a second copy
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "hybrid.__version__"}


def test_citation_and_changelog_name_this_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # what CFF 1.2.0 requires, and what a citation of a software release needs
    assert citation["cff-version"] == "1.2.0"
    assert {"message", "title", "authors", "abstract"} <= set(citation)
    assert all("name" in a or "family-names" in a for a in citation["authors"])
    assert citation["license"] == "Apache-2.0"
    assert citation["version"] == hybrid.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    released = re.search(rf"^## \[{re.escape(hybrid.__version__)}\] - (\S+)$", changelog, re.M)
    assert released is not None, "CHANGELOG.md has no section for this version"
    assert citation["date-released"] == released.group(1)
