"""Real training steps outside the fit loop, and putting everything back afterwards.

The tuners train for a few steps to measure something (memory, loss). `TrialSteps` runs those
steps with a Trainer's device and precision plugin (`trial_target`); `preserved()` snapshots what they change
(parameters, buffers, gradients, train/eval modes, optimizer and precision state, RNG) and
restores it exactly, so a tuned model continues as if no trial had run.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .. import data as data_mod
from ..accelerators import resolve_accelerator
from ..errors import MisconfigurationError, SurgeTypeError
from ..module import Module
from ..optim import parse_optimizers
from ..optim.manual import batch_only
from ..precision import Precision, precision_plugin
from ..seed import rng_state, set_rng_state

if TYPE_CHECKING:
    from ..trainer import Trainer


@dataclass(frozen=True)
class TrialTarget:
    """Where trial steps run: the device, the precision plugin, and the Trainer (if any) the module
    sees as `self.trainer` meanwhile."""

    device: torch.device
    precision: Precision
    trainer: Trainer | None = None


def trial_target(trainer: Trainer | None) -> TrialTarget:
    """A Trainer's device and precision, or without one those a default Trainer would use (the
    best available accelerator, full precision)."""
    if trainer is not None:
        return TrialTarget(trainer.root_device, trainer.precision_plugin, trainer)
    accelerator = resolve_accelerator("auto")
    return TrialTarget(accelerator.device(0), precision_plugin("32-true", accelerator.name))


def train_loader(model: Module, given: Any, tuner: str) -> Any:
    """`given`, else what the model's own `train_dataloader()` returns."""
    if given is not None:
        return given
    hook = getattr(model, "train_dataloader", None)
    if not callable(hook):
        raise MisconfigurationError(
            f"{tuner}: train_dataloaders=None and {type(model).__name__} defines no train_dataloader(); "
            "pass train_dataloaders=."
        )
    return hook()


@contextlib.contextmanager
def preserved(model: Module, precision: Precision) -> Iterator[None]:
    """Run the body, then restore the model, the precision plugin's state and every RNG.

    Tensors are put back with `.data =`, so Parameter objects keep their identity (and an
    optimizer built before still points at them) while dtype and device return to the original.
    The snapshot lives on the CPU so it does not take accelerator memory from the trial.
    """
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    saved = {name: t.detach().to("cpu", copy=True) for name, t in tensors.items()}
    devices = {name: t.device for name, t in tensors.items()}
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    modes = {name: m.training for name, m in model.named_modules()}
    precision_state = copy.deepcopy(precision.state_dict())
    rng = rng_state()
    previous = model._slots()  # what to put back
    try:
        yield
    finally:
        for name, t in tensors.items():
            t.data = saved[name].to(devices[name])
        for name, p in model.named_parameters():
            p.grad = grads.get(name)
        for name, m in model.named_modules():
            m.training = modes.get(name, m.training)
        precision.load_state_dict(precision_state)
        set_rng_state(rng)
        model._attach(**previous)


class TrialSteps:
    """Forward, backward and optimizer step of `model.training_step`, with the Trainer's precision
    (with `optimize=False`: evaluation steps, in eval mode, without optimizers).

    Used as `with preserved(model, target.precision), TrialSteps(model, target) as steps:`. It moves (and, for "-true" precisions, casts) the model, and
    calls `configure_optimizers()`; on exit the optimizers' states (rates included) are put back.
    """

    def __init__(self, model: Module, target: TrialTarget, optimize: bool = True) -> None:
        if not isinstance(model, Module):
            raise SurgeTypeError(f"model must be a surge.Module, got {type(model).__name__}")
        if optimize and not model.automatic_optimization:
            raise MisconfigurationError(
                "the tuners run automatic optimization; a module with automatic_optimization=False "
                "steps its own optimizers, so tune it by hand."
            )
        self.model, self.precision, self.device = model, target.precision, target.device
        model._attach(trainer=target.trainer, results=_DROPPED)  # self.log drops values silently here
        if model.device != self.device or self.precision.param_dtype is not None:
            model.to(self.device)
            self.precision.convert_module(model)
            model._attach(device=self.device)
        model.train(optimize)
        self.optimizers, _ = parse_optimizers(model.configure_optimizers()) if optimize else ([], [])
        self._optimizer_states = [copy.deepcopy(opt.state_dict()) for opt in self.optimizers]

    def __enter__(self) -> TrialSteps:
        return self

    def __exit__(self, *exc: Any) -> None:
        # configure_optimizers() may return an optimizer the module keeps: undo the trial's steps.
        for opt, state in zip(self.optimizers, self._optimizer_states):
            opt.load_state_dict(state)

    def move(self, batch: Any) -> Any:
        if self.device.type != "cpu":
            batch = data_mod.move_to_device(batch, self.device)
        return self.precision.convert_input(batch) if self.precision.converts_input else batch

    def loss(self, batch: Any, batch_idx: int) -> Tensor:
        """Forward and backward of one batch; returns the loss, detached."""
        with self.precision.forward_context():
            out = batch_only(self.model.training_step, self.model.training_step)(batch, batch_idx)
        loss = out["loss"] if isinstance(out, dict) else out
        if not isinstance(loss, Tensor):
            raise MisconfigurationError(
                f"training_step returned {type(out).__name__}; the tuners need the loss tensor or a dict with 'loss'."
            )
        self.precision.backward(loss)
        return loss.detach()

    def step(self, batch: Any, batch_idx: int) -> Tensor:
        """One full training step (forward, backward, optimizer step, zero_grad); the loss."""
        loss = self.loss(self.move(batch), batch_idx)
        for opt in self.optimizers:
            self.precision.optimizer_step(opt, None)
            opt.zero_grad(set_to_none=True)
        self.precision.after_optimizer_steps()
        return loss

    def evaluate(self, batch: Any, batch_idx: int, step: str) -> None:
        """One evaluation step (`step`: "validation_step", "test_step" or "predict_step"), without gradients."""
        with torch.no_grad(), self.precision.forward_context():
            getattr(self.model, step)(self.move(batch), batch_idx)

    def set_lr(self, lr: float) -> None:
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr


class _Dropped:
    """Where `self.log` goes during trial steps: nowhere."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass


_DROPPED: Any = _Dropped()
