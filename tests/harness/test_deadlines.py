"""A failed deadline names the machine's load; any other failure is reported as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import subprocess, sys
import pytest

@pytest.mark.timed
def test_marked():
    assert False, "the job did not end in time"

def test_timeout():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.1)

def test_plain():
    assert 1 == 2
"""


def test_a_failed_deadline_says_the_load_and_a_plain_failure_does_not(tmp_path):
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import deadlines\n"
        "def pytest_configure(config):\n    config.pluginmanager.register(deadlines, 'surge-deadlines')\n"
        "    config.addinivalue_line('markers', 'timed: a deadline')\n"
    )
    (tmp_path / "test_probe.py").write_text(PROBE)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-o", "addopts=", "-rA", "test_probe.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = run.stdout
    sections = out.split("_____ ")
    said = {name: "this test asserts a deadline" in text for name in ("test_marked", "test_timeout", "test_plain")
            for text in sections if text.startswith(name)}  # fmt: skip
    assert said == {"test_marked": True, "test_timeout": True, "test_plain": False}, out
    assert "load average at" in out and "cores" in out
