"""What `MLFlowLogger` has accepted and the server has not yet taken, and the one thread that sends it.

Training never waits for the server and never stops because of it: the training thread only adds
to the outbox; the sender thread opens the run, sends parameters, metrics (one request per
`SEND_EVERY_S` at most), checkpoints and the run's end, and removes what it sent only once the
server took it. When the server does not answer, it warns once (naming the server), keeps
everything (in memory up to `MAX_HELD` points, then in a local file) and tries again with a
growing pause; when the server is back, the kept points go first. What is still unsent when the
fit ends is written to a file that `python -m surge.loggers.mlflow_kept FILE` sends later.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from ..rank_zero import info, warn
from .mlflow_kept import Kept, write_kept
from .mlflow_run import OpenRun, RunTarget, open_run, refused

SEND_EVERY_S = 2.0  # metrics logged meanwhile go in one request
MAX_HELD = 100_000  # points kept in memory while the server is away; more go to the spill file
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0  # pauses between tries while the server is away
SLOW_S = 10.0  # a request unanswered for this long: warned as an outage (the client may retry for minutes)
_BATCH, _PARAMS = 1000, 100  # MLflow's limits per request

Point = tuple[str, float, int, int]  # key, value, timestamp (ms), step


class Outbox:
    """Kept points, parameters, checkpoints and the run's end of one logger, and their sender."""

    def __init__(self, client: Any, target: RunTarget, spool: Path) -> None:
        self.client, self.target, self.spool = client, target, spool
        self.run: OpenRun | None = None
        self._cond = threading.Condition()
        self._open_lock = threading.Lock()
        self._points: deque[Point] = deque()
        self._params: list[tuple[str, str]] = []
        self._artifacts: deque[tuple[str, str]] = deque()  # (file, artifact folder)
        self._status: str | None = None
        self._refused: list[str] = []
        self._held: list[Point] = []  # points the server refused: never dropped, kept in the file at close
        self._held_params: list[tuple[str, str]] = []
        self._spill = Spill(spool / f"spill-{os.getpid()}-{id(self)}.jsonl")
        self._sent_at = 0.0
        self._flush = self._closing = self._abandoned = False
        self._busy_since: float | None = None
        self._down_since: float | None = None
        self._warned = self._gave_up = False
        self._thread = threading.Thread(target=self._work, name="surge-mlflow-sender", daemon=True)
        self._thread.start()

    # -- the training thread ---------------------------------------------------------------------
    def put_points(self, points: list[Point]) -> None:
        with self._cond:
            if self._spill.rows or len(self._points) + len(points) > MAX_HELD:
                self._spill.append(points)  # order does not matter: MLflow orders by step
            else:
                self._points.extend(points)
            if len(self._points) >= _BATCH:
                self._cond.notify()
        self._check_slow()

    def put_params(self, params: list[tuple[str, str]]) -> None:
        with self._cond:
            self._params += params
            self._cond.notify()

    def put_artifact(self, path: Path, folder: str) -> None:
        """Keep a hard link to `path` (the callback may delete the file before it is sent)."""
        kept = str(path)
        link = self.spool / "checkpoints" / f"{time.monotonic_ns()}" / path.name
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, link)
            kept = str(link)
        except OSError:
            pass  # another file system: the file itself is sent
        with self._cond:
            self._artifacts.append((kept, folder))
            self._cond.notify()

    def flush(self) -> None:
        with self._cond:
            self._flush = True
            self._cond.notify()

    def wait_sent(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the server to take everything kept so far."""
        with self._cond:
            return self._cond.wait_for(self._empty, timeout_s)

    def run_id(self, wait_s: float) -> str | None:
        """The run's id, waiting up to `wait_s` for it to be opened (0 while the server is away)."""
        with self._cond:
            if self.run is None and self._down_since is None and not self._gave_up and wait_s > 0:
                self._flush = True
                self._cond.notify()
                opened = self._cond.wait_for(
                    lambda: self.run is not None or self._down_since is not None, wait_s
                )
                self._gave_up = not opened  # a hanging server is not waited for at every checkpoint
            return None if self.run is None else self.run.run_id

    def open_now(self) -> OpenRun:
        """Open the run in the caller's thread (a user asking for `run_id`); raises what the client raises."""
        with self._open_lock:
            if self.run is None:
                run = open_run(self.client, self.target)
                with self._cond:
                    self.run = run
                    self._cond.notify_all()
            return self.run

    def close(self, status: str | None, timeout_s: float) -> Path | None:
        """Send the rest and the run's end, waiting up to `timeout_s`; what is still unsent is written
        to a file (returned, and reported), which `send_kept` sends later."""
        with self._cond:
            self._status, self._closing = status, True
            self._cond.notify_all()
            done = self._cond.wait_for(self._empty, timeout_s)
            self._abandoned = True
            self._cond.notify_all()
            if done and not (self._held or self._held_params):
                self._spill.remove()
                return None
            kept = Kept(
                target=self.target,
                run_id=None if self.run is None else self.run.run_id,
                points=[*self._held, *self._points, *self._spill.read(self._spill.offset, None)[0]],
                params=[*self._held_params, *self._params],
                artifacts=list(self._artifacts),
                status=self._status,
                refused=list(self._refused),
            )
        path = write_kept(self.spool, kept)
        self._spill.remove()
        warn(
            f"MLFlowLogger: the MLflow server at {self.target.tracking_uri} did not take everything before the "
            f"end of the fit or refused some of it ({kept.summary()}); it is kept in {path}. Send it later "
            f"(once what was refused is put right) with: "
            f"python -m surge.loggers.mlflow_kept {path}"
        )
        return path

    # -- the sender thread ---------------------------------------------------------------------
    def _empty(self) -> bool:
        return not (self._points or self._spill.unread or self._params or self._artifacts or self._status)

    def _due(self) -> bool:
        if self._abandoned or self._empty():
            return self._abandoned or (self._flush and self.run is None)
        if self._params or self._artifacts or self._flush or self._closing or self.run is None:
            return True
        return len(self._points) >= _BATCH or time.time() - self._sent_at >= SEND_EVERY_S

    def _work(self) -> None:
        pause = RETRY_FIRST_S
        while True:
            with self._cond:
                while not self._due():
                    self._cond.wait(timeout=SEND_EVERY_S)
                if self._abandoned:
                    return
            try:
                self._busy_since = time.monotonic()
                self._send_some()
            except Exception as err:  # the server did not answer: keep everything, try again later
                self._went_down(err)
                with self._cond:
                    self._cond.wait(timeout=pause)
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            finally:
                self._busy_since = None
            pause = RETRY_FIRST_S
            self._came_back()
            with self._cond:
                self._cond.notify_all()  # a close() waiting for the outbox to empty

    def _send_some(self) -> None:
        run = self.open_now()
        with self._cond:
            params, self._flush = self._params[:_PARAMS], False
        if params:
            self._send_params(run, params)
            with self._cond:
                del self._params[: len(params)]
            return
        with self._cond:
            points = [self._points[i] for i in range(min(_BATCH, len(self._points)))]
            spilled, offset = ([], 0) if points else self._spill.read(self._spill.offset, _BATCH)
        if points or spilled:
            self._send_points(run, points or spilled)
            with self._cond:
                if points:
                    for _ in points:
                        self._points.popleft()
                else:
                    self._spill.done_upto(offset)
                self._sent_at = time.time()
            return
        if self._artifacts:
            path, folder = self._artifacts[0]
            if Path(path).is_file():
                self.client.log_artifact(run.run_id, path, folder)
            else:  # deleted (top-k) before it could be sent, and no link could be kept
                with self._cond:
                    self._refused.append(f"checkpoint {path}: deleted before the server was back")
            with self._cond:
                self._artifacts.popleft()
            if Path(path).is_relative_to(self.spool):
                shutil.rmtree(Path(path).parent, ignore_errors=True)
            return
        if self._status is not None:
            status = self._status
            self._request(lambda: self.client.set_terminated(run.run_id, status), f"the run's end ({status})")
            with self._cond:
                self._status = None
                self._cond.notify_all()

    def _send_params(self, run: OpenRun, params: list[tuple[str, str]]) -> None:
        from mlflow.entities import Param

        out = []
        for key, text in params:
            held = run.params.get(key)
            if held is not None and held != text:
                warn(
                    f"MLFlowLogger: hyper-parameter {key!r} is {text!r} in the resumed run but the "
                    f"MLflow run holds {held!r}; MLflow parameters cannot change, the run keeps the first"
                )
            if held is None:
                out.append(Param(key, text))
        if self._request(lambda: self.client.log_batch(run.run_id, params=out), f"{len(out)} parameters"):
            run.params.update((p.key, p.value) for p in out)
        else:
            with self._cond:
                self._held_params += [(p.key, p.value) for p in out]

    def _send_points(self, run: OpenRun, points: list[Point]) -> None:
        from mlflow.entities import Metric

        upto = run.upto
        out = [Metric(k, v, t, s) for k, v, t, s in points if not upto or s > upto.get(k, -1)]
        if out and not self._request(
            lambda: self.client.log_batch(run.run_id, metrics=out), f"{len(out)} points"
        ):
            with self._cond:
                self._held += [(m.key, m.value, m.timestamp, m.step) for m in out]

    def _request(self, send: Any, what: str) -> bool:
        """One request; whether the server took it. What it refuses (it never will take) is not
        retried: it is noted and reported at the end, and the caller keeps it for the kept file."""
        try:
            send()
        except Exception as err:
            if not refused(err):
                raise
            with self._cond:
                self._refused.append(f"{what}: {err}")
            warn(
                f"MLFlowLogger: the MLflow server at {self.target.tracking_uri} refused {what} ({err}); "
                "it is kept in the file written at the end of the fit"
            )
            return False
        return True

    def _went_down(self, err: BaseException) -> None:
        with self._cond:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
            self._cond.notify_all()
        if first:
            self._say_down(f"{type(err).__name__}: {str(err)[:300]}", refused(err))

    def _say_down(self, why: str, answered: bool = False) -> None:
        # a refusal (a deleted experiment, say) is an answer: said as such, not as an outage
        state = f"refused a request ({why})" if answered else f"does not answer ({why})"
        if self._warned:
            info(f"MLFlowLogger: the MLflow server at {self.target.tracking_uri} {state} again")
            return
        self._warned = True
        warn(
            f"MLFlowLogger: the MLflow server at {self.target.tracking_uri} {state}; training "
            f"goes on. What is logged meanwhile is kept (in memory, beyond {MAX_HELD} points in "
            f"{self._spill.path}) and sent when it answers again"
        )

    def _came_back(self) -> None:
        with self._cond:
            since, self._down_since = self._down_since, None
        if since is not None:
            info(
                f"MLFlowLogger: the MLflow server at {self.target.tracking_uri} answers again after "
                f"{time.monotonic() - since:.0f} s; the kept points are being sent"
            )

    def _check_slow(self) -> None:
        """Warn once when a request hangs (the client retries for minutes before it gives up)."""
        busy = self._busy_since
        if busy is not None and not self._warned and time.monotonic() - busy > SLOW_S:
            self._say_down(f"no answer in {SLOW_S:.0f} s")


class Spill:
    """Points beyond `MAX_HELD`, one JSON list a line, read back from `offset` once the server answers."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rows = path, 0, 0

    @property
    def unread(self) -> bool:
        return self.rows > 0 and self.offset < self.path.stat().st_size

    def append(self, points: list[Point]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.writelines(json.dumps(p) + "\n" for p in points)
        self.rows += len(points)

    def read(self, offset: int, limit: int | None) -> tuple[list[Point], int]:
        if self.rows == 0:
            return [], offset
        out: list[Point] = []
        with open(self.path) as f:
            f.seek(offset)
            while limit is None or len(out) < limit:
                line = f.readline()
                if not line:
                    break
                k, v, t, s = json.loads(line)
                out.append((k, v, t, s))
            return out, f.tell()

    def done_upto(self, offset: int) -> None:
        """Sent up to `offset`; an emptied file is removed (new points go to memory again)."""
        self.offset = offset
        if offset >= self.path.stat().st_size:
            self.remove()

    def remove(self) -> None:
        if self.rows:
            self.path.unlink(missing_ok=True)
            self.rows = self.offset = 0
