"""Every python block in docs/*.md and the README runs, in order, in a fresh namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
PAGES = [
    p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if BLOCK.search(p.read_text())
]


def test_the_pages_with_code_are_found():
    assert {p.name for p in PAGES} >= {
        "README.md",
        "trainer.md",
        "precision.md",
        "devices.md",
        "distributed.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_snippets_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(BLOCK.findall(page.read_text())):
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
