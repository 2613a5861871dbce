"""The Trainer's arguments as one typed, validated dataclass: bad input fails before any work."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ..callbacks.timer import parse_duration
from ..config.clip_algorithm import GradClipAlgorithmType
from ..config.paths import user_dir
from ..config.registry import PRECISIONS, STRATEGIES
from ..errors import MisconfigurationError, SurgeTypeError, bad_value
from ..profiler.base import Profiler
from ..rank_zero import info
from ..speed.activation_checkpointing import check_policy
from ..speed.compiling import CompileSpec, compile_spec
from .declared import Resolves
from .lightning import check_lightning_arguments, lightning_defaults
from .plugins import Plugins

if TYPE_CHECKING:
    from ..accelerators.base import Accelerator
    from ..callbacks.base import Callback
    from ..loggers.base import Logger
    from ..precision.base import Precision
    from ..speed.activation_checkpointing import CheckpointPolicy, Policy
    from ..strategies.base import Strategy

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")
PROFILER_NAMES = ("simple", "advanced", "pytorch")
NONFINITE_MODES = ("raise", "skip", "warn", "rollback")
GOODPUT_REPORTS = ("line", "table", "off")  # what the fit's end says of the goodput ledger
MATMUL_PRECISIONS = ("highest", "high", "medium")


def _is_accelerator(value: Any) -> bool:
    from ..accelerators.base import Accelerator

    return isinstance(value, Accelerator)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int, allowed: str) -> None:
    if not _is_int(value) or value < low:
        raise bad_value(name, value, allowed)


def _check_limit(name: str, value: Any) -> None:
    if _is_int(value):
        if value < 0:
            raise bad_value(
                name, value, "an int >= 0 (a number of batches) or a float in [0.0, 1.0] (a fraction)"
            )
    elif isinstance(value, float):
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise bad_value(name, value, "a float in [0.0, 1.0] (a fraction of the batches) or an int >= 0")
    else:
        raise bad_value(
            name, value, "an int >= 0 (a number of batches) or a float in [0.0, 1.0] (a fraction)"
        )


@dataclass(kw_only=True)
class TrainerConfig:
    """Every Trainer argument, checked once in `__post_init__` with a message naming the field.
    What each means is written in meanings.py (a test fails while a field has no meaning there)."""

    max_epochs: Resolves[int | None, int] = Resolves(None)  # None: 1000, or -1 with a step/time limit
    min_epochs: Resolves[int | None, int] = Resolves(None)  # None: 0, or 1 with min_steps (Lightning's)
    max_steps: int = -1
    limit_train_batches: Resolves[int | float | None, int | float] = Resolves(None)
    limit_val_batches: Resolves[int | float | None, int | float] = Resolves(None)
    limit_test_batches: Resolves[int | float | None, int | float] = Resolves(None)
    limit_predict_batches: Resolves[int | float | None, int | float] = Resolves(None)
    val_check_interval: Resolves[int | float | None, int | float] = Resolves(None)
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: Resolves[int | None, int] = Resolves(2)
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None  # None: "norm" (kept None, as Lightning hands hooks None)
    precision: Resolves[str | int | Precision | None, str | Precision] = Resolves("32-true")  # a name
    accelerator: str | Accelerator = "auto"  # a name, or an Accelerator object
    devices: int | str | list[int] = "auto"
    strategy: str | Strategy = "auto"
    num_nodes: int = 1
    callbacks: Resolves[list[Callback] | Callback | None, list[Callback]] = Resolves(None)
    logger: Resolves[bool | Logger | list[Logger] | None, bool | Logger | list[Logger]] = Resolves(True)
    default_root_dir: Resolves[str | Path | None, str] = Resolves(None)  # a str, as Lightning's
    enable_progress_bar: Resolves[bool | None, bool] = Resolves(True)
    enable_checkpointing: Resolves[bool | None, bool] = Resolves(True)
    enable_model_summary: Resolves[bool | None, bool] = Resolves(True)
    log_every_n_steps: Resolves[int | None, int] = Resolves(50)
    deterministic: bool | str | None = None
    use_distributed_sampler: bool = True
    benchmark: bool | None = None
    matmul_precision: str | None = None
    compile: Resolves[bool | str | dict[str, Any], CompileSpec | None] = Resolves(False)  # None: off
    channels_last: bool = False
    on_nonfinite: str | None = "warn"
    effective_batch_size: int | None = None
    scale_lr: str | None = None
    reference_batch_size: int | None = None
    num_workers: int | str | None = None
    profiler: str | Profiler | None = None
    fast_dev_run: Resolves[int | bool, int] = Resolves(False)  # True is 1
    overfit_batches: int | float = 0.0
    max_time: Resolves[str | dict[str, float] | timedelta | None, timedelta | None] = Resolves(None)
    detect_anomaly: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    min_steps: int | None = None
    inference_mode: bool = True
    sync_batchnorm: bool = False
    barebones: bool = False
    plugins: Resolves[Any, Plugins] = Resolves(None)  # a plugin or a list: one decided value
    model_registry: str | None = None
    async_checkpoint: bool = False
    activation_checkpointing: Resolves[CheckpointPolicy | None, Policy | None] = Resolves(None)
    enable_autolog_hparams: bool = True
    goodput_report: str | None = None  # None: "line"; under `surge run` "off" unless SURGE_GOODPUT says
    max_epochs_defaulted: bool = field(
        default=False, init=False
    )  # None and no other limit: 1000, said at fit

    def __post_init__(self) -> None:
        self._min_epochs_with_min_steps()
        lightning_defaults(self)
        if self.max_epochs is not None:
            _check_int("max_epochs", self.max_epochs, -1, "an int >= 0, -1 for no limit, or None")
        _check_int("min_epochs", self.min_epochs, 0, "an int >= 0")
        _check_int("max_steps", self.max_steps, -1, "an int >= 0, or -1 for no limit")
        self.max_time = parse_duration(self.max_time, "max_time")
        if self.max_epochs is None:  # as Lightning: a step or time limit alone sets no epoch limit
            self.max_epochs_defaulted = (
                self.max_steps == -1 and self.max_time is None and not self.fast_dev_run
            )
            self.max_epochs = -1 if self.max_steps != -1 or self.max_time is not None else 1000
        self._check_debugging()
        check_lightning_arguments(self)
        for name in (
            "limit_train_batches",
            "limit_val_batches",
            "limit_test_batches",
            "limit_predict_batches",
        ):
            _check_limit(name, getattr(self, name))
        self._check_val_interval()
        _check_int(
            "num_sanity_val_steps", self.num_sanity_val_steps, -1, "an int >= 0, or -1 for all batches"
        )
        _check_int(
            "accumulate_grad_batches",
            self.accumulate_grad_batches,
            1,
            "an int >= 1 (batches per optimizer step)",
        )
        self._check_clipping()
        self.precision = self._normalise_precision(self.precision)
        if not _is_accelerator(self.accelerator) and self.accelerator not in ACCELERATORS:
            raise bad_value(
                "accelerator", self.accelerator, f"one of {ACCELERATORS} or an Accelerator object"
            )
        self._check_devices()
        self._check_strategy()
        _check_int("num_nodes", self.num_nodes, 1, "an int >= 1")
        self._check_callbacks()
        for name in (
            "enable_progress_bar",
            "enable_checkpointing",
            "enable_model_summary",
            "use_distributed_sampler",
        ):
            if not isinstance(getattr(self, name), bool):
                raise bad_value(name, getattr(self, name), "True or False")
        _check_int("log_every_n_steps", self.log_every_n_steps, 0, "an int >= 0 (0: no step logging)")
        if self.deterministic not in (None, True, False, "warn"):
            raise bad_value("deterministic", self.deterministic, 'None, True, False or "warn"')
        self._check_speed_options()
        self.activation_checkpointing = check_policy(self.activation_checkpointing)
        self._check_tuning()
        root = self.default_root_dir
        if root is not None and not isinstance(root, str | os.PathLike):
            raise bad_value("default_root_dir", root, "None (the current directory), a str or a path")
        self.default_root_dir = str(user_dir("default_root_dir", root) if root is not None else Path.cwd())
        if not isinstance(self.async_checkpoint, bool):
            raise bad_value("async_checkpoint", self.async_checkpoint, "True or False")

    def _check_debugging(self) -> None:
        """fast_dev_run, overfit_batches, detect_anomaly, reload_dataloaders_every_n_epochs; the
        first two set the batch limits as Lightning does (said once, not silently)."""
        n = self.fast_dev_run
        if not isinstance(n, bool) and not (_is_int(n) and n >= 0):
            raise bad_value("fast_dev_run", n, "True (1 batch), False, or an int >= 0 (batches per stage)")
        self.fast_dev_run = n = int(n)
        _check_limit("overfit_batches", self.overfit_batches)
        if not isinstance(self.detect_anomaly, bool):
            raise bad_value("detect_anomaly", self.detect_anomaly, "True or False")
        _check_int(
            "reload_dataloaders_every_n_epochs",
            self.reload_dataloaders_every_n_epochs,
            0,
            "an int >= 0 (0: never)",
        )
        if n:
            for name in (
                "limit_train_batches",
                "limit_val_batches",
                "limit_test_batches",
                "limit_predict_batches",
            ):
                setattr(self, name, n)
            self.max_steps, self.max_epochs, self.num_sanity_val_steps = n, 1, 0
            self.val_check_interval, self.check_val_every_n_epoch, self.logger = 1.0, 1, False
            self.overfit_batches = 0.0
            info(
                f"fast_dev_run={n}: runs {n} batch(es) of each stage; the batch limits, max_steps, "
                "max_epochs and the sanity check are set by it, and logging and checkpointing are off."
            )
        elif self.overfit_batches:
            self.limit_train_batches = self.limit_val_batches = self.overfit_batches
            info(
                f"overfit_batches={self.overfit_batches}: limit_train_batches and limit_val_batches are set "
                "to it, and the train dataloader does not shuffle (the same batches every epoch)."
            )

    def _check_speed_options(self) -> None:
        if self.benchmark not in (None, True, False):
            raise bad_value("benchmark", self.benchmark, "None, True or False")
        if self.matmul_precision is not None and self.matmul_precision not in MATMUL_PRECISIONS:
            raise bad_value("matmul_precision", self.matmul_precision, f"None or one of {MATMUL_PRECISIONS}")
        # parsed here only, into what every part reads (the field's resolved type, which __set__ does not list)
        self.compile = compile_spec(self.compile)  # type: ignore[assignment]
        if not isinstance(self.channels_last, bool):
            raise bad_value("channels_last", self.channels_last, "True or False")
        if (
            self.profiler is not None
            and not isinstance(self.profiler, Profiler)
            and self.profiler not in PROFILER_NAMES
        ):
            raise bad_value(
                "profiler", self.profiler, f"None, one of {PROFILER_NAMES} or a surge.profiler.Profiler"
            )
        if self.goodput_report is not None and self.goodput_report not in GOODPUT_REPORTS:
            raise bad_value(
                "goodput_report", self.goodput_report, f"one of {GOODPUT_REPORTS}, or None for one line"
            )
        if self.on_nonfinite is not None and self.on_nonfinite not in NONFINITE_MODES:
            raise bad_value("on_nonfinite", self.on_nonfinite, f"one of {NONFINITE_MODES} or None")

    def _check_tuning(self) -> None:
        if self.effective_batch_size is not None:
            _check_int(
                "effective_batch_size",
                self.effective_batch_size,
                1,
                "None or an int >= 1 (samples per optimizer step)",
            )
            if self.accumulate_grad_batches != 1:
                raise MisconfigurationError(
                    f"effective_batch_size={self.effective_batch_size} sets accumulate_grad_batches itself, but "
                    f"accumulate_grad_batches={self.accumulate_grad_batches} was given too; pass one of them."
                )
        if self.scale_lr not in (None, "linear", "sqrt"):
            raise bad_value("scale_lr", self.scale_lr, 'None, "linear" or "sqrt"')
        if self.reference_batch_size is not None:
            _check_int("reference_batch_size", self.reference_batch_size, 1, "None or an int >= 1")
        if (self.scale_lr is None) != (self.reference_batch_size is None):
            raise MisconfigurationError(
                f"scale_lr={self.scale_lr!r} and reference_batch_size={self.reference_batch_size!r} go together: "
                "the rates are scaled by (effective batch / reference_batch_size); give both or neither."
            )
        if self.num_workers is not None and self.num_workers != "auto":
            _check_int(
                "num_workers", self.num_workers, 0, 'None (keep the loaders\' own), "auto" or an int >= 0'
            )

    def _check_val_interval(self) -> None:
        if self.check_val_every_n_epoch is not None:  # None: the interval counts across epochs
            _check_int("check_val_every_n_epoch", self.check_val_every_n_epoch, 1, "an int >= 1 or None")
        value = self.val_check_interval
        if _is_int(value):
            if value < 1:
                raise bad_value(
                    "val_check_interval", value, "an int >= 1 (training batches) or a float in (0.0, 1.0]"
                )
        elif not isinstance(value, float) or not 0.0 < value <= 1.0:
            raise bad_value(
                "val_check_interval", value, "a float in (0.0, 1.0] (a fraction of the epoch) or an int >= 1"
            )

    def _check_clipping(self) -> None:
        clip = self.gradient_clip_val
        if clip is not None and (
            isinstance(clip, bool) or not isinstance(clip, int | float) or clip < 0 or math.isnan(clip)
        ):
            raise bad_value("gradient_clip_val", clip, "None or a number >= 0")
        if self.gradient_clip_val == 0:
            self.gradient_clip_val = None
        algorithm = self.gradient_clip_algorithm
        if algorithm is not None:  # any case, as Lightning: "Norm" is "norm"
            if not isinstance(algorithm, str) or not GradClipAlgorithmType.supported_type(algorithm.lower()):
                raise bad_value("gradient_clip_algorithm", algorithm, 'None, "norm" or "value"')
            self.gradient_clip_algorithm = GradClipAlgorithmType(algorithm.lower())

    def _min_epochs_with_min_steps(self) -> None:
        """As Lightning: `min_steps` without `min_epochs` means at least one epoch, so a stop
        requested before the first epoch waits for `min_steps`."""
        if self.min_epochs is None and self.min_steps is not None:
            self.min_epochs = 1

    @staticmethod
    def _normalise_precision(value: Any) -> Any:
        """A registered name for a name or an alias (ints too: 16 is "16"); a Precision object as it is."""
        from ..precision.base import Precision

        if isinstance(value, Precision):
            return value
        name = PRECISIONS.name_of(str(value) if _is_int(value) else value)
        if name is None:
            aliases = ", ".join(a if a.isdigit() else repr(a) for a in PRECISIONS.aliases)
            raise bad_value(
                "precision",
                value,
                f"one of {sorted(PRECISIONS.names)} (aliases: {aliases}) or a surge.precision.Precision",
            )
        return name

    def _check_strategy(self) -> None:
        from ..strategies.base import Strategy

        if isinstance(self.strategy, Strategy):
            return
        if isinstance(self.strategy, str):  # any case, as Lightning: "DDP" is "ddp"
            self.strategy = self.strategy.lower()
        if self.strategy == "auto":
            return
        name = STRATEGIES.name_of(self.strategy)
        if name is None:
            allowed = ("auto", *STRATEGIES.names)
            raise bad_value("strategy", self.strategy, f"one of {allowed} or a Strategy object")
        self.strategy = name

    def _check_devices(self) -> None:
        d = self.devices
        allowed = 'an int >= 1, -1 (all), "auto", a list of distinct indices or a string like "0,2"'
        if d == "auto" or (_is_int(d) and (d >= 1 or d == -1)):
            return
        if isinstance(d, str):
            parts = [p.strip() for p in d.split(",") if p.strip()]
            if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
                raise bad_value("devices", d, allowed)
            if len(parts) == 1 and not d.strip().endswith(","):
                if int(parts[0]) < 1:
                    raise bad_value("devices", d, allowed)
                self.devices = int(parts[0])
            else:
                self.devices = [int(p) for p in parts]
            return
        if (
            isinstance(d, list | tuple)
            and d
            and all(_is_int(i) and i >= 0 for i in d)
            and len(set(d)) == len(d)
        ):
            self.devices = list(d)
            return
        raise bad_value("devices", d, allowed)

    def _check_callbacks(self) -> None:
        from ..callbacks.base import Callback

        cbs = self.callbacks
        if cbs is None:
            cbs = []
        elif isinstance(cbs, Callback):
            cbs = [cbs]
        if not isinstance(cbs, list | tuple):
            raise SurgeTypeError(f"callbacks={cbs!r} is not valid: pass a Callback or a list of them.")
        for cb in cbs:
            if not isinstance(cb, Callback):
                raise SurgeTypeError(
                    f"callbacks contains {cb!r} ({type(cb).__name__}), which is not a surge Callback."
                )
        self.callbacks = list(cbs)
