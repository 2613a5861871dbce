"""surge's str enum (config/str_enum.py) answers as the one Lightning's enums derive from
(`lightning_utilities.core.enums.StrEnum`), which `from surge import Trainer` no longer imports."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from lightning_utilities.core.enums import StrEnum as TheirStrEnum

from surge.config.str_enum import StrEnum as OurStrEnum


def members(base: type) -> type:
    return base("Kind", {"t1": "T-1", "t2": "T-2", "fit": "fit"})


def answers(base: type) -> list:
    kind = members(base)
    out = [
        kind("T-1") == kind.t1,
        kind.t1 == "t-1",
        kind.t1 == "T-2",
        kind.fit == "FIT",
        hash(kind.fit) == hash("fit"),
    ]
    out += [
        len({kind.t1, kind.t2, kind.fit}),
        kind.t1 in {"t-1"},
        str(kind.fit.value),
        isinstance(kind.fit, str),
    ]
    for value, source in [
        ("T1", "key"),
        ("t-2", "value"),
        ("T-2", "value"),
        ("fit", "any"),
        ("t-3", "any"),
        ("t1", "value"),
    ]:
        try:
            out.append(kind.from_str(value, source=source).name)
        except ValueError as err:
            out.append(str(err))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            found = kind.try_from_str(value, source=source)
        out.append((found.name if found is not None else None, [str(w.message) for w in said]))
    return out


def test_it_answers_as_lightning_utilities_str_enum():
    assert answers(OurStrEnum) == answers(TheirStrEnum)


@pytest.mark.parametrize("name", ["surge.config.clip_algorithm", "surge.loops.run_status"])
def test_surges_enums_do_not_import_lightning_utilities(name):
    code = f"import sys, {name}; print('lightning_utilities' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )
