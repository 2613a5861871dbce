"""`ModelCheckpoint`: save the training state on a schedule, keep the best k, and a `last.ckpt`."""

from __future__ import annotations

import datetime
import math
import re
import string
import time
from pathlib import Path
from typing import Any, TypeGuard

from ..checkpoint import is_surge_checkpoint, remove_stale_temporaries
from ..errors import MisconfigurationError, SurgeRuntimeError, bad_value
from ..paths import user_dir, writable_dir
from ..rank_zero import warn
from ..shard_files import remove_orphan_shards
from .base import Callback

_FIELD = re.compile(r"\{([^{}:!]+)([^{}]*)\}")


class ModelCheckpoint(Callback):
    """Writes checkpoints to `dirpath` (default: `<log_dir>/checkpoints`).

    When: every `every_n_epochs` epochs (default 1), every `every_n_train_steps` optimizer steps, or
    whenever `train_time_interval` (seconds or a timedelta) has passed since the last save, for
    long epochs. With several processes the time-based decision is agreed each step (rank clocks
    differ), so all ranks save together.

    `filename` is a template over `epoch`, `step` and logged metrics, e.g. `"{epoch}-{val_loss:.3f}"`
    (written `epoch=3-val_loss=0.123.ckpt`). With `monitor`, keeps the `save_top_k` best by `mode`;
    without, keeps the latest `save_top_k`. An old file is deleted only after its replacement is on disk.
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool | None = None,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = None,
        train_time_interval: datetime.timedelta | float | None = None,
        save_weights_only: bool = False,
        auto_insert_metric_name: bool = True,
        verbose: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise bad_value("ModelCheckpoint(mode)", mode, '"min" or "max"')
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
            raise bad_value("ModelCheckpoint(save_top_k)", save_top_k, "an int >= -1 (-1 keeps all)")
        for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise bad_value(f"ModelCheckpoint({name})", value, "None or an int >= 0")
        if isinstance(train_time_interval, datetime.timedelta):
            train_time_interval = train_time_interval.total_seconds()
        if train_time_interval is not None and (
            isinstance(train_time_interval, bool)
            or not isinstance(train_time_interval, int | float)
            or train_time_interval <= 0
        ):
            raise bad_value(
                "ModelCheckpoint(train_time_interval)",
                train_time_interval,
                "None, seconds > 0 or a timedelta",
            )
        if train_time_interval is not None and every_n_train_steps:
            raise MisconfigurationError(
                f"ModelCheckpoint(every_n_train_steps={every_n_train_steps}, train_time_interval={train_time_interval}): "
                "choose one schedule for saves inside an epoch."
            )
        self.train_time_interval = train_time_interval
        self._timer = time.monotonic()
        self.dirpath = user_dir("ModelCheckpoint(dirpath)", dirpath) if dirpath is not None else None
        self._dirpath_given = dirpath is not None
        if filename is not None:
            _check_filename(filename, save_last)
        self.filename = filename
        self.monitor, self.mode, self.save_top_k, self.save_last = monitor, mode, save_top_k, save_last
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = (
            every_n_epochs
            if every_n_epochs is not None
            else (0 if every_n_train_steps or train_time_interval else 1)
        )
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.best_k_models: dict[str, float] = {}
        self.kth_best_model_path = ""
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.last_model_path = ""
        self._recent: list[str] = []  # unmonitored checkpoints, oldest first
        self._last_saved_step = -1
        self._restored: dict[str, Any] | None = None
        self._doomed: list[str] = []

    @property
    def state_key(self) -> str:
        timed = f", train_time_interval={self.train_time_interval}" if self.train_time_interval else ""
        return f"ModelCheckpoint{{monitor={self.monitor!r}, mode={self.mode!r}, every_n_train_steps={self.every_n_train_steps}, every_n_epochs={self.every_n_epochs}{timed}}}"

    # -- when --------------------------------------------------------------------------------
    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = Path(trainer.log_dir) / "checkpoints"
        # Before the cleanup below, whose own EROFS/EACCES would hide the cause, and before any training.
        where = (
            f"ModelCheckpoint(dirpath={str(self.dirpath)!r})"
            if self._dirpath_given
            else f"the checkpoint directory {str(self.dirpath)!r} (under default_root_dir={str(trainer.default_root_dir)!r})"
        )
        writable_dir(self.dirpath, where)
        if trainer.is_global_zero:
            remove_stale_temporaries(self.dirpath)
            remove_orphan_shards(self.dirpath)
        if self._restored is not None:
            self._apply_restored(self._restored)
            self._restored = None

    def on_train_start(self, trainer: Any, module: Any) -> None:
        if self._restored is not None:  # restored after setup() (a resumed fit restores then)
            self._apply_restored(self._restored)
            self._restored = None
        self._timer = time.monotonic()

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        trainer.strategy.check_checkpoints()  # a background write's error, at this step boundary
        every = self.every_n_train_steps
        step = trainer.global_step
        if every and step > 0 and step % every == 0 and step != self._last_saved_step:
            self._save(trainer)
        elif self.train_time_interval is not None and step != self._last_saved_step:
            due = time.monotonic() - self._timer >= self.train_time_interval
            if trainer.world_size > 1:
                due = trainer.strategy.reduce_bool(due)  # every rank saves, or none (one small all_reduce)
            if due:
                self._save(trainer)
                self._timer = time.monotonic()

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        every = self.every_n_epochs
        if every and (trainer.current_epoch + 1) % every == 0 and trainer.fit_loop.epoch_done:
            self._save(trainer)

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        # A validation inside an epoch (val_check_interval < 1) is a checkpoint point of its own.
        loop = trainer.fit_loop
        inside_epoch = not loop.epoch_done and loop.batches_done < trainer.num_training_batches
        if trainer.fitting and not trainer.sanity_checking and inside_epoch and self.every_n_epochs:
            self._save(trainer)

    def on_train_end(self, trainer: Any, module: Any) -> None:
        # A run ended by max_steps inside an epoch still leaves its last state behind.
        if (
            trainer.global_step != self._last_saved_step
            and trainer.fit_loop.batches_done > 0
            and trainer.global_step > 0
        ):
            self._save(trainer)

    # -- what --------------------------------------------------------------------------------
    def _save(self, trainer: Any) -> None:
        if trainer.fast_dev_run:
            return  # a fast_dev_run writes no checkpoints, as in Lightning
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        self._last_saved_step = trainer.global_step
        if self.monitor is not None and self.monitor not in metrics:
            warn(
                f"ModelCheckpoint(monitor={self.monitor!r}) found no such metric (logged: {sorted(metrics)}); skipped"
            )
            if self.save_last:
                self._write_last(trainer, None)
            return
        written = None
        if self.save_top_k != 0:
            written = self._save_top_k(trainer, metrics)
        if self.save_last:
            self._write_last(trainer, written)
        # Old checkpoints go only after the new one and last.ckpt are committed (a sharded last.ckpt
        # may still name an old checkpoint's shards until it is replaced).
        for path in self._doomed:
            trainer.strategy.remove_checkpoint(path)
        self._doomed.clear()
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.after_save_checkpoint(self)

    def _save_top_k(self, trainer: Any, metrics: dict[str, float]) -> Path | None:
        path = self._unique(self.format_filename(trainer.current_epoch, trainer.global_step, metrics))
        if self.monitor is None:
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
            self._recent.append(str(path))
            self.best_model_path = self.last_model_path = str(path)
            while self.save_top_k != -1 and len(self._recent) > self.save_top_k:
                self._remove(trainer, self._recent.pop(0))
            return path
        score = metrics[self.monitor]
        if math.isnan(score):
            score = math.inf if self.mode == "min" else -math.inf
        if self.save_top_k != -1 and len(self.best_k_models) >= self.save_top_k:
            worst = self._worst()
            if not self._better(score, self.best_k_models[worst]):
                return None
        trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        self.best_k_models[str(path)] = score
        if self.save_top_k != -1 and len(self.best_k_models) > self.save_top_k:
            worst = self._worst()
            del self.best_k_models[worst]
            self._remove(trainer, worst)
        best = (
            min(self.best_k_models, key=self.best_k_models.__getitem__)
            if self.mode == "min"
            else max(self.best_k_models, key=self.best_k_models.__getitem__)
        )
        self.best_model_path, self.best_model_score = best, self.best_k_models[best]
        self.kth_best_model_path = self._worst()
        self.last_model_path = str(path)
        return path

    def _folder(self) -> Path:
        """`dirpath`, known from `setup` on."""
        if self.dirpath is None:
            raise SurgeRuntimeError("ModelCheckpoint: setup() must run before it saves or restores")
        return self.dirpath

    def _write_last(self, trainer: Any, written: Path | None) -> None:
        last = self._folder() / f"last{self.FILE_EXTENSION}"
        if written is not None:
            trainer.strategy.link_checkpoint(written, last)  # once `written` is durable
        else:
            trainer.save_checkpoint(last, weights_only=self.save_weights_only)
        self.last_model_path = str(last)

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b

    def _worst(self) -> str:
        pick = max if self.mode == "min" else min
        return pick(self.best_k_models, key=self.best_k_models.__getitem__)

    def _remove(self, trainer: Any, path: str) -> None:
        if Path(path).name != f"last{self.FILE_EXTENSION}":
            self._doomed.append(path)

    def _unique(self, name: str) -> Path:
        folder = self._folder()
        path = folder / f"{name}{self.FILE_EXTENSION}"
        version = 1
        while str(path) in self.best_k_models or str(path) in self._recent or path.exists():
            path = folder / f"{name}-v{version}{self.FILE_EXTENSION}"
            version += 1
        return path

    def format_filename(self, epoch: int, step: int, metrics: dict[str, float]) -> str:
        """The file stem for `filename` (default `"{epoch}-{step}"`) with these values."""
        template = self.filename or "{epoch}-{step}"
        values = {**metrics, "epoch": epoch, "step": step}

        def fill(match: re.Match) -> str:
            name, spec = match.group(1), match.group(2)
            if name not in values:
                raise MisconfigurationError(
                    f"ModelCheckpoint(filename={template!r}) uses {{{name}}}, which was not logged by the save at "
                    f"epoch {epoch}, step {step}; log it with self.log({name!r}, ...) or take it out of the filename. "
                    f"Available: {sorted(values)}"
                )
            text = format(values[name], spec[1:] if spec.startswith(":") else "")
            return f"{name}={text}" if self.auto_insert_metric_name else text

        return _FIELD.sub(fill, template).replace("/", "_")

    def state_dict(self) -> dict[str, Any]:
        return {
            "dirpath": str(self.dirpath) if self.dirpath else "",
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "last_model_path": self.last_model_path,
            "recent": list(self._recent),
            "monitor": self.monitor,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = dict(state)  # applied in setup(), once this run's directory is known

    def _apply_restored(self, state: dict[str, Any]) -> None:
        if state.get("dirpath") != str(self.dirpath):
            return  # a new run directory: the earlier run's files are not ours to rank or delete
        recent, scores = state.get("recent"), state.get("best_k_models")
        recent = recent if isinstance(recent, list) else []
        scores = scores if isinstance(scores, dict) else {}
        named = [*recent, *scores, *(state.get(k) for k in _PATH_KEYS)]
        own = {p for p in named if self._is_own_checkpoint(p)}
        # a file gone is one this callback deleted after the state was taken (the older top-k)
        dropped = sorted({repr(p) for p in named if p not in own and p and Path(p).exists()})
        if dropped:
            warn(
                f"ModelCheckpoint: the checkpoint being resumed names files that are not surge checkpoints in "
                f"{self.dirpath}: {', '.join(dropped)}; they are dropped from its lists (never read or deleted)"
            )
        self._recent = [p for p in recent if p in own]
        self.best_k_models = {p: float(v) for p, v in scores.items() if p in own and _is_score(v)}
        for key in _PATH_KEYS:
            setattr(self, key, state[key] if state.get(key) in own else "")
        score = state.get("best_model_score")
        self.best_model_score = float(score) if self.best_model_path and _is_score(score) else None

    def _is_own_checkpoint(self, value: Any) -> bool:
        """Whether `value` names a surge checkpoint file directly inside this callback's `dirpath`."""
        if not isinstance(value, str) or not value:
            return False
        path = Path(value)
        if path.suffix != self.FILE_EXTENSION or path.resolve().parent != self._folder().resolve():
            return False
        return path.is_file() and is_surge_checkpoint(path)


_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def _is_score(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_filename(template: Any, save_last: bool | None) -> None:
    """What can be known before any save: a str template whose fields are names with a format spec
    that fits their value (an int for `epoch`/`step`, a float for metrics), and no clash with last.ckpt."""
    arg = f"ModelCheckpoint(filename={template!r})"
    if not isinstance(template, str) or not template:
        raise bad_value(
            "ModelCheckpoint(filename)", template, 'None or a non-empty str like "{epoch}-{val_loss:.3f}"'
        )
    try:
        fields = [
            (name, spec or "", conv)
            for _, name, spec, conv in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as err:
        raise MisconfigurationError(
            f'{arg} is not valid: {err}; braces must pair up around a name, as in "{{epoch}}-{{val_loss:.3f}}".'
        ) from err
    if "{{" in template or "}}" in template:
        raise MisconfigurationError(f"{arg} is not valid: literal braces ({{{{ or }}}}) are not supported.")
    for name, spec, conv in fields:
        if not name or conv is not None or "{" in spec:
            raise MisconfigurationError(
                f"{arg} is not valid: each field must be a name with an optional format spec, like {{epoch}} or "
                "{val_loss:.3f} (no empty {}, !r conversions or nested fields)."
            )
        sample = 0 if name in ("epoch", "step") else 1.0
        try:
            format(sample, spec)
        except ValueError as err:
            kind = "an int" if name in ("epoch", "step") else "a float metric"
            raise MisconfigurationError(
                f"{arg} is not valid: the format spec {spec!r} of {{{name}}} does not fit {kind} ({err})."
            ) from err
    if save_last and not fields and template.replace("/", "_") == "last":
        raise MisconfigurationError(
            f"{arg} with save_last=True is not valid: the top-k files would be written as last.ckpt, the file "
            "save_last keeps; choose another filename."
        )
