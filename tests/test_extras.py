"""`pip install "surge-train[all]"` installs every optional extra; `test` holds what each one needs; every
install line the README, the docs and the error messages show names the distribution pyproject.toml builds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info < (3, 11):
    pytest.skip("tomllib is Python 3.11+", allow_module_level=True)
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
NAME = PROJECT["name"]
OWN = {"all", "test", "test-services", "bench"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_all_names_every_optional_extra():
    (line,) = EXTRAS["all"]
    named = set(re.fullmatch(rf"{NAME}\[(.*)\]", line).group(1).split(","))
    assert named == set(EXTRAS) - OWN


def test_the_test_extras_install_what_every_extra_needs():
    # mlflow-skinny (the client) is what users need; the tests need the server: full mlflow.
    wanted = set().union(*(_names(EXTRAS[e]) for e in set(EXTRAS) - OWN)) - {"mlflow-skinny"}
    assert wanted <= _names(EXTRAS["test"]) | _names(EXTRAS["test-services"])
    assert "mlflow" in _names(EXTRAS["test-services"]) and "surge-train" in _names(EXTRAS["test-services"])
    heavy = {"mlflow", "wandb", "transformers", "sqlalchemy", "alembic"}  # the plain test command stays light
    assert not heavy & _names(EXTRAS["test"])


def _extra_mentions(text: str) -> list[tuple[str, str]]:
    """(distribution, extras) of every `pip install NAME[extra,...]` or `` `NAME[extra,...]` `` whose
    extras are all this project's."""
    found = re.findall(r"(?:pip install (?:-e )?[\"']?|`)([\w.-]+)\[([a-z,]+)\]", text)
    return [(dist, extras) for dist, extras in found if set(extras.split(",")) <= set(EXTRAS)]


def test_the_readme_installs_the_distribution_pyproject_builds():
    readme = (ROOT / "README.md").read_text()
    assert NAME != "surge"  # that name on PyPI belongs to an unrelated project
    assert f'pip install "{NAME}[all]"' in readme
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme  # the CPU-only torch build


def test_every_install_line_names_the_distribution():
    texts = {p: p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    texts |= {p: p.read_text() for p in (ROOT / "src").rglob("*.py")}
    mentions = {p.relative_to(ROOT).as_posix(): _extra_mentions(t) for p, t in texts.items()}
    assert sum(map(len, mentions.values())) >= 15  # the pattern finds them
    wrong = {p: m for p, found in mentions.items() for m in found if m[0] not in (NAME, ".")}  # . = a clone
    assert not wrong, f"install lines naming another distribution than {NAME!r}: {wrong}"


def test_a_missing_package_message_installs_what_the_extra_installs():
    from surge.errors import EXTRA_PACKAGES, install_hint

    assert set(EXTRA_PACKAGES) == set(EXTRAS) - OWN - {"docs"}
    for extra, packages in EXTRA_PACKAGES.items():
        assert _names(packages.replace("'", "").split()) == _names(EXTRAS[extra]), extra
        hint = install_hint(extra)
        assert hint.startswith(f"pip install {packages} ") and f'-e ".[{extra}]"' in hint
    # nothing a user is told to run at run time asks the registry for surge-train (not on it yet)
    said = "".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert f"pip install '{NAME}[" not in said and f'pip install "{NAME}[' not in said
