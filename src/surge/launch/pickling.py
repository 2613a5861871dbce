"""Which part of an object does not pickle: the path to name in an error (`trainer.callbacks[2].lock`)."""

from __future__ import annotations

import pickle
from typing import Any

MAX_DEPTH = 12


def unpicklable(obj: Any, name: str, depth: int = 0) -> tuple[str, Exception] | None:
    """The deepest attribute, item or value path under `name` that fails to pickle, with its error;
    None if `obj` pickles."""
    try:
        pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return None
    except Exception as err:
        error = err
    if depth < MAX_DEPTH:
        for path, part in _parts(obj, name):
            found = unpicklable(part, path, depth + 1)
            if found is not None:
                return found
    return name, error


def _parts(obj: Any, name: str) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(f"{name}[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"{name}[{i}]", v) for i, v in enumerate(obj)]
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict):
        return [(f"{name}.{k}", v) for k, v in state.items()]
    return []
