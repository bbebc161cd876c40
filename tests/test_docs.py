"""The API reference names every public name: ``__all__`` against the pages' ``:::`` blocks.

The site itself is built by ``make docs`` (``mkdocs build --strict``, in CI), which fails
on a ``:::`` block that does not resolve or a docstring that does not render.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
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


# --- every Python block in the docs runs, or says why not -----------------------------------

ROOT = Path(__file__).parent.parent
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
"""The marker of a block that is not run, on the line just above its opening fence."""
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[A-Za-z0-9_+-]*)\s*$")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """``(line, code, reason)`` for each ```python block of a Markdown page; ``reason`` is
    the marker's when the block is not to be run, else None."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None or opening["lang"] == "":
            i += 1
            continue
        indent, start = len(opening["indent"]), i
        i += 1
        body = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1  # the closing fence
        if opening["lang"] != "python":
            continue
        marker = NOT_RUN.match(lines[start - 1]) if start > 0 else None
        blocks.append((start + 1, "\n".join(body) + "\n", marker["reason"] if marker else None))
    return blocks


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if "notebooks" not in p.relative_to(ROOT).parts]


PAGES_WITH_CODE = [p for p in doc_pages() if python_blocks(p.read_text(encoding="utf-8"))]


def test_the_block_finder_sees_markers_and_indented_fences() -> None:
    page = (
        "text\n```python\nx = 1\n```\n<!-- not run: needs a cluster -->\n```python\ny\n```\n"
        "- item\n\n    ```python\n    z = 2\n    ```\n```bash\nls\n```\n"
    )
    assert python_blocks(page) == [
        (2, "x = 1\n", None),
        (6, "y\n", "needs a cluster"),
        (11, "z = 2\n", None),
    ]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs_or_says_why_not(page: Path, tmp_path, monkeypatch) -> None:
    """The page's blocks run in order in one namespace (a reader's session), every run at
    a tiny budget with its run directory in a scratch folder; a block marked
    ``<!-- not run: REASON -->`` is skipped, and its reason must say something."""
    import matplotlib

    matplotlib.use("Agg")  # figures without a display
    import hybrid.trainer

    full_train = hybrid.trainer.train
    runs = iter(range(1000))

    def tiny_train(config=None, *, callbacks=None, **overrides):
        if not overrides.get("out") and not (config is not None and config.out):
            overrides["out"] = str(tmp_path / f"run{next(runs)}")
        tiny = {
            "total_env_steps": 200,
            "eval_every": 100,
            "eval_episodes": 1,
            "log_every": 100,
            "progress": False,
            "workers": min(overrides.get("workers", 2), 2),
        }
        return full_train(config, callbacks=callbacks, **{**overrides, **tiny})

    monkeypatch.setattr(hybrid.trainer, "train", tiny_train)
    monkeypatch.chdir(ROOT)  # paths in the examples are the repository's
    # a module of its own, as a reader's session is: dataclasses look their module up
    page_module = types.ModuleType("hybrid_docs_page")
    monkeypatch.setitem(sys.modules, page_module.__name__, page_module)
    namespace = page_module.__dict__
    ran = 0
    for line, code, reason in python_blocks(page.read_text(encoding="utf-8")):
        if reason is not None:
            assert len(reason) > 10, f"{page.name}:{line}: say why the block is not run"
            continue
        exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
        ran += 1
    assert ran or all(r for _, _, r in python_blocks(page.read_text(encoding="utf-8")))


def test_the_scheduler_attributes_the_docs_teach_exist() -> None:
    """An attribute a page tells scheduler authors to declare (``task_kind = ...``) must be
    one the loop reads: a misspelt one would be ignored silently by a user's class."""
    from hybrid import Scheduler

    pages = [
        ROOT / "docs" / "schedulers" / "your-own.md",
        ROOT / "docs" / "schedulers" / "fedbuff.md",
    ]
    pages += [ROOT / "docs" / "schedulers" / "fednova.md", ROOT / "docs" / "concepts.md"]
    pages.append(ROOT / "notebooks" / "_build.py")
    taught = set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        taught |= set(re.findall(r"`([a-z_]+_(?:kind|unit)|applies_alone)\b", text))
    assert taught >= {"task_kind", "staleness_unit", "applies_alone"}
    missing = sorted(name for name in taught if not hasattr(Scheduler, name))
    assert not missing, f"the docs teach attributes a Scheduler does not have: {missing}"
