"""What exists in Lightning 2.6.6: its modules and their top-level names with their kind, read from the
generated `names_data.py` (tests/oracle/lightning_names.py) the first time a name misses, never at import.

A name here that surge does not provide imports as a stand-in that refuses when used (`standins.py`); a
name that is not here fails as it fails under Lightning."""

from __future__ import annotations

import functools

ALIASES = (("pytorch_lightning", "lightning.pytorch"), ("lightning_fabric", "lightning.fabric"))


def canonical(fullname: str) -> str:
    """`pytorch_lightning.x` is `lightning.pytorch.x`, `lightning_fabric.x` is `lightning.fabric.x`."""
    for old, new in ALIASES:
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return fullname


@functools.cache
def _table() -> dict[str, dict[str, str]]:
    from .names_data import MODULES

    return {module: dict(item.split(":") for item in names.split()) for module, names in MODULES.items()}


def is_module(fullname: str) -> bool:
    """Whether Lightning 2.6.6 has the module `fullname` (any of its spellings)."""
    return canonical(fullname) in _table()


def kind(module: str, name: str) -> str | None:
    """The kind of `module.name` in Lightning 2.6.6: "c" class, "f" function, "m" module, "v" value;
    None when Lightning has no such name."""
    return _table().get(canonical(module), {}).get(name)


def modules() -> list[str]:
    """Every module of Lightning 2.6.6, by its `lightning.` name."""
    return list(_table())
