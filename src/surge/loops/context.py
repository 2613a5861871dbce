"""What the loops work with: plain objects the Trainer builds at setup and hands down.

The Trainer appears here only as the first argument the loops pass to callbacks (`Hooks.trainer`),
as their public API promises, and as `Checkpointing`, the typed view a preemption's checkpoint
uses. What changes during a fit (loaders, plan, accumulation) is `FitData`'s, not the context's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..config.semantics import SURGE, Semantics
from .fit_end import FitEnd

if TYPE_CHECKING:
    from ..callbacks.trainer_views import Checkpointing
    from ..launch.signals import SignalFlag
    from ..metrics.publisher import MetricsPublisher
    from ..metrics.results import Results
    from ..module import Module
    from ..optim import Optimization
    from ..precision import Precision
    from ..profiler import Profiler
    from ..profiler.flops import StepFlops
    from ..strategies import Strategy
    from .control import StopRequest
    from .fit_data import FitData
    from .hooks import Hooks
    from .rollback import Rollback
    from .validation import Validation


@dataclass(frozen=True)
class RunParts:
    """The parts every loop uses: the module as set up, how it runs, its hooks, where metrics go."""

    module: Module
    strategy: Strategy
    precision: Precision
    hooks: Hooks
    move: Callable[..., Any] | None  # the batch's way to the device (None: it is there already)
    publisher: MetricsPublisher
    evaluation_mode: Callable[[], AbstractContextManager[Any]] = torch.no_grad  # or torch.inference_mode
    semantics: Semantics = SURGE  # whose behaviour the run follows where surge's and Lightning's differ


@dataclass(frozen=True)
class FitSettings:
    """The fit's resolved settings (the tuners' decisions are `FitData`'s)."""

    max_epochs: int
    min_epochs: int
    min_steps: int  # early stopping waits for both minimums
    max_steps: int
    log_every_n_steps: int  # 0: nothing logs per step (no loggers)


@dataclass(frozen=True)
class FitContext:
    """Everything a fit's loop uses besides its own counters, fixed for the fit."""

    parts: RunParts
    settings: FitSettings
    optim: Optimization
    results: Results  # the training step's logged values, kept on the device
    data: FitData  # the loaders, the batch plan, the accumulation: what changes during the fit
    validation: Validation
    stop: StopRequest  # `trainer.should_stop`
    checkpointing: Checkpointing  # a preemption's checkpoint
    signals: SignalFlag
    profiler: Profiler | None
    training_step: Callable[..., Any] | None = None  # compile="step": the compiled step
    rollback: Rollback | None = None  # a SpikeGuard's checks, snapshots and rollbacks
    flops: StepFlops | None = None  # counts the fit's first step (goodput's FLOP/s and MFU)
    end: FitEnd = field(default_factory=FitEnd)  # what the fit's end says (counts batches)

    def training_step_fn(self) -> Callable[..., Any]:
        """What runs `training_step`: the compiled step, else the strategy's (through any wrapper)."""
        if self.training_step is not None:
            return self.training_step
        return self.parts.strategy.step_fn(self.parts.module, "training_step")
