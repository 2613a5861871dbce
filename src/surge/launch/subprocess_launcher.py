"""Starting the other processes of a one-machine job: `python train.py` with `devices=N`.

The current process becomes rank 0; surge starts ranks 1..N-1 running the same command, with
the env:// variables set. Children die with the parent (PR_SET_PDEATHSIG), and a watchdog ends the
job when any of them fails, so no rank waits forever for a dead peer.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from ..rank_zero import log


def free_port() -> int:
    """A TCP port nobody listens on right now, on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command() -> list[str]:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class SubprocessLauncher:
    """Launches `processes - 1` copies of this script and makes the current process rank 0."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.children: list[subprocess.Popen] = []
        self._stopping = False  # set when this process stops the children itself

    def launch(self) -> None:
        port = free_port()
        base = {
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(self.processes),
            "LOCAL_WORLD_SIZE": str(self.processes), "NODE_RANK": "0", "SURGE_LAUNCHED": "1",
        }  # fmt: skip
        os.environ.update(base, RANK="0", LOCAL_RANK="0")
        command = _command()
        for rank in range(1, self.processes):
            env = {**os.environ, **base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            self.children.append(
                subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            )
        atexit.register(self.join)
        threading.Thread(target=self._watch, name="surge-launcher-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while not self._stopping:
            for rank, child in enumerate(self.children, start=1):
                code = child.poll()
                if code not in (None, 0) and not self._stopping:
                    log.error(f"surge: rank {rank} exited with code {code}; stopping the other ranks")
                    self.terminate()
                    os._exit(code if code > 0 else 1)
            if all(c.poll() == 0 for c in self.children):
                return
            time.sleep(0.2)

    def terminate(self, children: Sequence[subprocess.Popen] | None = None) -> None:
        # The watchdog must not take the children's deaths for a failure and exit before this
        # process reports the error that made it stop them.
        self._stopping = True
        for child in children or self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 10
        for child in children or self.children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()

    def join(self, timeout: float = 300.0) -> None:
        """Wait for the children at exit; kill those still running after `timeout`."""
        deadline = time.monotonic() + timeout
        for child in self.children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
