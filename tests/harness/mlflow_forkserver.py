"""A real MLflow tracking server (MLflow's own FastAPI app under uvicorn) that a test can kill and
start again in a second: this parent imports MLflow once, and each start forks a child that serves.
`python mlflow_forkserver.py ROOT PORT`, then lines on stdin: `start`, `kill` (SIGKILL), `quit`.
The child is the server the clients talk to; killing it is a real outage (connections refused)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def main(root: Path, port: int) -> None:
    os.environ["_MLFLOW_SERVER_FILE_STORE"] = f"sqlite:///{root / 'mlflow.db'}"
    os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = str(root / "artifacts")
    import uvicorn
    from mlflow.server.fastapi_app import app

    child = 0
    for line in sys.stdin:
        command = line.strip()
        if command in ("kill", "quit") and child:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            child = 0
        if command == "start" and not child:
            child = os.fork()
            if child == 0:
                uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
                os._exit(0)
        if command == "quit":
            return
        print(f"{command} done", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
