"""FLOPs of a training step, counted once, and the device's dense peak: the model FLOPs
utilisation (MFU) a goodput report gives on a GPU, the achieved FLOP/s on any device.

The count runs `FlopCount` (torch's FLOP formulas, `flop_count.py`) around the fit's first training
step (its forward and backward; the optimizer's elementwise work is not counted, as is usual for MFU).
Only that one step goes through the counting wrappers: later epochs' steps are the loop's own.
The mode is a process-wide dispatch mode (torch.compile skips every frame while one is active), so
it is closed whatever happens: at the backward's end, at the next step if no backward came, and at
the fit's end or failure (`close`). A count that no backward closed is a forward alone, no step's:
the report then gives no FLOP/s and says why (`NO_BACKWARD`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ..accelerators.peak_flops import PEAK_DENSE_FLOPS, peak_flops
from .base import LoopParts

__all__ = ["NO_BACKWARD", "PEAK_DENSE_FLOPS", "StepFlops", "peak_flops"]

NO_BACKWARD = "no backward"  # `uncounted` of a first step that ended without one (a forward alone)


class StepFlops:
    """Counts the FLOPs of the first training step it sees (`instrument` the loop's parts)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.counted: float | None = None
        self.uncounted: str | None = None  # a higher-order op the count could not see into
        self._mode: Any = None

    def instrument(self, parts: LoopParts, manual: bool = False) -> LoopParts:
        """The parts with the first step counted (from the step's start to its backward's end; under
        manual optimization, the step alone, which runs its own backward); as they are once counted."""
        if self.counted is not None:
            return parts
        return replace(
            parts, step=self._opening(parts.step, closes=manual), backward=self._closing(parts.backward)
        )

    def _opening(self, fn: Callable[..., Any], closes: bool) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self._mode is not None:  # the previous step ended without a backward
                self.close()
            if self.counted is not None:
                return fn(*args, **kwargs)
            from .flop_count import FlopCount

            self._mode = FlopCount()
            self._mode.__enter__()
            try:
                out = fn(*args, **kwargs)
            except BaseException:
                self.close()
                raise
            if closes:  # (manual optimization: the step ran its own backward)
                self._finish(whole=True)
            return out

        return counted

    def _closing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.counted is not None or self._mode is None:
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                self._finish(whole=True)

        return counted

    def close(self) -> None:
        """Ends the count if it is still open: the step ended without a backward, so what it saw is
        a forward alone, no step's count (`uncounted` says so); idempotent."""
        self._finish(whole=False)

    def _finish(self, whole: bool) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
            self.counted = float(mode.total)
            self.uncounted = mode.uncounted or (None if whole else NO_BACKWARD)

    def values(self, train_s: float, steps: int) -> dict[str, Any]:
        """What the report shows: FLOPs per step, FLOP/s over the training time, and the MFU."""
        name, peak = peak_flops(self.device)
        counted = self.counted
        if not counted or self.uncounted or train_s <= 0:  # (a partial count is no FLOP/s)
            return {"device": name}
        rate = counted * steps / train_s
        return {
            "flops_per_step": counted,
            "flops_per_s": rate,
            "peak_flops": peak,
            "mfu": rate / peak if peak else None,
            "device": name,
        }
