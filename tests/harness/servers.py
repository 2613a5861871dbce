"""Real services the tests start and stop themselves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ports import free_port


@contextmanager
def mlflow_server(root: Path, timeout: float = 240.0) -> Iterator[str]:
    """`mlflow server` with a SQLite store and local artifacts under `root`, on a free port; yields
    its URI and stops it (and its workers) afterwards."""
    port = free_port()
    exe = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    cmd = [
        exe, "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1",
        "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed below
    # MLflow's job runner (7 consumer processes that import MLflow: about 30 s of CPU) runs server-side
    # jobs; the tests send none.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(uri, timeout, 0.5, lambda: proc.poll() is None or _exited(root))
        yield uri
    finally:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, 9)
        log.close()


def wait_healthy(uri: str, timeout: float, every: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Until `uri`/health answers 200; raises when `timeout` passes or `alive()` turns False."""
    deadline = time.monotonic() + timeout
    while alive():
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"mlflow server not up after {timeout} s")
        time.sleep(every)


def _exited(root: Path) -> bool:
    raise RuntimeError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")


class RestartableMlflowServer:
    """A real MLflow server on one port and store that a test kills (SIGKILL) and starts again
    mid-run in about a second (`mlflow_forkserver.py`: MLflow is imported once, each start forks)."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root, self.port = root, port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        script = Path(__file__).with_name("mlflow_forkserver.py")
        self._log = open(root / "server.log", "wb")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [sys.executable, str(script), str(root), str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True,
        )  # fmt: skip

    def _command(self, command: str) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        if self._proc.stdout.readline().strip() != f"{command} done":
            raise RuntimeError(
                f"mlflow server: {command} failed: {(self.root / 'server.log').read_text()[-2000:]}"
            )

    def start(self, timeout: float = 240.0) -> None:
        self._command("start")
        wait_healthy(self.uri, timeout, 0.2)

    def kill(self) -> None:
        self._command("kill")

    def close(self) -> None:
        try:
            self._command("quit")
            self._proc.wait(timeout=20)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            os.killpg(self._proc.pid, 9)
            self._proc.wait()
        self._log.close()
