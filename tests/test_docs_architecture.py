"""docs/architecture.md matches the code: every file it names exists, and every object in its
table is defined in the file (or folder) the table says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_every_named_file_exists():
    named = set(re.findall(r"`(src/surge/[\w/]+(?:\.py)?/?)`", PAGE)) | set(
        re.findall(r"`(tests/[\w/]+\.py)`", PAGE)
    )
    assert named, "the page names no files"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing


def test_every_object_in_the_table_is_defined_where_it_says():
    rows = [line for line in PAGE.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    for row in rows:
        objects_cell, file_cell = row.split("|")[1:3]
        where = re.search(r"`(src/surge/[\w/]+(?:\.py)?/?)`", file_cell).group(1)
        path = ROOT / where
        text = "".join(p.read_text() for p in path.rglob("*.py")) if path.is_dir() else path.read_text()
        for name in re.findall(r"`(\w+)`", objects_cell):
            assert re.search(rf"^\s*(class|def) {name}\b", text, re.M), f"{name} is not defined in {where}"
