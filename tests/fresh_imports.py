"""Import every surge module as the first surge module of a fresh interpreter, and report failures.

Run as a script (`python tests/fresh_imports.py SRC_DIR`); it prints one JSON object:
`{"modules": N, "failed": {module: last traceback line}}`.

A module imported first meets its package cycles unhidden: importing `surge.tune` alone must not
reach a partially initialised `surge.optim`, whatever order `import surge` happens to use. Each
module gets its own process, forked from a parent that has imported only third-party packages
(torch and what surge's modules import besides, found by one forked child that imports them all),
so no surge module is in `sys.modules` when the child starts and the third-party cost is paid once. Children run a few at a time; their bytecode is cached under a temporary `pycache_prefix`
after the third-party packages are loaded, so the first child compiles a surge module and the rest
read it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

OURS = ("surge", "lightning", "pytorch_lightning")  # the Lightning names map onto surge's modules


def surge_modules(src: Path) -> list[str]:
    """Every module under src/surge, packages included, `__main__` modules left out (they run)."""
    names = []
    for path in sorted((src / "surge").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _fork(target, *args) -> tuple[int, int]:
    """(pid, read end of a pipe) of a child that runs `target(write_fd, *args)` and exits with its code."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        code = 1
        try:
            code = target(write, *args)
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _drain(read: int) -> str:
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    return b"".join(chunks).decode(errors="replace")


def _import_first(write: int, name: str) -> int:
    gc.disable()  # a short-lived child: no collection walks (and copies) the parent's pages
    try:
        importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - every failure is the report
        os.write(write, traceback.format_exc().strip().splitlines()[-1].encode()[:4000])
        return 1
    return 0


def _third_party(write: int, modules: list[str], src: str) -> int:
    for name in modules:
        importlib.import_module(name)
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if not name.startswith(OURS) and not file.startswith(src) and name != "__main__":
            found.append(name)
    os.write(write, json.dumps(found).encode())
    return 0


def _preload(modules: list[str], src: Path) -> None:
    """The third-party modules surge's modules import (torch, jsonargparse, torchmetrics for the
    Lightning names, ...), found by one child that imports every surge module, imported here once."""
    pid, read = _fork(_third_party, modules, str(src / "surge"))
    found = json.loads(_drain(read) or "[]")
    os.waitpid(pid, 0)
    for name in found:
        if name not in sys.modules:  # one that imports only in its users' order is left to them
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    gc.freeze()  # the children's collections leave the parent's objects (and their pages) alone


def check(src: Path, jobs: int = 2) -> dict[str, object]:
    sys.path.insert(0, str(src))
    modules = surge_modules(src)
    assert not any(m.startswith(OURS) for m in sys.modules), "surge was imported before the check"
    _preload(modules, src)
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as cache:
        sys.pycache_prefix, sys.dont_write_bytecode = cache, False
        running: dict[int, tuple[str, int]] = {}
        pending = list(modules)
        while pending or running:
            while pending and len(running) < jobs:
                name = pending.pop(0)
                pid, read = _fork(_import_first, name)
                running[pid] = (name, read)
            pid, status = os.wait()
            name, read = running.pop(pid)
            message = _drain(read)
            if status != 0:
                failed[name] = message or f"exit status {status}"
    return {"modules": len(modules), "failed": failed}


if __name__ == "__main__":
    print(json.dumps(check(Path(sys.argv[1]).resolve(), jobs=int(sys.argv[2]) if len(sys.argv) > 2 else 2)))
