"""`pip install "surge-train[mlflow]"` alone is enough for `MLFlowLogger()` with its default local store:
the python blocks of docs/loggers.md run in a new virtual environment (no system site packages)
holding only this package with that extra (mlflow-skinny has no SQLite support of its own; the
extra brings SQLAlchemy and Alembic). About 2 minutes, mostly installing torch."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.slow
def test_the_mlflow_extra_alone_runs_the_loggers_page(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # a plain environment: nothing from this one's packages
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), f"{ROOT}[mlflow]"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
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
