"""Mixed precision on torch's native amp: "16-mixed" (fp16 + dynamic loss scaling), "bf16-mixed".

Parameters and optimizer state stay fp32 (the master weights); autocast runs most maths in
16 bits. fp16 needs loss scaling so small gradients do not vanish: the GradScaler lives here and
nowhere else. bf16 has fp32's range and needs none.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..config.registry import register_precision
from .base import Precision


@register_precision("bf16-mixed", aliases=("bf16",))
@register_precision("16-mixed", aliases=("16",))
class MixedPrecision(Precision):
    """Autocast to `dtype` on `device_type`; with fp16, a dynamic `torch.amp.GradScaler`.

    A step whose gradients hold inf/NaN is skipped (the scaler backs off its scale); `optimizer_step`
    returns False for it so the loop does not advance step-interval schedulers, and it is counted.
    """

    def __init__(
        self, dtype: torch.dtype, device_type: str, scaler: torch.amp.GradScaler | None = None
    ) -> None:
        self.dtype, self.device_type = dtype, device_type
        self.name = "16-mixed" if dtype == torch.float16 else "bf16-mixed"
        if dtype == torch.float16 and scaler is None:
            scaler = torch.amp.GradScaler(device_type)
        self.scaler = scaler
        self._skipped = 0
        self._unscaled: set[int] = set()

    @classmethod
    def from_name(cls, name: str, device_type: str) -> MixedPrecision:
        return cls(torch.float16 if name == "16-mixed" else torch.bfloat16, device_type)

    def forward_context(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Tensor, run: Callable[[Tensor], None] | None = None) -> None:
        super().backward(self.scaler.scale(loss) if self.scaler is not None else loss, run)

    def loss_backward(self) -> Callable[[Tensor], None]:
        """`Tensor.backward` itself without a loss scaler (bf16): nothing to scale, no call of ours."""
        return Tensor.backward if self.scaler is None else self.backward

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self, optimizer: Optimizer, clip: Callable[[], None] | None, step: Callable[[], Any] | None = None
    ) -> bool:
        if self.scaler is None:
            return super().optimizer_step(optimizer, clip, step)
        self.unscale_gradients(optimizer)  # gradients at true scale before clipping
        if clip is not None:
            clip()
        found_inf = self.scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        # Host read: dynamic loss scaling must know whether to skip; GradScaler.step reads the
        # same flags, so this adds no stall of its own.
        skipped = bool(sum(v.item() for v in found_inf.values()))
        if step is None:
            self.scaler.step(optimizer)
        elif not skipped:  # the gradients are unscaled: what scaler.step would do, through `step`
            step()
        self._skipped += skipped
        return not skipped

    def shard_loss_scaling(self) -> None:
        """fp16: a `ShardedGradScaler`, so every rank skips the same steps."""
        if self.scaler is None:
            return
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        self.scaler = ShardedGradScaler(self.device_type)
        # The scaler multiplies sharded gradients by its 1-element scale; torch warns about that
        # shape on every step, though the result is right.
        warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")

    def sharded_dtypes(self) -> tuple[torch.dtype, torch.dtype]:
        """Gather parameters in 16 bits, reduce gradients in fp32."""
        return self.dtype, torch.float32

    def after_optimizer_steps(self) -> None:
        if self.scaler is not None:
            self.scaler.update()
            self._unscaled.clear()

    @property
    def skips_nonfinite_steps(self) -> bool:
        return self.scaler is not None

    @property
    def skipped_steps(self) -> int:
        return self._skipped

    @property
    def loss_scale(self) -> float | None:
        """The fp16 loss scale now (a host read), or None without loss scaling."""
        return self.scaler.get_scale() if self.scaler is not None else None

    def state_dict(self) -> dict[str, Any]:
        if self.scaler is None:
            return {}
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self._skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
            self._skipped = state.get("skipped_steps", 0)
