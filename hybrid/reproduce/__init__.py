"""Paper checks: published results, each run under its source's settings beside its figure.

``hybrid reproduce --list`` names the entries; ``hybrid reproduce NAME`` runs one over
seeds and prints hybrid's IQM, mean ± std and runs solved beside the published figure with
a verdict, and writes the table as Markdown and LaTeX. Each entry is one small module in
``hybrid/reproduce/entries/``: its source and URL, the published numbers as the source
gives them, env id and version, budget, parallel envs, evaluation protocol, return
convention, seeds, the matching hybrid settings and the deviations hybrid still has.
"""

from __future__ import annotations

import importlib
import pkgutil

from hybrid.errors import ConfigError
from hybrid.reproduce.entry import Arm, ArmStats, Entry, Published, verdict

__all__ = ["Arm", "ArmStats", "Entry", "Published", "all_entries", "get_entry", "verdict"]


def all_entries() -> dict[str, Entry]:
    """Every entry by name, in name order (each module of ``entries/`` defines ``ENTRY``)."""
    package = importlib.import_module("hybrid.reproduce.entries")

    found: dict[str, Entry] = {}
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_"):
            continue
        entry = importlib.import_module(f"{package.__name__}.{module.name}").ENTRY
        if entry.name in found:
            raise ValueError(f"two entries are named {entry.name!r}")
        found[entry.name] = entry
    return dict(sorted(found.items()))


def get_entry(name: str) -> Entry:
    """The entry called ``name``; a one-line ConfigError naming the choices otherwise."""
    known = all_entries()
    if name not in known:
        raise ConfigError(f"name: unknown entry {name!r}; choose one of {', '.join(known)}")
    return known[name]
