"""Starting the other processes of a one-machine job: `python train.py` with `devices=N`.

The current process becomes rank 0; surge starts ranks 1..N-1 running the same command, each
given its rank's variables (`ClusterEnvironment.variables`). Children die with the parent
(PR_SET_PDEATHSIG), and a watchdog ends the job when any of them fails, so no rank waits forever
for a dead peer.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from ..errors import MisconfigurationError
from ..rank_zero import log
from .environment import ClusterEnvironment


def free_port() -> int:
    """The port the ranks meet on: `MASTER_PORT` when the environment gives one (as Lightning's
    launchers read it), else a TCP port nobody listens on right now, on the loopback interface."""
    given = os.environ.get("MASTER_PORT", "")
    if given.isdigit() and 0 < int(given) < 65536:
        return int(given)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unrunnable_main() -> str | None:
    """How this process got code that no new process can run again (`python -c`, standard input),
    or None: a script file or a module (`-m`) that ranks 1..N-1 re-run."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return None
    where = sys.argv[0] if sys.argv else ""
    return {"-c": "`python -c`", "-": "standard input", "": "standard input"}.get(where)


def _command() -> list[str]:
    for finder in sys.meta_path:  # a mode that maps imports (`surge run`) starts the ranks in it too
        relaunch = getattr(finder, "relaunch", None)
        if isinstance(relaunch, str):
            return [sys.executable, "-m", relaunch, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
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

    def launch(self) -> ClusterEnvironment:
        """Start ranks 1..N-1, each given its environment's variables; returns rank 0's (this
        process's) environment. This process's own `os.environ` is left as it is. Refused, before
        any process starts, where there is no script to run again (`python -c`, standard input)."""
        source = unrunnable_main() if self.processes > 1 else None
        if source is not None:
            raise MisconfigurationError(
                f"Trainer(devices={self.processes}) starts its other {self.processes - 1} process(es) by running "
                f"this script again, but this process runs code from {source}: there is no script file to run. "
                "Save the code to a file and run `python train.py`, or use Trainer(strategy='ddp_fork') (it forks "
                "this process instead)."
            )
        env = ClusterEnvironment(
            source="surge",
            world_size=self.processes,
            local_world_size=self.processes,
            master_port=free_port(),
        )
        command = _command()
        for rank in range(1, self.processes):
            child = dataclasses.replace(env, global_rank=rank, local_rank=rank)
            self.children.append(
                subprocess.Popen(
                    command,
                    env={**os.environ, **child.variables()},
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )
        atexit.register(self.join)
        threading.Thread(target=self._watch, name="surge-launcher-watchdog", daemon=True).start()
        return env

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

    def terminate(self, children: Sequence[subprocess.Popen] | None = None, grace: float = 10.0) -> None:
        """Ask the children to stop (SIGTERM); kill those still running after `grace` seconds."""
        # The watchdog must not take the children's deaths for a failure and exit before this
        # process reports the error that made it stop them.
        self._stopping = True
        for child in children or self.children:
            if child.poll() is None:
                child.terminate()
                child.send_signal(
                    signal.SIGCONT
                )  # a stopped rank (SIGSTOP) acts on the TERM only once continued
        deadline = time.monotonic() + grace
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
