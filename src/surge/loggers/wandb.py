"""`WandbLogger`: metrics, hyper-parameters and (when asked) checkpoints in a Weights & Biases run.

wandb is imported when the logger is made, not by `import surge` (`pip install -e ".[wandb]"`).
"""

from __future__ import annotations

import inspect
import os
import re
import string
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SurgeRuntimeError, bad_value, install_hint
from ..module.hparams import plain
from ..rank_zero import global_rank, info, warn
from .base import Logger, no_prefix
from .checkpoint_uploads import new_files, uploads_at_once
from .wandb_history import STEP_KEY, Held, finished, held

_EXIT_CODE = {"success": 0, "failed": 1, "interrupted": 130}
_ID_CHARS = string.ascii_lowercase + string.digits
_RUN_ID = re.compile(r"[\w.-]{1,128}")  # what a checkpoint may name (no glob or path characters)


class WandbLogger(Logger):
    """Logs to the W&B run `id` (or `version`; a new run when neither is given) of `project`
    (default: `WANDB_PROJECT`, else "surge_logs"), writing its local files under `save_dir/wandb`.

    The x-axis: each `log_metrics` call is one W&B history row holding the metrics and
    `trainer/global_step`, which every metric is plotted against (`define_metric`). W&B's own row
    counter (`_step`) only grows, so every (step, value) is kept, also two calls at one global step
    (a training and a validation row) and a validation after the fit; `run.log(step=...)` with the
    global step would merge or drop those.

    `log_model`: False, True (the checkpoint callbacks' kept checkpoints when the fit ends) or "all"
    (each checkpoint when saved), as artifacts `checkpoint_name` (default `model-<id>`) of type
    "model" with aliases "latest" (and "best"). Offline they are recorded in the run's local files,
    for `wandb sync`. `finalize` finishes the run (exit code 0, 1 when failed, 130 when interrupted);
    a later stage continues it. A run given as `experiment` is used as is and never finished here.

    The run id is stored in surge's checkpoints: `fit(ckpt_path=...)` continues the same run
    (`resume="allow"`), and what the run already holds, read from the transaction logs its earlier
    processes left under `save_dir/wandb`, is not written again; see docs/wandb.md.
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | Path | None = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | Path | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: bool | str = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        no_prefix("WandbLogger", prefix)
        if log_model not in (True, False, "all"):
            raise bad_value("WandbLogger(log_model)", log_model, 'True, False or "all"')
        run_id = _one_id(version, id)
        folder = _one_dir(save_dir, dir)
        wandb = _import_wandb()
        _check_init_kwargs(wandb, kwargs, offline)
        self._init: dict[str, Any] = {"name": name, "project": project or os.environ.get("WANDB_PROJECT")}
        self._init["project"] = self._init["project"] or "surge_logs"
        self._init.update(dir=str(Path(folder).resolve()), resume="allow")
        if offline:
            self._init["mode"] = "offline"
        if anonymous is not None:
            self._init["anonymous"] = "allow" if anonymous else "never"
        self._init.update(kwargs)
        self._requested_id, self._id = run_id, run_id
        self._given, self._run = experiment, experiment
        if experiment is not None:
            self._id = experiment.id
        self._log_model, self._checkpoint_name = log_model, checkpoint_name
        self._checkpoint_lists: dict[int, Any] = {}  # log_model=True: each callback's latest lists
        self._uploaded: dict[str, float] = {}  # path -> mtime of checkpoints already logged
        self._resuming = False
        self._held = Held()  # while continuing a run: what it holds from earlier processes
        self._next_row = 0
        self._start_lock = threading.Lock()  # the training thread and a background writer's upload

    # -- the run -----------------------------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The `wandb` Run (started on first use, rank zero; other ranks get one that does nothing)."""
        if global_rank() != 0:
            return _OffRank()
        if self._run is None:
            with self._start_lock:  # one start: both may log first (a checkpoint in a batch-end hook)
                if self._run is None:
                    self._run = self._start()
        return self._run

    def _start(self) -> Any:
        wandb = _import_wandb()
        Path(self._init["dir"]).mkdir(parents=True, exist_ok=True)
        run = wandb.init(**{**self._init, "id": self.version})
        if run.id != self.version:
            raise SurgeRuntimeError(
                f"WandbLogger: wandb.init returned the run {run.id} already active in this process, not "
                f"run {self.version}; finish that run first, pass it as WandbLogger(experiment=...), or "
                'pass WandbLogger(reinit="create_new") to keep both'
            )
        run.define_metric(STEP_KEY)
        run.define_metric("*", step_metric=STEP_KEY, step_sync=True)
        self._id = run.id
        self._read_held(run)
        return run

    def _read_held(self, run: Any) -> None:
        """Number this process's rows on from the earlier ones; when resuming, note what the run holds."""
        own = Path(run.dir).parent
        found = held(own.parent, run.id, skip=own / f"run-{run.id}.wandb")
        self._next_row = max(found.next_row, run.step)
        if not self._resuming:
            return
        if found.segments == 0 and getattr(run, "resumed", False):
            last = run.summary.get(STEP_KEY)
            if last is not None:
                found.upto = {k: int(last) for k in dict(run.summary) if not k.startswith("_")}
                info(
                    f"WandbLogger: no local log of run {run.id} under {own.parent}: steps up to {last} "
                    "(its latest) are not sent again, also metrics it did not log there"
                )
        self._held = found
        info(f"WandbLogger: continuing run {run.id} (steps it holds are not sent again)")

    @property
    def name(self) -> str:
        return str(self._init["project"])

    @property
    def version(self) -> str:
        """The run id (chosen now when none was given, so a checkpoint can name the run)."""
        if self._id is None:
            import secrets

            self._id = "".join(secrets.choice(_ID_CHARS) for _ in range(8))  # as wandb makes them
        return self._id

    @property
    def save_dir(self) -> str:
        return str(self._init["dir"])

    def watch(self, model: Any, log: str = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        """`wandb.watch` on the run: gradients/parameters histograms every `log_freq` steps."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    # -- what the Trainer calls ----------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        run = self.experiment
        upto = self._held.upto
        row: dict[str, Any] = {k: v for k, v in metrics.items() if not upto or step > upto.get(k, -1)}
        if not row:
            return
        row[STEP_KEY] = step
        at = max(self._next_row, run.step)  # W&B drops rows below its current one
        run.log(row, step=at)
        self._next_row = at + 1

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self.experiment.config.update(plain(dict(params)), allow_val_change=True)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called once the checkpoint files are durable (`SavedCheckpoints`, or a callback)."""
        if uploads_at_once(self._log_model, checkpoint_callback):
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_lists[getattr(checkpoint_callback, "owner", id(checkpoint_callback))] = (
                checkpoint_callback
            )

    def finalize(self, status: str) -> None:
        if self._run is None:
            return  # nothing was logged: no run is started at the end
        if status == "success":  # as Lightning: the kept checkpoints of a run that ended well
            for saved in self._checkpoint_lists.values():
                self._upload_checkpoints(saved)
        if self._given is None:
            log = Path(self._run.dir).parent / f"run-{self._run.id}.wandb"
            self._run.finish(exit_code=_EXIT_CODE.get(status, 0))
            self._run = None
            _wait_until_written(log)
        self._held, self._resuming = Held(), False  # a later stage logs its own rows

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_run": None, "_given": None}  # a Run does not cross processes
        del state["_start_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _start_lock=threading.Lock())

    # -- run continuity ------------------------------------------------------------------------
    def run_state(self) -> dict[str, Any] | None:
        state = {"id": self.version, "project": self.name}
        if self._init.get("entity"):
            state["entity"] = self._init["entity"]
        return state

    def resume_run(self, state: Mapping[str, Any], step: int) -> None:
        saved = state.get("id")
        if not saved:
            return
        if not (isinstance(saved, str) and _RUN_ID.fullmatch(saved)):
            warn(
                f"WandbLogger: the checkpoint names the run {saved!r}, which is no W&B run id: a new run is started"
            )
            return
        mine = self._requested_id if self._run is None else self._id
        if mine is not None and mine != saved:
            info(f"WandbLogger: logging to run {mine} as given, not the checkpoint's {saved}")
            return
        theirs, mine_entity = state.get("entity"), self._init.get("entity")
        if state.get("project") != self.name or (theirs and mine_entity and theirs != mine_entity):
            warn(
                f"WandbLogger: the checkpoint's run {saved} is in project {state.get('project')!r} "
                f"(entity {theirs!r}), this logger's is {self.name!r} (entity {mine_entity!r}): a new run is started"
            )
            return
        self._id, self._resuming = saved, True
        if self._run is not None:
            self._read_held(self._run)

    # -- helpers ---------------------------------------------------------------------------------
    def _upload_checkpoints(self, callback: Any) -> None:
        wandb = _import_wandb()
        for p in new_files(callback, self._uploaded):
            path = str(p)
            score = callback.best_k_models.get(path)
            metadata = {"score": None if score is None else float(score), "original_filename": p.name}
            artifact = wandb.Artifact(
                self._checkpoint_name or f"model-{self.version}", type="model", metadata=metadata
            )
            artifact.add_file(str(p), name="model.ckpt")
            aliases = ["latest", "best"] if path == callback.best_model_path else ["latest"]
            self.experiment.log_artifact(artifact, aliases=aliases)
            self._uploaded[str(p)] = p.stat().st_mtime


class _OffRank:
    """`experiment` on ranks other than zero (the run is rank zero's): every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _wait_until_written(log: Path, timeout_s: float = 30.0) -> None:
    """wandb's service writes the end of a finished run's log after `finish()` returns: wait for it,
    so a resume (or `wandb sync`) that follows reads the whole run."""
    if not log.is_file():
        return  # no transaction log (mode="disabled")
    deadline = time.monotonic() + timeout_s
    while not finished(log):
        if time.monotonic() > deadline:
            info(f"WandbLogger: {log} is not complete after {timeout_s:.0f} s; wandb is still writing it")
            return
        time.sleep(0.02)


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as err:
        raise SurgeRuntimeError(f"WandbLogger needs wandb: {install_hint('wandb')}") from err
    return wandb


def _one_id(version: str | None, run_id: str | None) -> str | None:
    for arg, value in (("version", version), ("id", run_id)):
        if value is not None and not (isinstance(value, str) and value):
            raise bad_value(f"WandbLogger({arg})", value, "None or a run id string")
    if version is not None and run_id is not None and version != run_id:
        raise bad_value(
            "WandbLogger(id)", run_id, f"the same run as version={version!r}, or only one of them"
        )
    return version or run_id


def _one_dir(save_dir: str | Path | None, folder: str | Path | None) -> str | Path:
    if folder is None:
        return save_dir or "."
    if save_dir in (None, ".") or Path(folder) == Path(save_dir):
        return folder
    raise bad_value(
        "WandbLogger(dir)", folder, f"the same folder as save_dir={save_dir!r}, or only one of them"
    )


def _check_init_kwargs(wandb: Any, kwargs: Mapping[str, Any], offline: bool) -> None:
    known = set(inspect.signature(wandb.init).parameters) - {"id", "dir", "name", "project", "anonymous"}
    for key in kwargs:
        if key not in known:
            raise bad_value(
                f"WandbLogger({key})", kwargs[key], f"one of wandb.init's arguments {sorted(known)}"
            )
    if offline and kwargs.get("mode", "offline") != "offline":
        raise bad_value("WandbLogger(mode)", kwargs["mode"], '"offline" (or leave it out) with offline=True')
