"""How the command line shows surge's own errors: the message, after the lines of the user's code
that led to it, without surge's internal frames (a `SurgeError` names the problem and the fix; the
frames inside surge rarely help). `SURGE_TRACEBACK=1` shows Python's full traceback instead.
Any other exception (the user's own, torch's) keeps its full traceback, as `python script.py`."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import SurgeError

FULL_TRACEBACK = "SURGE_TRACEBACK"
_SURGE = str(Path(__file__).parents[1]) + os.sep  # the package's files, as its frames name them
T = TypeVar("T")


def errors_shown_briefly(run: Callable[[], T]) -> T | int:
    """`run()`; a SurgeError escaping it is written to stderr briefly (see the module) and gives exit
    status 1, unless SURGE_TRACEBACK is set (then it propagates, with its full traceback)."""
    try:
        return run()
    except SurgeError as err:
        if os.environ.get(FULL_TRACEBACK, "") not in ("", "0"):
            raise
        sys.stderr.write(brief(err))
        return 1


def brief(err: BaseException) -> str:
    """The frames of `err`'s traceback outside surge (and Python's runpy), then its message and the
    cause it was raised from (type and message), then how to see everything."""
    frames = [
        f for f in traceback.extract_tb(err.__traceback__)
        if not f.filename.startswith(_SURGE) and not f.filename.startswith("<frozen")
    ]  # fmt: skip
    lines = ["Traceback (most recent call last, surge's own frames hidden):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(err), err)
    cause = err.__cause__
    if cause is not None:
        lines.append(
            f"(raised from {''.join(traceback.format_exception_only(type(cause), cause)).strip()})\n"
        )
    lines.append(f"({FULL_TRACEBACK}=1 shows the full traceback)\n")
    return "".join(lines)
