"""The training step of a pipeline: the accumulation window's micro-batches through one schedule.

Each loader batch is one micro-batch, `(input, target)`; an accumulation window of
`accumulate_grad_batches` of them is one optimizer step, as on one process. The fit loop calls the
step once per batch, as always: the step keeps the window's micro-batches, and at the window's last
one runs the schedule (forward and backward of every micro-batch on every stage, interleaved as the
schedule orders them). The last stage computes each micro-batch's loss with the module's
`pipeline_loss(output, target)` divided by the window (the division one process makes), where
`self.log` records metrics as `training_step` would. The value the step returns for the loop carries
the window-end micro-batch's loss (on the last stage; 0 elsewhere and before the window's end), and
its backward does nothing: the schedule has run it. That value is inf/NaN when any micro-batch's
loss of the window is, so `on_nonfinite` and a SpikeGuard see every micro-batch's trouble.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import MisconfigurationError, SurgeRuntimeError
from ..metrics.results import Results
from .pipeline_stages import SCHEDULES, Bubble, PipelineLayout

SCHEDULE_RECORD = "surge::pipeline_schedule"  # the profiler's span around each schedule run (the doctor's)


class _Ran(torch.autograd.Function):
    """A loss whose backward the schedule already ran: its own backward does nothing."""

    @staticmethod
    def forward(ctx: Any, value: Tensor, anchor: Tensor) -> Tensor:
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None]:
        return None, None


class PipelineRun:
    """This rank's stages and the schedules that run them (one per window size, made once)."""

    def __init__(
        self, module: nn.Module, stages: list[Any], layout: PipelineLayout, device: torch.device
    ) -> None:
        self.module, self.stages, self.layout = module, stages, layout
        self.first = any(s.is_first for s in stages)
        self.last = any(s.is_last for s in stages)
        loss = getattr(module, "pipeline_loss", None)
        if not callable(loss):
            raise MisconfigurationError(
                f"{layout.owner}(pipeline_parallel={layout.pipeline_parallel}) needs "
                f"{type(module).__name__}.pipeline_loss(output, target) -> Tensor: the last stage's loss "
                "for one micro-batch (log with self.log there; training_step is not run under a pipeline)."
            )
        if not getattr(module, "automatic_optimization", True):
            raise MisconfigurationError(
                f"{layout.owner}(pipeline_parallel={layout.pipeline_parallel}) does not support manual "
                f"optimization ({type(module).__name__}.automatic_optimization=False): training_step, where "
                "it would step the optimizers, is not run under a pipeline, so nothing would train. Set "
                "automatic_optimization = True; the schedule's backward and the optimizer step are surge's."
            )
        self._loss: Callable[[Tensor, Tensor], Tensor] = loss
        self._schedules: dict[int, Any] = {}
        self._anchor = torch.zeros((), device=device, requires_grad=True)  # what the returned loss hangs on
        self._zero = torch.zeros((), device=device)
        self._losses: list[Tensor] = []  # the window's micro-batch losses, on the last stage
        self._inputs: list[Tensor] = []
        self._targets: list[Tensor] = []
        self.micro_batches = 0  # of the latest schedule run

    def for_windows(self, window: int, batches: float, loader: Any) -> Callable[[Any, int], Tensor]:
        """The step for an epoch of `batches` batches from `loader` in windows of `window` (checked
        here, before its first batch)."""
        owner = f"{self.layout.owner}(pipeline_parallel={self.layout.pipeline_parallel})"
        if batches == math.inf or batches % window:
            raise MisconfigurationError(
                f"{owner} runs each window of accumulate_grad_batches={window} batches as that many "
                f"micro-batches, so an epoch's batches must be a multiple of it; this epoch has {batches}. "
                "Choose limit_train_batches, drop_last=True or a dataset size that makes it a multiple (a "
                "loader without a length cannot be used)."
            )
        short = short_last_batch(loader, batches)
        if short is not None:
            last, size = short
            raise MisconfigurationError(
                f"{owner} runs a window's micro-batches as equal slices, but this epoch's last batch holds "
                f"{last} samples where the others hold {size} (the DataLoader's samples per process do not "
                f"divide by batch_size={size}). Pass drop_last=True (to the DataLoader, or to your BatchSampler), "
                "or a batch size or limit_train_batches that leaves no short batch."
            )
        self._schedule(window)  # made now: its errors before the epoch's first batch
        self._inputs.clear()  # what an epoch cut inside a window left (on_train_batch_start's -1, a stop)
        self._targets.clear()
        self._losses.clear()
        return lambda batch, batch_idx: self.micro_batch(batch, batch_idx, window)

    def micro_batch(self, batch: Any, batch_idx: int, window: int) -> Tensor:
        """Keep one micro-batch; at the window's last, run the schedule over them all."""
        inputs, target = _pair(batch, self.layout.owner)
        self._inputs.append(inputs)
        self._targets.append(target)
        if batch_idx % window != window - 1:
            return _Ran.apply(self._zero, self._anchor)
        try:
            self._run(window)
        finally:
            self._inputs.clear()
            self._targets.clear()
        losses, self._losses = self._losses, []
        if not losses:  # not the last stage
            return _Ran.apply(self._zero, self._anchor)
        # The last micro-batch's loss, made inf/NaN by any of the window's (0 * a finite sum adds
        # exactly 0): what on_nonfinite and a SpikeGuard watch sees. On the device, no read.
        value = losses[-1] + torch.stack(losses).sum() * 0 if len(losses) > 1 else losses[0]
        return _Ran.apply(value, self._anchor)

    def _run(self, window: int) -> None:
        sizes = {t.shape[0] for t in self._targets}
        if len(sizes) > 1:
            raise SurgeRuntimeError(
                f"the micro-batches of one pipeline window have different sizes {sorted(sizes)}; the schedule "
                "runs equal ones. Use batches of one size (e.g. DataLoader(drop_last=True))."
            )
        args = (torch.cat(self._inputs),) if self.first else ()
        target = torch.cat(self._targets) if self.last else None
        self.micro_batches = window
        with torch.profiler.record_function(SCHEDULE_RECORD):
            self._schedule(window).step(*args, target=target, return_outputs=False)

    def bubble(self) -> Bubble | None:
        """The idle share of the latest schedule run's stages (None before the first run)."""
        return self.layout.bubble(self.micro_batches) if self.micro_batches else None

    def _schedule(self, window: int) -> Any:
        schedule = self._schedules.get(window)
        if schedule is None:
            cls = getattr(
                importlib.import_module("torch.distributed.pipelining"), SCHEDULES[self.layout.schedule]
            )
            single = self.layout.stages_per_rank == 1 and self.layout.schedule != "Interleaved1F1B"
            try:
                schedule = cls(
                    self.stages[0] if single else self.stages, n_microbatches=window,
                    loss_fn=self._loss_fn(window), scale_grads=False,
                )  # fmt: skip
            except ValueError as err:
                raise MisconfigurationError(
                    f"{self.layout.owner}(pipeline_schedule={self.layout.schedule!r}) cannot run "
                    f"accumulate_grad_batches={window} micro-batches on {self.layout.num_stages} stages: {err} "
                    "Choose accumulate_grad_batches accordingly (at least the number of stages)."
                ) from err
            self._schedules[window] = schedule
        return schedule

    def _loss_fn(self, window: int) -> Callable[[Tensor, Tensor], Tensor]:
        inferring = [True]  # the schedule's first call infers shapes (values not real): not logged

        def loss(output: Tensor, target: Tensor) -> Tensor:
            if inferring[0]:
                inferring[0] = False
                return self._unlogged(output, target)
            results = getattr(self.module, "_results", None)  # the fit's: self.log weighs by the micro-batch
            if results is not None:
                results.batch = target
            value = self._loss(output, target)
            self._losses.append(value.detach())
            return value / window if window != 1 else value

        return loss

    def _unlogged(self, output: Tensor, target: Tensor) -> Tensor:
        """The loss with what it logs sent to a throwaway `Results` (the schedule's shape inference)."""
        attach = getattr(self.module, "_attach", None)
        if attach is None:
            return self._loss(output, target)
        previous = attach(results=Results("train"))
        try:
            return self._loss(output, target)
        finally:
            attach(**previous)


def short_last_batch(loader: Any, batches: float) -> tuple[int, int] | None:
    """(its size, the batch size) when an epoch of `batches` batches from a DataLoader ends with a
    short batch; None when it does not or cannot be known before loading (a batch sampler of the
    user's own class, a sampler without a length)."""
    from torch.utils.data import BatchSampler, DataLoader

    # batch_size=... or batch_sampler=BatchSampler(...): both a plain BatchSampler over a sampler
    batching = getattr(loader, "batch_sampler", None) if isinstance(loader, DataLoader) else None
    if type(batching) is not BatchSampler or batching.drop_last:
        return None
    try:
        samples = len(batching.sampler)  # type: ignore[arg-type]
    except TypeError:
        return None
    full, rest = divmod(samples, batching.batch_size)
    return (rest, batching.batch_size) if rest and batches > full else None


def _pair(batch: Any, owner: str) -> tuple[Tensor, Tensor]:
    if isinstance(batch, list | tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch):
        return batch[0], batch[1]
    raise MisconfigurationError(
        f"{owner} with pipeline stages reads batches as (input, target), two tensors: the first stage's "
        f"input and pipeline_loss's target; got {type(batch).__name__}. Make the loader yield such pairs."
    )
