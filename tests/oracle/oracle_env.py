"""Real Lightning, the oracle: a virtual environment holding `lightning==2.6.6` beside this machine's
torch (`--system-site-packages`, so both frameworks run on the same torch build).

`python tests/oracle/oracle_env.py` creates it (CI does, before the tests); `lightning_python()` returns its
interpreter, creating it first when it is missing. The location is `$SURGE_LIGHTNING_VENV`, else
`~/.cache/surge/lightning-2.6.6`, shared by every checkout on the machine."""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path

LIGHTNING = "lightning==2.6.6"
ROOT = Path(__file__).resolve().parents[2]


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "surge" / LIGHTNING.replace("==", "-")
    return Path(os.environ.get("SURGE_LIGHTNING_VENV", default))


def _ready(python: Path, import_it: bool = False) -> bool:
    """Whether `python` has the pinned Lightning: its installed version (0.1 s), or, with `import_it`,
    the version the imported package reports (8 s of CPU: done once, after an install)."""
    if not python.exists():
        return False
    version = LIGHTNING.split("==")[1]
    if import_it:
        probe = f"import lightning, sys; sys.exit(lightning.__version__ != {version!r})"
    else:
        probe = f"import importlib.metadata as m, sys; sys.exit(m.version('lightning') != {version!r})"
    return subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0


@functools.cache
def lightning_python() -> Path:
    """The oracle's interpreter; the environment is created (once, under a lock) when missing."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    if _ready(python):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready(python):
            subprocess.run(
                [sys.executable, "-m", "venv", "--system-site-packages", "--clear", str(venv)], check=True
            )
            pip = [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), LIGHTNING]
            subprocess.run(pip, check=True)
    if not _ready(python, import_it=True):
        raise RuntimeError(f"the Lightning oracle at {venv} does not import {LIGHTNING}")
    return python


if __name__ == "__main__":
    python = lightning_python()
    if not _ready(python, import_it=True):  # CI's check before the tests: it imports, once
        raise SystemExit(f"the Lightning oracle at {venv_dir()} does not import {LIGHTNING}")
    print(python)
