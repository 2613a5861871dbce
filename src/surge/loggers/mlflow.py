"""`MLFlowLogger`: metrics, hyper-parameters and (when asked) checkpoints in an MLflow run.

mlflow is imported when the run is first used, not by `import surge` (`pip install "surge[mlflow]"`).
Metrics are given at the log points the other loggers use and sent at most every `SEND_EVERY_S`
seconds in one request, without waiting for the server (mlflow's asynchronous logging); `save()`
(at epoch ends) and the end of the run send the rest and wait, so a failed request is raised,
never dropped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SurgeRuntimeError, bad_value
from ..hparams import plain
from ..rank_zero import info, warn
from .base import Logger, no_prefix

_STATUS = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_BAD_KEY_CHARS = re.compile(r"[^\w\-. /]")  # what MLflow accepts in a metric or parameter name
_MAX_PARAM_LEN = 6000  # MLflow's limit on a parameter's value
_BATCH = 1000  # MLflow's limit on metrics per request (and 100 on params)
SEND_EVERY_S = 2.0  # metrics logged meanwhile go in one request


class MLFlowLogger(Logger):
    """Logs to the MLflow tracking server at `tracking_uri` (default: `MLFLOW_TRACKING_URI`, else a
    local SQLite store `<save_dir>/mlflow.db` with artifacts in `<save_dir>/artifacts`), in the run
    `run_id` or a new run of `experiment_name`.

    `log_model`: False (no artifacts), True (the checkpoint callbacks' kept checkpoints when the fit
    ends) or "all" (each checkpoint as soon as it is saved), under `checkpoints/`. The run id is stored
    in surge's checkpoints: `fit(ckpt_path=...)` continues the same run, and steps the run already
    holds (logged after the checkpoint was saved) are not written twice.
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
    ) -> None:
        no_prefix("MLFlowLogger", prefix)
        if log_model not in (True, False, "all"):
            raise bad_value("MLFlowLogger(log_model)", log_model, 'True, False or "all"')
        if run_id is not None and not (isinstance(run_id, str) and run_id):
            raise bad_value("MLFlowLogger(run_id)", run_id, "None or a run id string")
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
        self._experiment_name, self._run_name = experiment_name, run_name
        self._tracking_uri, self._tags = tracking_uri, dict(tags or {})
        self._artifact_location, self._log_model = artifact_location, log_model
        self._checkpoint_prefix = checkpoint_path_prefix
        self._requested_run_id, self._run_id = run_id, run_id
        self._experiment_id: str | None = None
        self._client: Any = None
        self._synchronous = bool(synchronous)  # None (mlflow's default) -> asynchronous, awaited at save()
        self._pending: list[Any] = []  # mlflow's RunOperations of requests not yet awaited
        self._buffer: list[Any] = []  # metrics not yet sent
        self._sent_at = 0.0
        # MLflow keeps one of two equal points logged in the same millisecond and both otherwise:
        # the epoch, given with every row, is sent once per step so that its history is the same
        self._epoch_sent: tuple[int, Any] = (-1, None)
        self._logged_upto: dict[str, int] = {}  # after a resume: the last step the run holds per metric
        self._resumed = False  # continuing a run: its parameters are compared, not logged again
        self._renamed: set[str] = set()
        self._checkpoints: dict[str, float] = {}  # path -> mtime of checkpoints already uploaded

    # -- the run -----------------------------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The `mlflow.tracking.MlflowClient` (created on first use)."""
        if self._client is None:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError as err:
                raise SurgeRuntimeError(
                    'MLFlowLogger needs mlflow: pip install "surge[mlflow]" (or mlflow)'
                ) from err
            if self._local is not None:
                self._local.mkdir(parents=True, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self._tracking_uri)
        return self._client

    @property
    def run_id(self) -> str:
        """The MLflow run's id; the run is created (or found, with `run_id=`) on first use."""
        if self._run_id is None:
            client = self.experiment
            tags = {k: str(v) for k, v in self._tags.items()}
            run = client.create_run(self.experiment_id, run_name=self._run_name, tags=tags)
            self._run_id = run.info.run_id
        return self._run_id

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            if self._run_id is not None:
                self._experiment_id = self.experiment.get_run(self._run_id).info.experiment_id
            else:
                self._experiment_id = self._find_or_create_experiment()
        return self._experiment_id

    def _find_or_create_experiment(self) -> str:
        client = self.experiment
        found = client.get_experiment_by_name(self._experiment_name)
        if found is not None:
            return str(found.experiment_id)
        return str(client.create_experiment(self._experiment_name, artifact_location=self._artifact_location))

    @property
    def name(self) -> str:
        return self._experiment_name

    @property
    def version(self) -> str:
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The folder of the local store (no `tracking_uri` given), else None."""
        return None if self._local is None else str(self._local)

    # -- what the Trainer calls ----------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = time.time()
        upto, stamp = self._logged_upto, int(now * 1000)
        if metrics.get("epoch") is not None and (step, metrics["epoch"]) == self._epoch_sent:
            metrics = {k: v for k, v in metrics.items() if k != "epoch"}  # one epoch point per step
        else:
            self._epoch_sent = (step, metrics.get("epoch"))
        self._buffer += [
            Metric(self._key(k), float(v), stamp, step)
            for k, v in metrics.items()
            if not upto or step > upto.get(k, -1)
        ]
        if len(self._buffer) >= _BATCH or now - self._sent_at >= SEND_EVERY_S:
            self._flush()

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        flat = _flatten(plain(dict(params)))
        have = dict(self.experiment.get_run(self.run_id).data.params) if self._resumed else {}
        out = []
        for key, value in flat.items():
            text = str(value)
            if len(text) > _MAX_PARAM_LEN:
                warn(f"MLFlowLogger: hyper-parameter {key!r} is cut to MLflow's {_MAX_PARAM_LEN} characters")
                text = text[:_MAX_PARAM_LEN]
            key = self._key(key)
            if key in have:
                if have[key] != text:
                    warn(
                        f"MLFlowLogger: hyper-parameter {key!r} is {text!r} in the resumed run but the "
                        f"MLflow run holds {have[key]!r}; MLflow parameters cannot change, the run keeps the first"
                    )
                continue
            out.append(Param(key, text))
        for i in range(0, len(out), 100):
            self._send(params=out[i : i + 100])

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if self._log_model == "all":
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback

    def save(self) -> None:
        self._flush()
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()  # raises what the request raised

    def finalize(self, status: str) -> None:
        if self._run_id is None and self._client is None:
            return  # nothing was logged: no run is created at the end
        self.save()
        callback = getattr(self, "_checkpoint_callback", None)
        if callback is not None and status == "success":
            self._upload_checkpoints(callback)
        self.experiment.set_terminated(self.run_id, _STATUS.get(status, "FINISHED"))

    # -- run continuity ------------------------------------------------------------------------
    def run_state(self) -> dict[str, Any] | None:
        return {"run_id": self.run_id, "tracking_uri": self._tracking_uri}

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
        self._run_id = saved
        client = self.experiment
        run = client.get_run(saved)
        if run.info.status != "RUNNING":
            client.update_run(saved, status="RUNNING")
        self._logged_upto = {
            key: max((m.step for m in client.get_metric_history(saved, key)), default=-1)
            for key in run.data.metrics
        }
        self._resumed = True
        info(f"MLFlowLogger: continuing run {saved} at step {step} (steps it holds are not sent again)")

    # -- helpers ---------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Send the buffered metrics: one request per `SEND_EVERY_S` at most (a server takes
        milliseconds per request; a step logging every time would outrun it)."""
        batch, self._buffer = self._buffer, []
        self._sent_at = time.time()
        for i in range(0, len(batch), _BATCH):
            self._send(metrics=batch[i : i + _BATCH])

    def _send(self, **entities: Any) -> None:
        op = self.experiment.log_batch(self.run_id, synchronous=self._synchronous, **entities)
        if op is not None:
            self._pending.append(op)

    def _key(self, key: str) -> str:
        clean = _BAD_KEY_CHARS.sub("_", key)
        if clean != key and key not in self._renamed:
            self._renamed.add(key)
            warn(
                f"MLFlowLogger: {key!r} is logged as {clean!r} (MLflow names take letters, digits, _ - . / and spaces)"
            )
        return clean

    def _upload_checkpoints(self, callback: Any) -> None:
        paths = [callback.best_model_path, getattr(callback, "last_model_path", ""), *callback.best_k_models]
        for path in dict.fromkeys(p for p in paths if p):
            p = Path(path)
            if not p.is_file():
                continue
            mtime = p.stat().st_mtime
            if self._checkpoints.get(str(p)) == mtime:
                continue
            self.experiment.log_artifact(self.run_id, str(p), self._checkpoint_prefix + "checkpoints")
            self._checkpoints[str(p)] = mtime


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out
