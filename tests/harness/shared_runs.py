"""Runs several tests compare against, made once per test session whichever worker asks first.

A module-scoped fixture shares a run between the tests of one file on one worker; `shared_run`
shares it between files and between pytest-xdist workers: the first caller makes it under a lock
file in the session's shared directory, the others wait for that and read its result. A run is
keyed by a name and its inputs (the command's arguments), so only identical runs are shared; the
tests read its files and must not change them (copy a checkpoint before damaging it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this session shares (its workers' base temps are inside)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, inputs: Sequence[Any], make: Callable[[Path], T]
) -> T:
    """`make(folder)`'s result for these inputs, made once this session in a folder of its own."""
    digest = hashlib.sha256(json.dumps([name, *map(str, inputs)]).encode()).hexdigest()[:16]
    folder = session_dir(tmp_path_factory) / "shared-runs" / f"{name}-{digest}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    result = folder / "result.pickle"
    with open(folder.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not result.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            folder.mkdir()
            value = make(folder)
            partial = result.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(value))
            partial.replace(result)
    return pickle.loads(result.read_bytes())
