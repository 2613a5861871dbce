"""The Module's hooks that do nothing by default, declared as methods with Lightning's signatures
(its `ModelHooks` and `CheckpointHooks`): a subclass overrides the ones it needs, and the loops call
only those (`loops/hooks.py`). `HOOKS`, the names, is read from this class, not written again."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import Tensor
from torch.optim import Optimizer

StepOutput = Tensor | Mapping[str, Any] | None  # what a step returns (Lightning's STEP_OUTPUT)


class ModelHooks:
    """No-op hooks; each is called (callbacks first, then the Module) only where overridden."""

    def on_fit_start(self) -> None:
        """At the very start of fit()."""

    def on_fit_end(self) -> None:
        """At the very end of fit()."""

    def on_train_start(self) -> None:
        """After the sanity check, before the first training epoch."""

    def on_train_end(self) -> None:
        """After the last training epoch."""

    def on_train_epoch_start(self) -> None:
        """Before each training epoch's first batch."""

    def on_train_epoch_end(self) -> None:
        """After each training epoch (before the monitoring callbacks: they see what it logs)."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Before a training batch; returning -1 skips the rest of the epoch."""

    def on_train_batch_end(self, outputs: StepOutput, batch: Any, batch_idx: int) -> None:
        """After a training batch (`outputs`: what training_step returned, detached)."""

    def on_validation_start(self) -> None:
        """Before validation runs."""

    def on_validation_end(self) -> None:
        """After validation ran."""

    def on_validation_epoch_start(self) -> None:
        """Before validation's first batch."""

    def on_validation_epoch_end(self) -> None:
        """After validation's last batch."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a validation batch."""

    def on_validation_batch_end(
        self, outputs: StepOutput, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """After a validation batch."""

    def on_test_start(self) -> None:
        """Before testing runs."""

    def on_test_end(self) -> None:
        """After testing ran."""

    def on_test_epoch_start(self) -> None:
        """Before testing's first batch."""

    def on_test_epoch_end(self) -> None:
        """After testing's last batch."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a test batch."""

    def on_test_batch_end(
        self, outputs: StepOutput, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """After a test batch."""

    def on_predict_start(self) -> None:
        """Before prediction runs."""

    def on_predict_end(self) -> None:
        """After prediction ran."""

    def on_predict_epoch_start(self) -> None:
        """Before prediction's first batch."""

    def on_predict_epoch_end(self) -> None:
        """After prediction's last batch."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a prediction batch."""

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a prediction batch."""

    def on_before_backward(self, loss: Tensor) -> None:
        """Before the backward of `loss`."""

    def on_after_backward(self) -> None:
        """After the backward, before the gradients are unscaled and clipped."""

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        """Before `optimizer` steps (gradients unscaled, and clipped unless the hook clips)."""

    def on_before_zero_grad(self, optimizer: Optimizer) -> None:
        """Before `optimizer`'s gradients are zeroed."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add to (or change) the checkpoint dict before it is written."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read what `on_save_checkpoint` added, when a checkpoint is loaded."""


def hook_names(cls: type) -> tuple[str, ...]:
    """The hooks declared in `cls`'s own body, in their order: its public functions."""
    return tuple(
        name for name, value in vars(cls).items() if inspect.isfunction(value) and not name.startswith("_")
    )


HOOKS = hook_names(ModelHooks)
