"""Every Trainer argument's meaning is written once (src/surge/config/meanings.py) and shown where
people look: `help(surge.Trainer)` (the docstring, generated into the source), the tables in
docs/trainer.md, and `surge fit --help`, grouped the same way, with only public classes offered."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import pydoc
import re
import sys
from pathlib import Path

import pytest

import surge
from surge.arguments import TrainerConfig
from surge.config.meanings import GROUPS, meaning, names

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("trainer_arguments", ROOT / "docs" / "trainer_arguments.py")
trainer_arguments = importlib.util.module_from_spec(spec)
sys.modules["trainer_arguments"] = trainer_arguments
spec.loader.exec_module(trainer_arguments)


def flat(text: str) -> str:
    """`text` on one line, as a help formatter may wrap it (at spaces, or after a hyphen)."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


def test_every_argument_has_one_meaning_and_nothing_else_has_one():
    fields = [f.name for f in dataclasses.fields(TrainerConfig) if f.init]
    assert sorted(names()) == sorted(fields)  # also: no name in two groups
    assert len(names()) == len(set(names()))


def test_meanings_are_short_sentences():
    for name in names():
        for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z\"-])", meaning(name)):
            assert len(sentence.split()) < 20, (name, sentence)


def test_the_docstring_and_the_docs_tables_are_generated_from_the_meanings():
    assert trainer_arguments.stale() == []  # else: python docs/trainer_arguments.py


def test_help_shows_every_argument_with_its_default_and_meaning():
    shown = pydoc.render_doc(surge.Trainer, renderer=pydoc.plaintext)
    assert all(f"{title}:" in shown for title, _ in GROUPS)  # what help() prints
    text = flat(inspect.getdoc(surge.Trainer) or "")
    for p in inspect.signature(surge.Trainer).parameters.values():
        assert f"`{p.name}: " in text and f" = {p.default!r}`: {flat(meaning(p.name))}" in text, p.name
    titles = [text.index(f"{title}:") for title, _ in GROUPS]
    assert titles == sorted(titles)


def test_the_docs_table_names_each_argument_in_its_group():
    page = (ROOT / "docs" / "trainer.md").read_text()
    for title, arguments in GROUPS:
        table = page.split(f"**{title}**", 1)[1].split("\n\n", 2)[1]
        assert [row.split("`")[1] for row in table.splitlines()[2:]] == list(arguments)


@pytest.fixture(scope="module")
def fit_help() -> str:
    pytest.importorskip("jsonargparse", reason="surge fit needs the cli extra")

    from contextlib import redirect_stdout
    from io import StringIO

    from surge.cli import main

    out = StringIO()
    with redirect_stdout(out):
        assert main(["fit", "--help"]) == 0
    return out.getvalue()


def test_fit_help_groups_the_trainer_options_as_the_docs_with_their_meanings(fit_help):
    starts = [fit_help.index(f"\nTrainer: {title.lower()}:\n") for title, _ in GROUPS]
    assert starts == sorted(starts)
    ends = [*starts[1:], len(fit_help)]
    for (_, arguments), start, end in zip(GROUPS, starts, ends, strict=True):
        section = fit_help[start:end]
        for name, text in arguments.items():
            assert f"--trainer.{name} " in section, name
            assert flat(text) in flat(section), name


def test_fit_help_has_a_short_usage_and_offers_only_public_classes(fit_help):
    usage = fit_help.split("\n\n", 1)[0]
    assert "[--trainer.NAME VALUE]" in usage and "--trainer.max_epochs" not in usage
    assert len(usage.splitlines()) <= 8
    assert "surge.callbacks.ModelCheckpoint" in fit_help and "surge.loggers.CSVLogger" in fit_help
    for internal in ("GoodputWatch", "SaveConfig", "StopAfterSteps", "ExitAfterTuning", "CompileWatch",
                     "CompiledCalls", "Checkpointed", "ddp_names", "ProcessGroupStrategy"):  # fmt: skip
        assert internal not in fit_help, internal
