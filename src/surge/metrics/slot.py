"""One logged name: its options, its latest value and its running epoch aggregate, folded in on the
device with no host read; Python numbers are summed as float32 sums them (as Lightning, which logs
them as tensors), to the bit."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

Number = int | float
Value = Tensor | Number


@dataclass(slots=True)
class Slot:
    """One logged name: its options, its latest value and its running epoch aggregate."""

    name: str
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    logger: bool
    reduce_fx: str
    sync_dist: bool
    add_dataloader_idx: bool = True
    last: Value | None = None
    total: Value | None = None
    weight: float = 0.0
    metric: Any = None  # a torchmetrics.Metric: it aggregates the epoch itself
    product: Tensor | None = None  # a mean's `value * batch_size`, reused across steps

    def accumulate(self, value: Value, batch_size: int) -> None:
        """Fold one step into the epoch aggregate, in place on the device (no host read). A Python
        number is summed as the default dtype (float32) sums it, as Lightning, which logs it as a tensor."""
        total = self.total
        fx = self.reduce_fx
        if not isinstance(value, Tensor) and fx in ("mean", "sum"):
            value = as_default_float(value)
        if fx == "mean":
            self._add_weighted(value, batch_size)
        elif total is None:
            self.total = _floating(value).clone() if isinstance(value, Tensor) else value
        elif fx == "sum":
            if isinstance(total, Tensor):
                total.add_(value)
            elif isinstance(value, Tensor):
                self.total = total + value
            else:
                self.total = as_default_float(total + value)
        elif isinstance(total, Tensor) or isinstance(value, Tensor):
            pick = torch.maximum if fx == "max" else torch.minimum
            self.total = pick(torch.as_tensor(total), torch.as_tensor(value, device=_device_of(total)))
        else:
            self.total = max(total, value) if fx == "max" else min(total, value)

    def _add_weighted(self, value: Value, batch_size: int) -> None:
        """A mean's step: `value * batch_size` into the total, `batch_size` into the weight."""
        total = self.total
        if total is None:
            self.total = (
                _floating(value) * batch_size
                if isinstance(value, Tensor)
                else as_default_float(value * batch_size)
            )
        elif isinstance(total, Tensor) and isinstance(value, Tensor):
            # The product rounded, then added, as Lightning sums: add_(alpha=) rounds once, and the
            # epoch mean would differ in its last bits.
            product = self.product
            if product is None or product.dtype != total.dtype or product.device != total.device:
                product = self.product = torch.empty_like(total)
            total.add_(torch.mul(value, batch_size, out=product))
        elif isinstance(value, Tensor):
            self.total = total + value * batch_size
        elif isinstance(total, Tensor):
            total.add_(as_default_float(value * batch_size))
        else:
            self.total = as_default_float(total + as_default_float(value * batch_size))
        self.weight += batch_size

    def epoch_value(self) -> Value | None:
        """The epoch aggregate (still on the device)."""
        if self.total is None:
            return None
        if self.reduce_fx == "mean" and self.weight:
            mean = self.total / self.weight
            return mean if isinstance(mean, Tensor) else as_default_float(mean)
        return self.total


_SINGLE = struct.Struct("f")


def _floating(value: Tensor) -> Tensor:
    """A logged tensor as its aggregate holds it: float32 and float64 as they are (a 64-bit run's
    means stay 64-bit), any other dtype as the default one, as Lightning."""
    return value if value.dtype in (torch.float32, torch.float64) else value.to(torch.get_default_dtype())


def as_default_float(value: Number) -> float:
    """`value` as the default dtype holds it: rounded to float32 unless the default is float64. One
    float32 operation is its float64 result rounded so (float64 has more than twice the digits), so
    sums and products of these are float32's to the bit, without a tensor per logged value."""
    if torch.get_default_dtype() is torch.float64:
        return float(value)
    try:
        return _SINGLE.unpack(_SINGLE.pack(value))[0]
    except OverflowError:  # beyond float32's range: what a float32 tensor holds
        return math.copysign(math.inf, value)


def _device_of(value: Value) -> torch.device | None:
    return value.device if isinstance(value, Tensor) else None
