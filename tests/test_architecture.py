"""The layering DESIGN.md promises, checked on the source: nothing below the Trainer reads or
writes its private attributes, and no source file grows past what one concept needs."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "surge"
# `trainer._x`, `self.trainer._x`, `module._trainer._x`, `t._x`: a private attribute of a Trainer.
PRIVATE_READ = re.compile(r"(?:^|[^\w])(?:trainer|_trainer|t|tr)\._[A-Za-z]\w*")
MAX_LINES = {"trainer.py": 335}  # its arguments are declared in TrainerConfig (config/declared.py)
DEFAULT_MAX_LINES = 400


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_below_the_trainer_reaches_into_it():
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sources()
        if path.name != "trainer.py" or path.parent != SRC
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_READ.search(line)
    ]
    assert not found, "private Trainer attributes used outside trainer.py:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_for():
    for line in (
        "x = trainer._cfg",
        "self.trainer._publish(m)",
        "if t._module is None:",
        "m._trainer._hooks",
    ):
        assert PRIVATE_READ.search(line), line
    for line in ("trainer.global_step", "batch._asdict()", "self._trainer = trainer", "torch._C"):
        assert not PRIVATE_READ.search(line), line


def test_no_source_file_is_over_its_size():
    too_long = {
        str(path.relative_to(SRC)): lines
        for path in sources()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES.get(path.name, DEFAULT_MAX_LINES)
    }
    assert not too_long, (
        f"files over {DEFAULT_MAX_LINES} lines (trainer.py: {MAX_LINES['trainer.py']}): {too_long}"
    )
