"""What a Lightning precision plugin does when a user calls it directly (outside the Trainer):
cast a module, its inputs and outputs, the dtype contexts for creating layers and running steps,
gradient clipping, and the loss scaler's state.

The Trainer never calls these: it runs surge's own precision object (`surge_precision()`), which
has the same numeric format. What is here answers as Lightning's plugin answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.optim import Optimizer

from ...data import cast_floating
from ...errors import SurgeRuntimeError
from ...precision.base import default_dtype


class PrecisionMethods:
    """The public methods of Lightning's `Precision`; `init_dtype`: the default dtype while layers
    are created and steps run (None: as it is)."""

    precision: str
    init_dtype: torch.dtype | None = None

    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> tuple[Any, Any, Any]:
        """What the Trainer would wrap: returned as they are."""
        return model, optimizers, lr_schedulers

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(self.init_dtype) if self.init_dtype is not None else module

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.init_dtype) if self.init_dtype is not None else contextlib.nullcontext()

    def module_init_context(self) -> contextlib.AbstractContextManager:
        return self.tensor_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager:
        return self.tensor_init_context()

    def train_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def val_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def test_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def predict_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def convert_input(self, data: Any) -> Any:
        return cast_floating(data, self.init_dtype) if self.init_dtype is not None else data

    def convert_output(self, data: Any) -> Any:
        return data

    def main_params(self, optimizer: Optimizer) -> Iterator[torch.nn.Parameter]:
        for group in optimizer.param_groups:
            yield from group["params"]

    def clip_gradients(
        self, optimizer: Optimizer, clip_val: float = 0.0, gradient_clip_algorithm: Any = "norm"
    ) -> None:
        """Clip by "value" or "norm" (a `GradClipAlgorithmType` or its string); nothing if `clip_val` <= 0."""
        if clip_val <= 0:
            return
        if gradient_clip_algorithm == "value":
            self.clip_grad_by_value(optimizer, clip_val)
        elif gradient_clip_algorithm == "norm":
            self.clip_grad_by_norm(optimizer, clip_val)

    def clip_grad_by_value(self, optimizer: Optimizer, clip_val: float) -> None:
        torch.nn.utils.clip_grad_value_(list(self.main_params(optimizer)), clip_value=clip_val)

    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: float) -> None:
        torch.nn.utils.clip_grad_norm_(list(self.main_params(optimizer)), clip_val)

    def state_dict(self) -> dict[str, Any]:
        scaler = getattr(self, "scaler", None)
        return scaler.state_dict() if scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        scaler = getattr(self, "scaler", None)
        if scaler is not None:
            scaler.load_state_dict(state_dict)

    def teardown(self) -> None:
        """Nothing to release."""


class AutocastMethods(PrecisionMethods):
    """Mixed precision: steps under autocast; the layers stay as created."""

    device: str
    dtype: torch.dtype

    def autocast_context_manager(self) -> torch.autocast:
        return torch.autocast(self.device, dtype=self.dtype, cache_enabled=False)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return self.autocast_context_manager()

    def clip_gradients(
        self, optimizer: Optimizer, clip_val: float = 0.0, gradient_clip_algorithm: Any = "norm"
    ) -> None:
        if clip_val > 0 and getattr(optimizer, "_step_supports_amp_scaling", False):
            raise SurgeRuntimeError(
                f"The current optimizer, {type(optimizer).__qualname__}, does not allow for gradient clipping"
                " because it performs unscaling of gradients internally (a 'fused' optimizer): clip without"
                " fused=True, or do not clip."
            )
        super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)
