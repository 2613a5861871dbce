"""The `if __name__ == "__main__":` guard. A process started with 'spawn' or 'forkserver' (a
DataLoader worker, a rank of strategy="ddp_spawn") imports the script again; a script whose
Trainer calls sit at its top level then runs them in that process too, which fails there (the
process cannot start processes of its own while it starts) in a long traceback per process.
This says so in one message, where it happens and in the parent's closing note."""

from __future__ import annotations

import ast
import multiprocessing as mp
import sys
from typing import Any

from ..errors import MisconfigurationError

GUARD = '`if __name__ == "__main__":`'


def check_not_importing(stage: str) -> None:
    """Refuse a stage reached while this process, started by 'spawn' or 'forkserver', imports the
    script (its top level ran the stage's call)."""
    if getattr(mp.current_process(), "_inheriting", False):
        raise MisconfigurationError(
            f"{stage}() was called while a new process (a DataLoader worker or a spawned rank) imported the "
            f"script: with the 'spawn' or 'forkserver' start method every new process imports the script "
            f"again, so its Trainer calls must sit under {GUARD} (or in a function called from there). "
            'For ranks, strategy="ddp" also avoids it (it runs the script as a script).'
        )


def start_method(loader: Any) -> str:
    """The start method of `loader`'s worker processes."""
    context = getattr(loader, "multiprocessing_context", None)
    if isinstance(context, str):
        return context
    if context is not None:
        return context.get_start_method()
    # (not mp.get_start_method(): that would fix the default for the process, and a later
    # set_start_method of the user's would fail; the first of the list is the default)
    return mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]


def unguarded_line() -> tuple[str, int] | None:
    """The script's file and the line at its top level that led to this call, when that line is not
    under the `__main__` guard (None: it is, or there is no script file)."""
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back  # type: ignore[assignment]
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if frame is None or path is None:
        return None
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    guarded = any(
        isinstance(node, ast.If)
        and _is_main_test(node.test)
        and node.lineno <= line <= (node.end_lineno or 0)
        for node in tree.body
    )
    return None if guarded else (path, line)


def _is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return sides in ({"__name__", "'__main__'"}, {"__name__", '"__main__"'})
