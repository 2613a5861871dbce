"""`pip install "surge[all]"` installs every optional extra; `test` holds what each one needs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info < (3, 11):
    pytest.skip("tomllib is Python 3.11+", allow_module_level=True)
import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
OWN = {"all", "test", "bench"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_all_names_every_optional_extra():
    (line,) = EXTRAS["all"]
    named = set(re.fullmatch(r"surge\[(.*)\]", line).group(1).split(","))
    assert named == set(EXTRAS) - OWN


def test_the_test_extra_installs_what_every_extra_needs():
    # mlflow-skinny (the client) is what users need; the tests need the server: full mlflow.
    wanted = set().union(*(_names(EXTRAS[e]) for e in set(EXTRAS) - OWN)) - {"mlflow-skinny"}
    assert wanted <= _names(EXTRAS["test"])
    assert "mlflow" in _names(EXTRAS["test"])
