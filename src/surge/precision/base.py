"""The Precision interface: autocast around steps, casts, backward and the optimizer step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..rank_zero import info

M = TypeVar("M", bound=torch.nn.Module)  # a module converted in place, returned as itself
R = TypeVar("R")


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Tensors created inside default to `dtype` (floating and complex); the previous default after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class Precision:
    """Full precision of the module's own dtype; the base of every precision plugin.

    A plugin owns all numeric-format decisions: the loops only call these methods. A subclass
    registers its name with `surge.precision.register_precision` to be chosen by `precision="..."`,
    or is passed as an object, `Trainer(precision=MyPrecision())`.
    """

    name = "custom"  # what messages and `trainer.precision_plugin.name` call it
    param_dtype: torch.dtype | None = None  # set by "-true" plugins that cast the module
    fp32_matmuls = False  # True when matmuls run in plain fp32 (tensor cores would be faster)

    @classmethod
    def from_name(cls, name: str, device_type: str) -> Precision:
        """The plugin for the registered `name` on `device_type` ("cpu", "cuda", "mps")."""
        return cls()

    def forward_context(self) -> contextlib.AbstractContextManager:
        """The context every step hook runs in (autocast for mixed modes)."""
        return _NO_CONTEXT  # one object for every step (nullcontext is reusable)

    def in_forward_context(self, fn: Callable[..., R]) -> Callable[..., R]:
        """`fn` run inside `forward_context()` (the training loop binds it once per epoch): `fn`
        itself where that context does nothing, so an fp32 step makes no context calls."""
        if self.forward_context() is _NO_CONTEXT:
            return fn
        forward_context = self.forward_context

        def in_context(*args: Any, **kwargs: Any) -> R:
            with forward_context():
                return fn(*args, **kwargs)

        return in_context

    def convert_module(self, module: M) -> M:
        """Cast the module's parameters for "-true" modes; a no-op otherwise."""
        return module

    def module_init_context(self) -> contextlib.AbstractContextManager:
        """The context `configure_model` runs in: "-true" modes create the layers in their dtype
        (no fp32 copy first; a complex buffer becomes the matching complex dtype)."""
        return default_dtype(self.param_dtype) if self.param_dtype is not None else contextlib.nullcontext()

    def convert_input(self, batch: Any) -> Any:
        """Cast floating-point inputs for "-true" modes; a no-op otherwise."""
        return batch

    @property
    def converts_input(self) -> bool:
        return False

    def backward(self, loss: Tensor, run: Callable[[Tensor], None] | None = None) -> None:
        """The backward of `loss`; `run`: the Module's own `backward`, given the (scaled) loss."""
        if run is None:
            loss.backward()
        else:
            run(loss)

    def loss_backward(self) -> Callable[[Tensor], None]:
        """What the training loop hands each (scaled) loss to, bound once per epoch: `Tensor.backward`
        itself where `backward` is this base's, so a step makes no call of the precision's."""
        return Tensor.backward if type(self).backward is Precision.backward else self.backward

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Make gradients true-scale before clipping (loss-scaling plugins override)."""

    def optimizer_step(
        self, optimizer: Optimizer, clip: Callable[[], None] | None, step: Callable[[], Any] | None = None
    ) -> bool:
        """Clip and step; returns False if the step was skipped (non-finite gradients under fp16).
        `step`: what steps `optimizer` instead of its own `step()` (compile="step"'s compiled one)."""
        if clip is not None:
            clip()
        if step is None:
            optimizer.step()
        else:
            step()
        return True

    def shard_loss_scaling(self) -> None:
        """Make loss scaling agree across shards (a sharding strategy calls this); nothing to scale here."""

    def sharded_dtypes(self) -> tuple[torch.dtype, torch.dtype] | None:
        """(parameter dtype, gradient-reduction dtype) for a sharding strategy's gathers; None: as stored."""
        return None

    def after_optimizer_steps(self) -> None:
        """Called once after every optimizer of a step has stepped (the fp16 scaler updates here)."""

    @property
    def skips_nonfinite_steps(self) -> bool:
        """Whether this precision skips an optimizer step whose gradients hold inf/NaN itself (a loss
        scaler does), so the non-finite guard leaves those steps to it."""
        return False

    @property
    def skipped_steps(self) -> int:
        return 0

    def report_skipped_steps(self) -> None:
        """Say at the end of fit how many optimizer steps the loss scaler skipped, if any."""
        if self.skipped_steps:
            info(
                f"{self.name}: {self.skipped_steps} optimizer steps were skipped for inf/NaN gradients "
                "(the loss scale backed off; the weights were not touched)."
            )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


_NO_CONTEXT = contextlib.nullcontext()
