"""Every public name of `lightning.fabric.utilities` and the submodules scripts import from it
(used by utilities_points.py). Under Lightning `record_names()` lists them: what each module
defines or exports, its flags, and the underscore names scripts use. Given the record of that run
(a path), it imports each name of its list and records "ok", or "refused at use" for a name that
imports but refuses when called."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import TypeVar

import record

MODULES = ("", "imports", "seed", "rank_zero", "apply_func", "cloud_io", "types", "distributed", "data",
           "throughput", "exceptions", "warnings")  # fmt: skip
USED_PRIVATE = {"cloud_io": ["_load", "_atomic_save"], "types": ["_PATH", "_DEVICE", "_MAP_LOCATION_TYPE"],
                "seed": ["max_seed_value", "min_seed_value"]}  # fmt: skip


def public(short, module):
    names = set(getattr(module, "__all__", ())) | set(USED_PRIVATE.get(short, ()))
    for name, value in vars(module).items():
        own = getattr(value, "__module__", None) == module.__name__ and not isinstance(value, TypeVar)
        if (not name.startswith("_") and own and not inspect.ismodule(value)) or (
            short == "imports" and name.isupper() and name.startswith("_")
        ):
            names.add(name)
    return sorted(names)


def check(value):
    """ "ok", or how a stand-in that refuses when used (surge's: its doc says so) refuses."""
    doc = getattr(value, "__doc__", None) or ""  # a stand-in is a callable object, not a class
    if not (callable(value) and not inspect.isfunction(value) and doc.startswith("Refused")):
        return "ok"
    try:
        value()
    except Exception as err:  # noqa: BLE001
        return f"refused at use: {type(err).__name__}"
    return "not refused"


def record_names(listed_in: Path | None) -> None:
    """Record each name's import ("ok", "refused at use: ...", "missing") under its module, the names
    listed here (`listed_in` None: under Lightning) or in the record at `listed_in`."""
    if listed_in is None:
        listed = {}
        for short in MODULES:
            name = "lightning.fabric.utilities" + (f".{short}" if short else "")
            listed[name] = public(short, importlib.import_module(name))
    else:
        listed = {
            k: v for k, v in json.loads(listed_in.read_text()).items() if k.startswith("lightning.fabric.")
        }
    for name, names in listed.items():
        module = importlib.import_module(name)
        record.put(name, {n: check(getattr(module, n)) if hasattr(module, n) else "missing" for n in names})
    from lightning.fabric import Fabric  # imports; refused when constructed

    try:
        Fabric()
        record.put("Fabric()", "ok")
    except Exception as err:  # noqa: BLE001
        record.put("Fabric()", type(err).__name__)
