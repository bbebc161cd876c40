"""A built-in scheduler's knob is one field of its Settings dataclass: ``hybrid train --help``
shows it with that field's docstring, with no second declaration in TrainConfig."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hybrid.config import TrainConfig, _with_built_in_scheduler_fields
from hybrid.flags import parse_train_args
from hybrid.scheduler_settings import BUILT_IN_SETTINGS, config_fields, field_docs


def one_line(help_text: str) -> str:
    """tyro's help without its box and line wrapping: one space between words."""
    return " ".join(help_text.replace("│", " ").split())


def first_sentence(doc: str) -> str:
    return doc.split(". ")[0]


def train_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "160")
    with pytest.raises(SystemExit) as exit_:
        parse_train_args(["--help"])
    assert exit_.value.code in (0, None)
    return one_line(capsys.readouterr().out)


BUILT_IN_FIELDS = [
    (scheduler, f.name)
    for scheduler, settings_class in BUILT_IN_SETTINGS.items()
    for f in config_fields(settings_class)
]


def test_every_built_in_field_has_a_docstring() -> None:
    assert len(BUILT_IN_FIELDS) >= 9  # bounded 2, hybrid 2, fedavg 5
    for scheduler, name in BUILT_IN_FIELDS:
        assert field_docs(BUILT_IN_SETTINGS[scheduler]).get(name), f"{scheduler}: {name}"


def test_help_shows_each_built_in_field_with_its_settings_docstring(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = train_help(capsys, monkeypatch)
    for scheduler, name in BUILT_IN_FIELDS:
        doc = first_sentence(field_docs(BUILT_IN_SETTINGS[scheduler])[name])
        flag = re.search(rf"--{name.replace('_', '-')}[ ,]", text)
        assert flag, name
        entry = text[flag.start() : text.index("(default:", flag.start())]  # the flag's own
        assert f"{scheduler}: {doc}" in entry, (entry, doc)


def test_help_lists_each_scheduler_field_in_its_section() -> None:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    # bounded's after the server optimizer, hybrid's opening the actor-learner section,
    # fedavg's after the client count
    assert names[names.index("server_beta2") + 1 :][:2] == ["staleness_bound", "staleness_aware_lr"]
    assert names[names.index("inject_worker_faults") + 1 :][:2] == [
        "learner_batch",
        "max_policy_lag",
    ]
    assert names[names.index("clients") + 1 :][:5] == [
        f.name for f in config_fields(BUILT_IN_SETTINGS["fedavg"])
    ]


def test_a_per_client_setting_is_one_number_on_the_command_line() -> None:
    # FedAvgSettings takes one dropout probability per client (from the client profiles);
    # the flag takes one for every client
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    assert types["client_dropout"] == types["client_availability"] == "float"
    assert parse_train_args(["--client-dropout", "0.25"]).client_dropout == 0.25


def test_a_field_added_to_a_settings_class_reaches_help_with_its_doc(tmp_path: Path) -> None:
    # a knob added to BoundedSettings (a subclass here, standing in for an edit of the file):
    # TrainConfig is rebuilt in a fresh interpreter, as at the next start of `hybrid train`
    (tmp_path / "knob_settings.py").write_text(
        textwrap.dedent('''
            from dataclasses import dataclass

            from hybrid.scheduler_settings import BoundedSettings


            @dataclass(frozen=True)
            class WithExampleKnob(BoundedSettings):
                example_knob: int = 3
                """How many widgets each clock polishes.

                A second paragraph, kept apart."""
        ''')
    )
    script = textwrap.dedent("""
        import importlib, sys
        import hybrid.scheduler_settings as settings
        from knob_settings import WithExampleKnob
        settings.BUILT_IN_SETTINGS["bounded"] = WithExampleKnob
        import hybrid.config, hybrid.flags
        importlib.reload(hybrid.config)
        importlib.reload(hybrid.flags)
        assert hybrid.flags.parse_train_args(["--example-knob", "5"]).example_knob == 5
        hybrid.flags.parse_train_args(["--help"])
    """)
    env = dict(os.environ, COLUMNS="160", PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    text = one_line(proc.stdout)
    assert "--example-knob INT bounded: How many widgets each clock polishes." in text
    assert "A second paragraph, kept apart. (default: 3)" in text
    assert "bounded: SSP bound s:" in text  # the inherited fields keep their docs


def test_a_redeclared_settings_field_is_refused() -> None:
    # a second declaration would carry a second default and docstring, free to drift
    class Config:
        __annotations__ = {"staleness_bound": "int"}
        staleness_bound = 4

    with pytest.raises(TypeError, match="staleness_bound: a field of BoundedSettings"):
        _with_built_in_scheduler_fields(after={})(Config)


def test_field_docs_read_the_source() -> None:
    @dataclasses.dataclass
    class Local:
        plain: int = 1
        """One line."""
        wrapped: str = "x"
        """Two lines
        joined, and

        a paragraph."""
        undocumented: float = 0.0

    assert field_docs(Local) == {
        "plain": "One line.",
        "wrapped": "Two lines joined, and\n\na paragraph.",
    }
    made = dataclasses.make_dataclass("Made", [("knob", int, dataclasses.field(default=1))])
    assert field_docs(made) == {}  # no source: no docs, and no error
