"""`ModelSummary`: the module's layers, parameter counts and size, printed at fit start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from ..errors import bad_value
from ..rank_zero import info
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer


def summarize(module: nn.Module, max_depth: int = 1) -> str:
    """A table of the top-level children with parameter counts, then totals and size in MB."""
    rows = [("", "Name", "Type", "Params")]
    for i, (name, child) in enumerate(module.named_children()):
        rows.append((str(i), name, type(child).__name__, _human(sum(p.numel() for p in child.parameters()))))
    params = list(module.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    size_mb = sum(p.numel() * p.element_size() for p in params) / 1e6
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines += [
        "-" * len(lines[0]),
        f"{_human(trainable)} trainable params",
        f"{_human(total - trainable)} non-trainable params",
        f"{_human(total)} total params",
        f"{size_mb:.3f} MB total parameter size",
    ]
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return str(n)


class ModelSummary(Callback):
    """Prints `summarize(module)` when fit starts (rank zero)."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if summarize_kwargs:  # Lightning passes them on to its summary, which takes none outside DeepSpeed
            raise bad_value(f"{type(self).__name__}(**summarize_kwargs)", summarize_kwargs, "none")
        self.max_depth = max_depth

    def on_fit_start(self, trainer: Trainer, module: nn.Module) -> None:
        if trainer.is_global_zero:
            info(summarize(module, self.max_depth))
