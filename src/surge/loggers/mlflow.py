"""`MLFlowLogger`: metrics, hyper-parameters and (when asked) checkpoints in an MLflow run.

mlflow is imported when the run is first used, not by `import surge` (`pip install -e ".[mlflow]"`).
Training never waits for the server: what is logged goes to an outbox that a background thread
sends (`mlflow_outbox.py`), keeping it through outages; what is still unsent at the end of a fit
is written to a file and reported, with the command that sends it later (`mlflow_kept.py`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SurgeRuntimeError, bad_value, install_hint
from ..module.hparams import plain
from ..rank_zero import info, warn
from .base import Logger, no_prefix
from .checkpoint_uploads import new_files, uploads_at_once
from .mlflow_outbox import Outbox
from .mlflow_run import RunTarget

_STATUS = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_BAD_KEY_CHARS = re.compile(r"[^\w\-. /]")  # what MLflow accepts in a metric or parameter name
_MAX_PARAM_LEN = 6000  # MLflow's limit on a parameter's value
OPEN_WAIT_S = 10.0  # a checkpoint waits this long (once) for the run's id while the run is being opened


class MLFlowLogger(Logger):
    """Logs to the MLflow tracking server at `tracking_uri` (default: `MLFLOW_TRACKING_URI`, else a
    local SQLite store `<save_dir>/mlflow.db` with artifacts in `<save_dir>/artifacts`), in the run
    `run_id` or a new run of `experiment_name`.

    `log_model`: False (no artifacts), True (the checkpoint callbacks' kept checkpoints when the fit
    ends; each one as written with `save_top_k=-1`) or "all" (each checkpoint once written), under
    `checkpoints/`. The run id is stored in surge's checkpoints: `fit(ckpt_path=...)` continues that
    run when it is in this logger's experiment on this server (else a new run, and a warning), and
    steps the run already holds (logged after the checkpoint was saved) are not written twice.

    The server being away never stops training: see the module's docstring. `send_timeout_s`: how
    long the end of a fit waits for the server to take what is still kept; `spool_dir` (default
    `<save_dir>/unsent`): where points beyond memory and what is unsent at the end are kept.
    """

    def __init__(
        self,
        experiment_name: str = "surge_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | Path | None = "./mlruns",
        log_model: bool | str = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
        checkpoint_path_prefix: str = "",
        send_timeout_s: float = 30.0,
        spool_dir: str | Path | None = None,
    ) -> None:
        no_prefix("MLFlowLogger", prefix)
        if log_model not in (True, False, "all"):
            raise bad_value("MLFlowLogger(log_model)", log_model, 'True, False or "all"')
        if run_id is not None and not (isinstance(run_id, str) and run_id):
            raise bad_value("MLFlowLogger(run_id)", run_id, "None or a run id string")
        if (
            isinstance(send_timeout_s, bool)
            or not isinstance(send_timeout_s, int | float)
            or send_timeout_s < 0
        ):
            raise bad_value("MLFlowLogger(send_timeout_s)", send_timeout_s, "seconds >= 0")
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self._local: Path | None = None  # the folder of the local store, when no server is named
        if tracking_uri is None:
            if save_dir is None:
                raise bad_value(
                    "MLFlowLogger(save_dir)", save_dir, "a directory when no tracking_uri is given"
                )
            # MLflow 3 refuses its old file store: a local SQLite store, its artifacts beside it
            self._local = Path(save_dir).resolve()
            tracking_uri = f"sqlite:///{self._local / 'mlflow.db'}"
            artifact_location = artifact_location or (self._local / "artifacts").as_uri()
        self._target = RunTarget(
            tracking_uri=tracking_uri,
            experiment_name=experiment_name,
            run_name=run_name,
            tags={k: str(v) for k, v in (tags or {}).items()},
            artifact_location=artifact_location,
            run_id=run_id,
        )
        self._experiment_name, self._tracking_uri = experiment_name, tracking_uri
        self._log_model, self._checkpoint_prefix = log_model, checkpoint_path_prefix
        self._requested_run_id, self._run_id = run_id, run_id
        self._spool = Path(
            spool_dir if spool_dir is not None else Path(save_dir or "./mlruns") / "unsent"
        ).resolve()
        self._send_timeout_s = float(send_timeout_s)
        self._client: Any = None
        self._outbox: Outbox | None = None
        self._box_lock = threading.Lock()
        self._synchronous = bool(synchronous)  # True: save() (epoch ends) waits for the server
        # MLflow keeps one of two equal points logged in the same millisecond and both otherwise:
        # the epoch, given with every row, is sent once per step so that its history is the same
        self._epoch_sent: tuple[int, Any] = (-1, None)
        self._renamed: set[str] = set()
        self._uploaded: dict[str, float] = {}  # path -> mtime of checkpoints handed to the outbox
        self._checkpoint_lists: dict[int, Any] = {}  # log_model=True: each callback's latest lists
        self.kept_files: list[Path] = []  # what the ends of fits could not send (see mlflow_kept)

    # -- the run -----------------------------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The `mlflow.tracking.MlflowClient` (created on first use)."""
        if self._client is None:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError as err:
                raise SurgeRuntimeError(f"MLFlowLogger needs mlflow: {install_hint('mlflow')}") from err
            if self._local is not None:
                self._local.mkdir(parents=True, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self._tracking_uri)
        return self._client

    def _box(self) -> Outbox:
        with self._box_lock:  # the training thread and a background checkpoint writer's upload
            if self._outbox is None:
                self._outbox = Outbox(self.experiment, self._target, self._spool)
            return self._outbox

    @property
    def run_id(self) -> str:
        """The MLflow run's id; the run is created (or found) now if it was not (this waits for the server)."""
        if self._run_id is None:
            self._run_id = self._box().open_now().run_id
        return self._run_id

    @property
    def experiment_id(self) -> str:
        box = self._box()
        return box.run.experiment_id if box.run is not None else box.open_now().experiment_id

    @property
    def name(self) -> str:
        return self._experiment_name

    @property
    def version(self) -> str:
        return self.run_id

    @property
    def tracking_uri(self) -> str:
        """The server (or local store) this logger writes to."""
        return self._tracking_uri

    @property
    def save_dir(self) -> str | None:
        """The folder of the local store (no `tracking_uri` given), else None."""
        return None if self._local is None else str(self._local)

    # -- what the Trainer calls ----------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if metrics.get("epoch") is not None and (step, metrics["epoch"]) == self._epoch_sent:
            metrics = {k: v for k, v in metrics.items() if k != "epoch"}  # one epoch point per step
        else:
            self._epoch_sent = (step, metrics.get("epoch"))
        stamp = int(time.time() * 1000)
        self._box().put_points([(self._key(k), float(v), stamp, step) for k, v in metrics.items()])

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        out = []
        for key, value in _flatten(plain(dict(params))).items():
            text = str(value)
            if len(text) > _MAX_PARAM_LEN:
                warn(f"MLFlowLogger: hyper-parameter {key!r} is cut to MLflow's {_MAX_PARAM_LEN} characters")
                text = text[:_MAX_PARAM_LEN]
            out.append((self._key(key), text))
        self._box().put_params(out)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called once the checkpoint files are durable (`SavedCheckpoints`, or a callback)."""
        if uploads_at_once(self._log_model, checkpoint_callback):
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_lists[getattr(checkpoint_callback, "owner", id(checkpoint_callback))] = (
                checkpoint_callback
            )

    def save(self) -> None:
        box = self._outbox
        if box is None:
            return
        box.flush()  # waits for the server only with synchronous=True, and then boundedly
        if self._synchronous:
            box.wait_sent(self._send_timeout_s)

    def finalize(self, status: str) -> None:
        box = self._outbox
        if box is None:
            return  # nothing was logged: no run is created at the end
        for saved in self._checkpoint_lists.values():  # as Lightning: at any end
            self._upload_checkpoints(saved)
        kept = box.close(_STATUS.get(status, "FINISHED"), self._send_timeout_s)
        if box.run is not None:
            self._run_id = box.run.run_id
            self._target.run_id, self._target.resume = self._run_id, None  # a later stage continues it
        if kept is not None:
            self.kept_files.append(kept)
        self._outbox = None

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_client": None, "_outbox": None}  # a thread does not cross processes
        del state["_box_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _box_lock=threading.Lock())

    # -- run continuity ------------------------------------------------------------------------
    def run_state(self) -> dict[str, Any] | None:
        run_id = self._run_id or self._box().run_id(OPEN_WAIT_S)
        self._run_id = self._run_id or run_id
        # the run being opened while the server is away: the one it will continue, if any
        run_id = run_id or self._target.run_id or self._target.resume
        return {
            "run_id": run_id,
            "tracking_uri": self._tracking_uri,
            "experiment_name": self._experiment_name,
        }

    def resume_run(self, state: Mapping[str, Any], step: int) -> None:
        saved = state.get("run_id")
        if not saved:
            return
        if self._requested_run_id is not None and self._requested_run_id != saved:
            info(
                f"MLFlowLogger: logging to run_id={self._requested_run_id} as given, not the checkpoint's {saved}"
            )
            return
        if state.get("tracking_uri") != self._tracking_uri:
            info(
                f"MLFlowLogger: the checkpoint's run {saved} is on {state.get('tracking_uri')}, "
                f"this logger on {self._tracking_uri}: a new run is started"
            )
            return
        if self._requested_run_id is None:
            # continued only if the server says it is in this logger's experiment (mlflow_run.py)
            self._target.resume, self._target.resume_step = str(saved), step

    # -- helpers ---------------------------------------------------------------------------------
    def _key(self, key: str) -> str:
        clean = _BAD_KEY_CHARS.sub("_", key)
        if clean != key and key not in self._renamed:
            self._renamed.add(key)
            warn(
                f"MLFlowLogger: {key!r} is logged as {clean!r} (MLflow names take letters, digits, _ - . / and spaces)"
            )
        return clean

    def _upload_checkpoints(self, saved: Any) -> None:
        for p in new_files(saved, self._uploaded):
            self._box().put_artifact(p, self._checkpoint_prefix + "checkpoints")
            self._uploaded[str(p)] = p.stat().st_mtime


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out
