"""A check of the optimizers a compiled step (compile="step" with a scheduler) will hand each
learning rate as a 0-d tensor: torch's Adam and AdamW refuse that with `foreach=True,
capturable=False`. It lives with the optimizers, below `speed/compiling.py`, which runs it at set-up,
and `Optimization`, which runs it again on what a checkpoint restores."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from ..errors import MisconfigurationError


def refuse_foreach_with_tensor_lr(optimizers: list[Optimizer], restored_from: str | None = None) -> None:
    """torch's Adam (and AdamW) refuse a tensor lr with `foreach=True, capturable=False`, deep inside
    the first compiled step: say so before the fit, naming the argument and the fixes. With
    `restored_from`, the groups are a checkpoint's (torch's load_state_dict brings its settings back)."""
    for i, opt in enumerate(optimizers):
        groups = [g for g in opt.param_groups if g.get("foreach") is True and g.get("capturable") is False]
        if isinstance(opt, torch.optim.Adam | torch.optim.AdamW) and groups:
            name = type(opt).__name__
            if restored_from is not None:
                raise MisconfigurationError(
                    f"compile='step' with a learning-rate scheduler hands its compiled step each lr as a 0-d tensor, "
                    f"and torch's {name} refuses a tensor lr with foreach=True and capturable=False: "
                    f"{restored_from} restores optimizer {i} ({name}) with foreach=True and capturable=False "
                    "(torch's load_state_dict brings back the saved param groups' settings, whatever the "
                    f"optimizer is built with now). Resume it with compile=True (the forward only) or "
                    "without compile."
                )
            raise MisconfigurationError(
                f"compile='step' with a learning-rate scheduler hands its compiled step each lr as a 0-d tensor "
                f"(so a new rate does not recompile), and torch's {name} refuses a tensor lr with "
                f"foreach=True and capturable=False (optimizer {i}, {name}(foreach=True)). Pass "
                f"{name}(..., foreach=True, capturable=True), leave foreach unset, or use fused=True; "
                "or compile=True (the forward only)."
            )
