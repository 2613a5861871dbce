"""The package layout: the top of src/surge holds the public API and the composition; each other
concept is a package; the import paths the docs gave before the packages still work."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from surge._moved import MOVED

SRC = Path(__file__).resolve().parents[1] / "src" / "surge"
TOP_LEVEL = {
    "__init__.py", "__main__.py", "_moved.py", "assembly.py", "datamodule.py", "demo.py", "errors.py",
    "rank_zero.py", "safe_files.py", "seed.py", "version.py",
}  # fmt: skip


def test_the_top_level_holds_only_the_api_and_the_composition():
    found = {p.name for p in SRC.glob("*.py")}
    assert found == TOP_LEVEL, (
        f"new at the top: {sorted(found - TOP_LEVEL)}; gone: {sorted(TOP_LEVEL - found)}"
    )
    assert len(found) <= 15


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_import_path_is_the_moved_module_itself(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_old_paths_cost_nothing_until_imported():
    code = f"import sys, surge; print(sorted(m for m in sys.modules if m in {sorted(MOVED)!r}))"
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.strip() == "[]"


def test_from_an_old_path_imports_its_names():
    from surge.cache import CacheMismatchError
    from surge.sharded import consolidate

    assert CacheMismatchError is importlib.import_module("surge.data.cached").CacheMismatchError
    assert consolidate is importlib.import_module("surge.checkpoint.sharded").consolidate


def test_every_class_of_the_trainer_lives_in_its_package():
    import surge

    ours = [c for c in surge.Trainer.__mro__ if c.__module__.startswith("surge")]
    assert len(ours) >= 2 and all(c.__module__.split(".")[:2] == ["surge", "trainer"] for c in ours), [
        f"{c.__module__}.{c.__qualname__}" for c in ours
    ]
