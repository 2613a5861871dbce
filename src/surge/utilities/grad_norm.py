"""`grad_norm`: each parameter's gradient norm and the total, as tensors on the device."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import MisconfigurationError


def grad_norm(
    module: nn.Module, norm_type: float | int | str, group_separator: str = "/"
) -> dict[str, torch.Tensor]:
    """The `norm_type`-norm of each parameter's gradient, keyed `grad_{p}_norm{sep}{name}`, and of
    all of them as one vector, `grad_{p}_norm_total` (`p` is `float(norm_type)`: "2.0", "inf").

    Parameters without a gradient are left out (no entry at all when none has one). The values are
    0-d tensors on the gradients' device: nothing is read to the host, so
    `self.log_dict(grad_norm(self, 2))` in `on_before_optimizer_step` costs no device sync.
    """
    p = float(norm_type)
    if not p > 0:
        raise MisconfigurationError(
            f"grad_norm(norm_type={norm_type!r}): `norm_type` must be a positive number or 'inf' (the infinity norm)."
        )
    norms = {
        f"grad_{p}_norm{group_separator}{name}": param.grad.detach().norm(p)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        values = list(norms.values())
        device = values[0].device
        norms[f"grad_{p}_norm_total"] = torch.stack([v.to(device) for v in values]).norm(p)
    return norms
