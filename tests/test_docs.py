"""The API reference names every public name: ``__all__`` against the pages' ``:::`` blocks.

The site itself is built by ``make docs`` (``mkdocs build --strict``, in CI), which fails
on a ``:::`` block that does not resolve or a docstring that does not render.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

API = Path(__file__).parent.parent / "docs" / "api"


def documented(package: str) -> list[str]:
    """The names ``package.NAME`` given to mkdocstrings on the package's API page."""
    text = (API / f"{package}.md").read_text(encoding="utf-8")
    pattern = rf"^:::[ \t]+{package}\.([A-Za-z_][A-Za-z0-9_]*)[ \t]*$"
    return re.findall(pattern, text, flags=re.MULTILINE)


@pytest.mark.parametrize("package", ["hybrid", "federated", "multiagent"])
def test_api_page_has_every_public_name(package: str) -> None:
    public = set(importlib.import_module(package).__all__)
    names = documented(package)
    assert len(names) == len(set(names)), f"docs/api/{package}.md documents a name twice"
    assert sorted(public - set(names)) == [], f"public, not on docs/api/{package}.md"
    assert sorted(set(names) - public) == [], f"on docs/api/{package}.md, not in __all__"


def test_documented_modules_exist() -> None:
    # federated and multiagent export their modules (and multiagent its check); each
    # documented module must import under that name and carry a docstring.
    for package in ("federated", "multiagent"):
        for name in documented(package):
            if importlib.util.find_spec(f"{package}.{name}") is None:
                assert hasattr(importlib.import_module(package), name), f"{package}.{name}"
                continue
            assert importlib.import_module(f"{package}.{name}").__doc__, f"{package}.{name}"
