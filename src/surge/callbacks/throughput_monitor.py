"""`ThroughputMonitor`: batches, samples (and items, FLOPs) per second of training, validation,
test and predict, logged under `train/`, `validate/`, `test/`, `predict/` at the logging steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..rank_zero import warn
from .base import Callback
from .throughput import Throughput, get_available_flops

if TYPE_CHECKING:
    from ..module import Module
    from ..trainer import Trainer

_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16, "64": torch.float64}


class ThroughputMonitor(Callback):
    """Lightning's `ThroughputMonitor(batch_size_fn, length_fn=None, **kwargs)` (`kwargs`: those of
    `Throughput`: `window_size=100`, `separator="/"`).

    Each batch adds `batch_size_fn(batch)` samples (and `length_fn(batch)` items) to its stage's
    totals; the module's `flops_per_batch` attribute, if it has one, gives FLOPs. Rank zero logs
    `Throughput.compute()` prefixed by the stage: in training after a batch that ends an
    accumulation window, at the step Lightning's loggers count (`train/batches`, ...,
    `train/device/samples_per_sec` once a window of batches is in), in evaluation after each batch
    at its number across the stage's runs; only at logging steps (`log_every_n_steps`) in both.
    Validation time inside fit is not counted as training time. The clock is the host's: the
    device is synchronized only at the batches that log (Lightning waits for it after every
    batch), so a rate spans the host's view of the window's first batch, and on an asynchronous
    device may be off by the batches the host runs ahead."""

    def __init__(
        self,
        batch_size_fn: Callable[[Any], int],
        length_fn: Callable[[Any], int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.kwargs, self.batch_size_fn, self.length_fn = kwargs, batch_size_fn, length_fn
        Throughput(**kwargs)  # its arguments refused here, before any work
        self.available_flops: int | None = None
        self._throughputs: dict[str, Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._counts: dict[str, list[int]] = {}  # stage -> [batches, samples, lengths]
        self._in_run: dict[str, int] = {}  # evaluation: batches in the current run
        # Evaluation: the batch's number that is logged as the step: within the run inside fit, across
        # the runs of validate/test/predict (as Lightning's loops count them).
        self._total: dict[tuple[str, bool], int] = {}
        self._module_has_flops: bool | None = None
        self._stepped = 0  # the batches that stepped before the current one (Lightning's logger step)

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        dtype = _DTYPES.get(str(trainer.precision).split("-")[0], torch.float32)
        self.available_flops = get_available_flops(trainer.root_device, dtype)
        names = {
            "fit": ["train", "validate"],
            "validate": ["validate"],
            "test": ["test"],
            "predict": ["predict"],
        }
        for name in names.get(stage, []):
            self._throughputs[name] = Throughput(self.available_flops, trainer.world_size, **self.kwargs)

    def _start(self, trainer: Trainer, stage: str) -> None:
        if trainer.fitting or stage not in self._counts:
            self._throughputs[stage].reset()
            self._counts[stage] = [0, 0, 0]
        self._in_run[stage] = 0
        if trainer.fitting or (stage, False) not in self._total:
            self._total[(stage, trainer.fitting)] = 0
        self._t0s[stage] = time.perf_counter()

    @torch.inference_mode()  # `batch_size_fn`/`length_fn` may compute on tensors
    def _update(self, trainer: Trainer, pl_module: Module, batch: Any, stage: str) -> None:
        elapsed = time.perf_counter() - self._t0s[stage]
        counts = self._counts[stage]
        if self.length_fn is not None:
            counts[2] += self.length_fn(batch)
        if self._module_has_flops is None:
            self._module_has_flops = hasattr(pl_module, "flops_per_batch")
            if not self._module_has_flops:
                warn(
                    "When using the `ThroughputMonitor`, you need to define a `flops_per_batch` attribute or "
                    f"property in {type(pl_module).__name__} to compute the FLOPs."
                )
        counts[1] += self.batch_size_fn(batch)
        counts[0] += 1
        self._in_run[stage] += 1
        self._throughputs[stage].update(
            time=elapsed,
            batches=counts[0],
            samples=counts[1],
            lengths=None if self.length_fn is None else counts[2],
            flops=getattr(pl_module, "flops_per_batch", None) if self._module_has_flops else None,
        )

    def _due(self, trainer: Trainer, count: int) -> bool:
        """Whether a batch that brings the stage's count to `count` logs (Lightning's logging steps);
        on CUDA the device is synchronized then, so the clock read next includes its work."""
        every = trainer.log_every_n_steps
        due = every > 0 and bool(trainer.loggers) and (count % every == 0 or trainer.should_stop)
        if due and trainer.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.root_device)  # a logging step: the rates read the device's time
        return due

    def _log(self, trainer: Trainer, stage: str, step: int, epoch: bool) -> None:
        throughput = self._throughputs[stage]
        metrics: dict[str, float] = {
            f"{stage}{throughput.separator}{k}": v for k, v in throughput.compute().items()
        }
        if epoch:  # Lightning's loggers get the epoch with a training row
            metrics["epoch"] = trainer.current_epoch
        trainer.log_metrics(metrics, step=step, callback_metrics=False)

    def _eval_batch(self, trainer: Trainer, pl_module: Module, batch: Any, stage: str) -> None:
        due = self._due(trainer, self._in_run[stage] + 1)
        self._update(trainer, pl_module, batch, stage)
        key = (stage, trainer.fitting)
        self._total[key] += 1
        if due:
            self._log(trainer, stage, self._total[key], epoch=False)

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._start(trainer, "train")

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        manual = not pl_module.automatic_optimization
        self._stepped = trainer.fit_loop.total_batch_idx + 1 if manual else trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.is_global_zero:
            return
        window = 1 if not pl_module.automatic_optimization else trainer.accumulate_grad_batches
        ends_window = (batch_idx + 1) % window == 0 or batch_idx + 1 == trainer.num_training_batches
        due = ends_window and self._due(trainer, self._stepped + 1)
        self._update(trainer, pl_module, batch, "train")
        if due:
            self._log(trainer, "train", self._stepped, epoch=True)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._start(trainer, "validate")

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._eval_batch(trainer, pl_module, batch, "validate")

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.is_global_zero or trainer.sanity_checking or not trainer.fitting:
            return
        train, val = self._throughputs["train"]._time, self._throughputs["validate"]._time
        train_end = self._t0s["train"] + (train[-1] if train else 0.0)
        # Training's clock leaves out the gap before validation and validation itself.
        self._t0s["train"] += self._t0s["validate"] - train_end + (val[-1] if val else 0.0)

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._start(trainer, "test")

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.is_global_zero:
            self._eval_batch(trainer, pl_module, batch, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._start(trainer, "predict")

    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.is_global_zero:
            self._eval_batch(trainer, pl_module, batch, "predict")
