"""`ModelCheckpoint`: save the training state on a schedule, keep the best k, and a `last.ckpt`,
with Lightning's arguments, attributes, save points and file names."""

import datetime
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ..config.paths import DirectoryClaim, user_dir
from ..errors import MisconfigurationError, SurgeRuntimeError
from ..loggers.checkpoint_uploads import SavedCheckpoints, tell_loggers
from ..rank_zero import info, warn
from .base import Callback
from .batch_end import quiet_batch_end
from .checkpoint_dir import prepare_directory
from .checkpoint_options import (
    IntervalClock,
    Schedule,
    check_arguments,
    check_filename,
    fill_template,
    free_name,
    missing_monitor,
    monitor_candidates,
    saves_on_train_epoch_end,
    validates_after_epoch,
)
from .checkpoint_restore import own_files, warn_if_moved

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import Saving


class ModelCheckpoint(Callback):
    """Writes checkpoints to `dirpath` (default: `<log_dir>/checkpoints`).

    When (Lightning's rules): every `every_n_epochs` epochs (default 1) at the training epoch's end,
    or after validation when it does not run once per epoch (`save_on_train_epoch_end` decides when
    given); every `every_n_train_steps` optimizer steps; or every `train_time_interval` (a timedelta
    or seconds). At most one save per global step. `filename` is a template over `epoch`, `step` and
    logged metrics (`"{epoch}-{val_loss:.3f}"` -> `epoch=3-val_loss=0.123.ckpt`). With `monitor` (a
    logged metric, `"epoch"` or `"step"`) keeps the `save_top_k` best by `mode`, ranked by the value
    at the save (a step metric's at that step); without, the latest. A taken name gets `-v1`
    (`enable_version_counter`), as does a new run's `last.ckpt`. An old file is deleted only after
    its replacement is on disk. A second live run given the same `dirpath` is refused.
    """

    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: Literal[True, False, "link"] | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: datetime.timedelta | float | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        check_arguments(mode, save_top_k, save_last, monitor)
        schedule = Schedule.of(every_n_train_steps, every_n_epochs, train_time_interval)
        self.every_n_train_steps, self.every_n_epochs = schedule.every_n_train_steps, schedule.every_n_epochs
        self.train_time_interval = schedule.train_time_interval
        self._interval_given = train_time_interval  # as given: part of the state key, as in Lightning
        # a str, `~` expanded and links resolved (Lightning's); None: `<log_dir>/checkpoints`, at setup
        self.dirpath = (
            None if dirpath is None else os.path.realpath(user_dir("ModelCheckpoint(dirpath)", dirpath))
        )
        self._dirpath_given = dirpath is not None
        if filename is not None:
            check_filename(filename, save_last)
        self.filename = filename
        self.monitor, self.mode, self.save_top_k, self.save_last = monitor, mode, save_top_k, save_last
        self.verbose, self.save_on_exception = verbose, save_on_exception
        self.save_weights_only, self.auto_insert_metric_name = save_weights_only, auto_insert_metric_name
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = enable_version_counter
        self.current_score: Tensor | None = None
        self.best_k_models: dict[str, Tensor] = {}
        self.kth_best_model_path = self.best_model_path = self.last_model_path = ""
        self.kth_value = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.best_model_score: Tensor | None = None
        self._recent: list[str] = []  # unmonitored checkpoints, oldest first (save_top_k > 1)
        self._last_saved_step, self._last_saved = 0, ""  # no save before the first optimizer step
        self._clock = IntervalClock(self.train_time_interval)
        self._defer = False  # a step save waits for the validation that logs the monitored metric
        self._val_has_run = self._warned_missing = False
        self._unannounced = False  # saved since the loggers were last told
        self._restored: dict[str, Any] | None = None
        self._doomed: list[str] = []
        self._claim: DirectoryClaim | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self.every_n_train_steps,
            every_n_epochs=self.every_n_epochs,
            train_time_interval=self._interval_given,
        )

    # -- the run -----------------------------------------------------------------------------
    def setup(self, trainer: "Trainer", pl_module: Any, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = str(Path(trainer.log_dir) / "checkpoints")
        if stage == "fit" and not trainer.fast_dev_run:  # only a fit saves: no folder for others
            resuming = (
                trainer.ckpt_path is not None and not trainer.semantics.warns_full_checkpoint_dir_on_resume
            )
            warn_if_full = self.save_top_k != 0 and not resuming  # a resume's folder holds the run's files
            self._claim = prepare_directory(
                trainer, Path(self.dirpath), self._dirpath_given, warn_if_full, self._claim
            )
        self._val_has_run = self._defer = False
        if self._restored is not None:
            warn_if_moved(self._restored, self.dirpath)
        self._apply_restored()

    def teardown(self, trainer: "Trainer", module: Any, stage: str) -> None:
        if self._claim is not None and stage == "fit":
            self._claim.release()

    def on_train_start(self, trainer: "Trainer", module: Any) -> None:
        self._apply_restored()  # restored after setup() (a resumed fit restores then)
        self._clock.restart()

    def batch_end_idle(self, trainer: "Trainer") -> bool:
        """No step or time interval and no background write to check: nothing to do per batch."""
        asynchronous = trainer.strategy.checkpoint_writer.asynchronous
        return self.every_n_train_steps < 1 and self._clock.seconds is None and not asynchronous

    @quiet_batch_end
    def on_train_batch_end(
        self, trainer: "Trainer", module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        trainer.strategy.check_checkpoints()  # a background write's error, at this step boundary
        every, step = self.every_n_train_steps, trainer.global_step
        skip_batch = every < 1 or step % every != 0
        skip_time = not (module.automatic_optimization and self._clock.due(trainer))
        if skip_batch and skip_time:
            return
        candidates = monitor_candidates(trainer)  # this step's values: read at a save only
        if self.monitor is not None and self.monitor not in candidates:
            self._defer = True  # saved after the validation that logs it
            return
        if (
            self.monitor is not None
            and module.automatic_optimization
            and not saves_on_train_epoch_end(self.save_on_train_epoch_end, trainer)
            and trainer.fit_loop.batches_done >= trainer.num_training_batches
            and validates_after_epoch(trainer)
        ):
            self._defer = True  # the epoch's last batch: the validation about to run has fresher values
            return
        if not self._skip(trainer):
            self._save_topk_and_last(trainer, candidates)

    def on_train_epoch_end(self, trainer: "Trainer", module: Any) -> None:
        if not self._skip(trainer) and saves_on_train_epoch_end(self.save_on_train_epoch_end, trainer):
            self._epoch_save(trainer, monitor_candidates(trainer))

    def on_validation_end(self, trainer: "Trainer", module: Any) -> None:
        if trainer.fitting and not trainer.sanity_checking and any(trainer.num_val_batches):
            self._val_has_run = True
        if self._skip(trainer) or saves_on_train_epoch_end(self.save_on_train_epoch_end, trainer):
            return
        candidates = monitor_candidates(trainer)
        if self._defer:
            self._defer = False
            self._save_topk_and_last(trainer, candidates)
        else:
            self._epoch_save(trainer, candidates)

    def on_exception(self, trainer: "Trainer", module: Any, exception: BaseException) -> None:
        skip = trainer.fast_dev_run or trainer.sanity_checking or self._last_saved_step == trainer.global_step
        if self.save_on_exception and not skip:
            candidates = monitor_candidates(trainer)
            path = self.format_checkpoint_name(candidates)
            self._save_checkpoint(trainer, path)
            self._save_last(trainer, candidates)
            self._commit(trainer)
            info(f"An {type(exception).__name__} was raised with message: {exception}, saved to {path}")
        self.teardown(trainer, module, "fit")  # a failed fit gives the directory back too

    def on_train_end(self, trainer: "Trainer", module: Any) -> None:
        if self.save_last and not self._last_saved:  # save_last=True leaves a last.ckpt whatever the schedule
            self._save_last(trainer, monitor_candidates(trainer))
            self._commit(trainer)

    # -- when --------------------------------------------------------------------------------
    def _skip(self, trainer: "Saving") -> bool:
        return (
            bool(trainer.fast_dev_run)  # a fast_dev_run writes no checkpoints, as in Lightning
            or not trainer.fitting
            or trainer.sanity_checking
            or self._last_saved_step == trainer.global_step
        )

    def _epoch_save(self, trainer: "Saving", candidates: dict[str, Tensor]) -> None:
        every = self.every_n_epochs
        if every >= 1 and (trainer.current_epoch + 1) % every == 0:
            self._save_topk(trainer, candidates)
        if self._last_saved_step == trainer.global_step:
            self._save_last(trainer, candidates)
        self._commit(trainer)

    # -- what --------------------------------------------------------------------------------
    def _save_topk_and_last(self, trainer: "Saving", candidates: dict[str, Tensor]) -> None:
        self._save_topk(trainer, candidates)
        self._save_last(trainer, candidates)
        self._commit(trainer)

    def _save_topk(self, trainer: "Saving", candidates: dict[str, Tensor]) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            self._save_latest(trainer, candidates)
            return
        current = candidates.get(self.monitor)
        if current is None:  # an error once validation has run, as in Lightning; before, a warning
            message = missing_monitor(self.monitor, candidates)
            if self._val_has_run:
                raise MisconfigurationError(message)
            if not self._warned_missing:
                self._warned_missing = True
                warn(message)
            return
        current = current.detach().float().reshape(()).cpu()  # the host read of a save; kept in its state
        if self._qualifies(trainer, current):
            self._update_best_and_save(trainer, current, candidates)
        elif self.verbose:
            info(
                f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: "
                f"{self.monitor!r} was not in top {self.save_top_k}"
            )

    def _qualifies(self, trainer: "Saving", current: Tensor) -> bool:
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        kth = float(self.best_k_models[self.kth_best_model_path])
        better = float(current) < kth if self.mode == "min" else float(current) > kth
        return trainer.strategy.reduce_bool(better) if trainer.world_size > 1 else better

    def _update_best_and_save(
        self, trainer: "Saving", current: Tensor, candidates: dict[str, Tensor]
    ) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        doomed = ""
        if len(self.best_k_models) == k:
            doomed = self.kth_best_model_path
            self.best_k_models.pop(doomed)
        if math.isnan(float(current)):
            current = torch.tensor(math.inf if self.mode == "min" else -math.inf)
        path = self._free_name(trainer, lambda v: self.format_checkpoint_name(candidates, ver=v), keep=doomed)
        self.current_score = current
        self.best_k_models[path] = current
        if len(self.best_k_models) == k:
            self.kth_best_model_path = self._worst()
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        pick = min if self.mode == "min" else max
        self.best_model_path = pick(self.best_k_models, key=lambda p: float(self.best_k_models[p]))
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose:
            info(
                f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: {self.monitor!r} "
                f"reached {float(current):0.5f} (best {float(self.best_model_score):0.5f}), saving model to "
                f"{path!r} as top {k}"
            )
        self._save_checkpoint(trainer, path)
        if doomed:
            self._remove(trainer, doomed, path)

    def _save_latest(self, trainer: "Saving", candidates: dict[str, Tensor]) -> None:
        """No monitor: the newest checkpoint is the best; `save_top_k` newest files are kept."""
        previous = self.best_model_path
        path = self._free_name(
            trainer, lambda v: self.format_checkpoint_name(candidates, ver=v), keep=previous
        )
        self.best_model_path = path
        self._save_checkpoint(trainer, path)
        if path not in self._recent:
            self._recent.append(path)
        while self.save_top_k != -1 and len(self._recent) > self.save_top_k:
            self._remove(trainer, self._recent.pop(0), path)

    def _save_last(self, trainer: "Saving", candidates: dict[str, Tensor]) -> None:
        if not self.save_last:
            return
        name = self.CHECKPOINT_NAME_LAST
        path = self._free_name(
            trainer, lambda v: self.format_checkpoint_name(candidates, name, ver=v), self.last_model_path
        )
        previous, self.last_model_path = self.last_model_path, path
        same = self._last_saved and self._last_saved_step == trainer.global_step
        symbolic = self.save_last == "link"
        if not (same and trainer.strategy.link_checkpoint(Path(self._last_saved), Path(path), symbolic)):
            self._save_checkpoint(
                trainer, path
            )  # else a hard link (a symlink: "link") once the source is durable
        if previous:
            self._remove(trainer, previous, path)

    def _save_checkpoint(self, trainer: "Saving", path: str) -> None:
        trainer.save_checkpoint(path, self.save_weights_only)
        self._last_saved_step, self._last_saved = trainer.global_step, path
        self._unannounced = True

    def _commit(self, trainer: "Saving") -> None:
        """Delete the files pushed out, now that what replaced them (and last.ckpt) is written; the
        loggers (log_model uploads) hear of new files once durable: after a background write."""
        for path in self._doomed:
            trainer.strategy.remove_checkpoint(path)
        self._doomed.clear()
        if self._unannounced and trainer.is_global_zero and trainer.loggers:
            saved, loggers = SavedCheckpoints.of(self), list(trainer.loggers)
            trainer.strategy.checkpoint_writer.then(lambda: tell_loggers(loggers, saved))
        self._unannounced = False

    def _remove(self, trainer: "Saving", previous: str, current: str) -> None:
        """Delete `previous` later, unless it is `current`, the resumed checkpoint, or outside `dirpath`."""
        if previous == current or previous in self._doomed:
            return
        if trainer.ckpt_path is not None and Path(previous).absolute() == Path(trainer.ckpt_path).absolute():
            return
        if self._folder().absolute() in Path(previous).absolute().parents:
            self._doomed.append(previous)

    def _free_name(self, trainer: "Saving", name_of: Any, keep: str = "") -> str:
        """`name_of(None)`, or with the first version `-vN` no file has (a file `keep` is ours to
        replace). On several processes rank zero's choice, as Lightning's: another rank may
        already see the file rank zero has just written under that name."""
        if not self.enable_version_counter:
            return name_of(None)
        path = free_name(name_of, keep, {*self.best_k_models, *self._recent}, self.STARTING_VERSION)
        return trainer.strategy.broadcast(path) if trainer.world_size > 1 else path

    def _worst(self) -> str:
        pick = max if self.mode == "min" else min
        return pick(self.best_k_models, key=lambda p: float(self.best_k_models[p]))

    def _folder(self) -> Path:  # `dirpath`, known from `setup` on
        if self.dirpath is None:
            raise SurgeRuntimeError("ModelCheckpoint: setup() must run before it saves or restores")
        return Path(self.dirpath)

    def format_checkpoint_name(
        self,
        metrics: dict[str, Any],
        filename: str | None = None,
        ver: int | None = None,
        prefix: str | None = None,
    ) -> str:
        """The path of a checkpoint with these values (Lightning's): `filename` (default `"{epoch}-{step}"`)
        filled, then `-v{ver}`, under `dirpath`."""
        template = filename or self.filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}"
        name = fill_template(template, metrics, self.auto_insert_metric_name, self.CHECKPOINT_EQUALS_CHAR)
        if prefix is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join([prefix, name])
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join([name, f"v{ver}"])
        file = f"{name}{self.FILE_EXTENSION}"
        return os.path.join(self.dirpath, file) if self.dirpath else file

    def to_yaml(self, filepath: str | Path | None = None) -> None:
        """Write `best_k_models` (path: score) as YAML to `filepath` (default `dirpath/best_k_models.yaml`)."""
        import yaml

        with open(filepath or self._folder() / "best_k_models.yaml", "w") as f:
            yaml.dump({path: float(score) for path, score in self.best_k_models.items()}, f)

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "recent": list(self._recent),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = dict(state)  # applied in setup(), once this run's directory is known
        if self.dirpath is not None:  # else warned at setup, where it is known
            warn_if_moved(state, self.dirpath)

    def _apply_restored(self) -> None:
        state, self._restored = self._restored, None  # taken back once
        if state is None or state.get("dirpath") != self.dirpath:
            return  # a new run directory: the earlier run's files are not ours to rank or delete
        kept = own_files(state, self._folder(), self.FILE_EXTENSION)
        self._recent, self.best_k_models = kept.recent, kept.best_k_models
        self.best_model_path, self.kth_best_model_path = kept.best_model_path, kept.kth_best_model_path
        self.last_model_path, self.best_model_score = kept.last_model_path, kept.best_model_score
        self.current_score = kept.current_score
        self.kth_value = self.kth_value if kept.kth_value is None else kept.kth_value
