"""The docs read in short sentences: none over `LONGEST` words, and each page's mean under `MEAN`.

A sentence is counted in prose only: code blocks, tables and headings are left out, a code span or
a link counts as one word, and a bullet item or paragraph ends any sentence. Run this file as a
script to list a page's long sentences: `python tests/test_doc_sentences.py docs/lightning.md`.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])
LONGEST = 40  # words in one sentence
MEAN = 20  # words per sentence, a page's mean


def sentences(markdown: str) -> list[str]:
    """The prose sentences of a Markdown page (see the module's docstring for what counts)."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    found = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.)\s)|\n(?=#)|\n(?=\|)", text):
        block = block.strip()
        if not block or block.startswith(("|", "#")):
            continue
        block = re.sub(r"^(?:[-*+]|\d+\.)\s+", "", block)
        block = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", block)
        block = " ".join(re.sub(r"`[^`]*`", "X", block).split())
        found += [s for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z(`\"X*])", block) if len(s.split()) >= 3]
    return found


def words(sentence: str) -> int:
    return len(sentence.split())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_sentence_runs_long(page):
    long = [s for s in sentences(page.read_text()) if words(s) > LONGEST]
    assert not long, f"{len(long)} sentences over {LONGEST} words, e.g. {long[0][:160]!r}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_reads_in_short_sentences(page):
    assert statistics.mean(words(s) for s in sentences(page.read_text())) <= MEAN


if __name__ == "__main__":
    for page in [Path(p).resolve() for p in sys.argv[1:]] or PAGES:
        found = sentences(page.read_text())
        mean = statistics.mean(words(s) for s in found)
        long = [s for s in found if words(s) > LONGEST]
        print(
            f"{page.relative_to(ROOT)}: {len(found)} sentences, mean {mean:.1f} words, {len(long)} over {LONGEST}"
        )
        for s in long if sys.argv[1:] else []:
            print(f"  {words(s)}: {s}")
