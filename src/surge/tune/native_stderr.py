"""Lines that native code writes straight to file descriptor 2, filtered.

torch's profiler (kineto) prints `USDT: ... profiler_start` and `... profiler_stop` on stderr each
time a profile starts and stops, from C++ and at a severity above its errors, so neither Python's
`warnings`/`logging` nor `KINETO_LOG_LEVEL` can drop those two lines without dropping its errors
too. A tool that profiles many short pieces of work (the batch-size finder on the CPU) would flood
the terminal with them. `dropping_lines` sends fd 2 to a temporary file for the duration of a
short call, then writes back every line it caught except the ones matching the pattern: errors and
warnings still reach the user, only later by the length of that call.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress

PROFILER_MARKERS = re.compile(r"USDT:.*\] profiler_(start|stop)\s*$")


@contextmanager
def dropping_lines(pattern: re.Pattern[str] = PROFILER_MARKERS) -> Iterator[None]:
    """Run the body with fd 2 caught; then write back to fd 2 every caught line not matching `pattern`.

    Meant for short calls (a profiler's start or stop), not for a training loop: whatever the body
    prints on stderr, a progress bar included, appears only when it returns.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2 (a closed or replaced stderr): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            with suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not pattern.match(line))
            if kept:
                os.write(2, kept.encode())
