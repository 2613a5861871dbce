"""Lightning 2.6.6's modules and names (src/surge/lightning/names_data.py) are what the oracle's
environment has now (tests/oracle/lightning_names.py regenerates them), and the names surge provides
where it used to refuse them at import give Lightning's results (scripts/provided_names.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from oracle_env import lightning_python
from oracle_runs import run_both

HERE = Path(__file__).resolve().parent
GENERATED = HERE.parents[1] / "src" / "surge" / "lightning" / "names_data.py"


def test_the_committed_names_are_lightnings() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [str(lightning_python()), str(HERE / "lightning_names.py")],
        capture_output=True, text=True, check=True, env=env, cwd=HERE,
    )  # fmt: skip
    assert done.stdout == GENERATED.read_text(), "regenerate: python tests/oracle/lightning_names.py --write"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    return run_both("provided_names.py", tmp_path_factory.mktemp("provided"))


@pytest.mark.parametrize(
    "key",
    [
        "format_num",
        "init_args",
        "init_args_outside",
        "in_signature",
        "cuda",
        "torch_io",
        "registries",
        "removed",
    ],
)
def test_provided_names_behave_as_lightnings(runs, key: str) -> None:
    lightning, surge = runs
    assert key in lightning.record, lightning.output[-2000:]
    assert surge.record.get(key) == lightning.record[key], surge.output[-2000:]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
