"""Ports for the jobs and servers the tests start, safe with several test processes at once.

`socket.bind(0)` then `close()` hands out a port from the kernel's ephemeral range, and between the
close and the job's own bind (seconds: a Python process importing torch) any outgoing connection on
the machine, or another test process doing the same, may take it. Ports here come from a band below
the ephemeral range (outgoing connections never get those) and above SLURM's MASTER_PORTs (15000 +
job id), and each is reserved with a lock file that its process holds until it exits: no other test
process, of this session (pytest-xdist workers) or of another on the machine, is given it meanwhile.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

LOCKS = Path(tempfile.gettempdir()) / "surge-test-ports"
_held: list[int] = []  # the lock files' descriptors, open until this process exits


def _band() -> tuple[int, int]:
    """10000-15000 when the ephemeral range starts above it (Linux's default: 32768); else bind(0)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (10000, 15000) if low >= 15000 else (0, 0)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on and no other test process will be given."""
    low, high = _band()
    if high <= low:
        return _ephemeral()
    LOCKS.mkdir(exist_ok=True)
    start = random.randrange(low, high)
    for i in range(high - low):
        port = low + (start - low + i) % (high - low)
        fd = os.open(LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _bindable(port):
            _held.append(fd)
            return port
        os.close(fd)
    return _ephemeral()
