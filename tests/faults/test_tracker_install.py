"""`pip install "surge-train[mlflow]"` alone is enough for `MLFlowLogger()` with its default local store:
the python blocks of docs/loggers.md run in a new virtual environment (no system site packages)
holding only this package with that extra (mlflow-skinny has no SQLite support of its own; the
extra brings SQLAlchemy and Alembic). The first build takes about 2 minutes, mostly installing torch;
the environment is then kept under ~/.cache/surge/, named after what it was built from (Python, the
constraints, this package's dependencies and the extra's), so a later run reinstalls only this
package into it (pip still checks every requirement of the extra) and any change to those
requirements builds a new one."""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _env_dir() -> Path:
    """Where the environment of these requirements is kept: a new name whenever one of them changes."""
    try:
        import tomllib  # Python 3.11+

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        requirements = [project["dependencies"], project["optional-dependencies"]["mlflow"]]
    except ImportError:  # then any change to pyproject.toml builds a new one
        requirements = [(ROOT / "pyproject.toml").read_text()]
    built_from = json.dumps(
        [list(sys.version_info[:3]), (ROOT / "constraints.txt").read_text(), *requirements]
    )
    return (
        Path.home()
        / ".cache"
        / "surge"
        / f"mlflow-extra-{hashlib.sha256(built_from.encode()).hexdigest()[:16]}"
    )


def _install(env_dir: Path) -> None:
    """This package with the mlflow extra into the kept environment, built first when missing (a marker
    file says a build finished: an interrupted one is built again from an empty folder)."""
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    built = env_dir / "built"
    with open(env_dir.parent / f".{env_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            venv.create(
                env_dir, with_pip=True, clear=True
            )  # a plain environment: nothing from this one's packages
        install = subprocess.run(
            [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"),
             f"{ROOT}[mlflow]"],
            capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        assert install.returncode == 0, install.stderr[-3000:]
        built.touch()


@pytest.mark.slow
def test_the_mlflow_extra_alone_runs_the_loggers_page(tmp_path):
    env_dir = _env_dir()
    _install(env_dir)
    python = env_dir / "bin" / "python"
    script = tmp_path / "page.py"
    script.write_text("\n".join(BLOCK.findall((ROOT / "docs" / "loggers.md").read_text())))
    run = subprocess.run(
        [str(python), str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    listed = subprocess.run([str(python), "-m", "pip", "list"], capture_output=True, text=True).stdout
    assert "mlflow-skinny" in listed and not re.search(r"^mlflow ", listed, re.MULTILINE)
    assert sys.prefix != str(env_dir)
