"""The learning-rate range test: train while raising the rate, watch the loss, suggest a rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from torch.utils.data import DataLoader

from ..errors import MisconfigurationError, bad_value, install_hint
from ..module import Module
from ..rank_zero import info
from .trial import TrialSteps, TrialTarget, preserved, train_loader, trial_target

if TYPE_CHECKING:
    from ..trainer import Trainer

MODES = ("exponential", "linear")


class RangeTest(Protocol):
    """What a range test follows and records: the rate of each step, and each step's loss (its
    smoothing, when to stop and which rate to suggest are the test's own)."""

    def rate(self, step: int) -> float:
        """The learning rate of step `step` (0-based)."""
        ...

    def add(self, lr: float, loss: float) -> bool:
        """Record a step's rate and loss; True stops the test."""
        ...

    def suggestion(self) -> float | None:
        """The rate to train with; None when too few steps were recorded."""
        ...


@dataclass
class LRFinderResult:
    """surge's range test: the rates tried and the loss at each; `suggestion()` picks one.

    The rate goes from `min_lr` to `max_lr` over `num_training` steps (`mode="exponential"`: evenly
    spaced in log scale; `"linear"`); the test stops at a non-finite loss or once the smoothed loss
    exceeds `early_stop_threshold` times the best so far (None: never)."""

    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # raw losses, one per step
    smoothing: float = 0.9
    min_lr: float = 1e-8
    max_lr: float = 1.0
    num_training: int = 100
    mode: str = "exponential"
    early_stop_threshold: float | None = 4.0
    _best: float = field(default=math.inf, repr=False)

    def rate(self, step: int) -> float:
        frac = step / max(self.num_training - 1, 1)
        if self.mode == "linear":
            return self.min_lr + frac * (self.max_lr - self.min_lr)
        return self.min_lr * (self.max_lr / self.min_lr) ** frac

    def add(self, lr: float, loss: float) -> bool:
        self.lrs.append(lr)
        self.losses.append(loss)
        smooth = self.smoothed[-1]
        threshold = self.early_stop_threshold
        if not math.isfinite(loss) or (
            threshold is not None and len(self.lrs) > 1 and smooth > threshold * self._best
        ):
            return True
        self._best = min(self._best, smooth)
        return False

    @property
    def smoothed(self) -> list[float]:
        """Exponential moving average of the losses, bias-corrected (fast.ai's range test uses 0.98,
        which lags about 50 steps: too much for a 100-step run)."""
        avg, out = 0.0, []
        for i, loss in enumerate(self.losses, start=1):
            avg = self.smoothing * avg + (1 - self.smoothing) * loss
            out.append(avg / (1 - self.smoothing**i))
        return out

    @property
    def results(self) -> dict[str, list[float]]:
        """Lightning's view: `{"lr": [...], "loss": [...]}` with the smoothed losses."""
        return {"lr": list(self.lrs), "loss": self.smoothed}

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the smoothed loss falls fastest against log(lr); None if too few points.

        The slope is taken over a window of about 1/30 of the run on each side, so one noisy
        batch does not decide it.
        """
        loss = self.smoothed
        lo, hi = skip_begin, len(loss) - skip_end
        if hi - lo < 3:
            lo, hi = 0, len(loss)
        if hi - lo < 3:
            return None
        x = [math.log(lr) for lr in self.lrs]
        w = max(1, len(loss) // 30)
        slopes = {}
        for i in range(lo, hi):
            a, b = max(i - w, lo), min(i + w, hi - 1)
            slopes[i] = (loss[b] - loss[a]) / (x[b] - x[a])
        return self.lrs[min(slopes, key=slopes.__getitem__)]

    def plot(self, path: str | Path, suggest: bool = True) -> Path:
        """Write the loss-vs-rate curve (log x axis) as a PNG; needs matplotlib (`pip install -e ".[plot]"`)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise ImportError(f"LRFinderResult.plot needs matplotlib: {install_hint('plot')}") from err
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(self.lrs, self.losses, alpha=0.3, label="loss")
        ax.plot(self.lrs, self.smoothed, label="smoothed")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("loss")
        best = self.suggestion() if suggest else None
        if best is not None:
            ax.axvline(best, color="red", linestyle="--", label=f"suggestion {best:.2g}")
        ax.legend()
        path = Path(path)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        return path


def lr_find(
    model: Module,
    train_dataloaders: DataLoader | Any = None,
    *,
    trainer: Trainer | None = None,
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    verbose: bool = True,
) -> LRFinderResult:
    """Train `num_training` steps with the rate going from `min_lr` to `max_lr` and record the loss
    (`max_lr` below `min_lr` makes it fall, as Lightning allows; too few steps leave no suggestion).

    The rate of every param group of every optimizer from `configure_optimizers()` is set before
    each step (`mode="exponential"`: evenly spaced in log scale; `"linear"`). The run stops early
    once the smoothed loss exceeds `early_stop_threshold` times the best so far (None: never).
    The loss is read to the host every step, which is fine for a tuner. The model, the optimizer
    state, the precision state and every RNG are restored afterwards.
    """
    check_arguments(min_lr, max_lr, num_training, mode, early_stop_threshold)
    result = LRFinderResult(
        min_lr=min_lr, max_lr=max_lr, num_training=num_training, mode=mode,
        early_stop_threshold=early_stop_threshold,
    )  # fmt: skip
    run_range_test(
        model, train_loader(model, train_dataloaders, "lr_find"), trial_target(trainer), result, num_training
    )
    if verbose:
        suggestion = result.suggestion()
        shown = f"{suggestion:.3g}" if suggestion is not None else "none (too few steps)"
        info(
            f"lr_find: {len(result.lrs)} steps from {min_lr:g} to {result.lrs[-1]:.3g}; suggested lr {shown}"
        )
    return result


def run_range_test(model: Module, loader: Any, target: TrialTarget, test: RangeTest, steps: int) -> None:
    """At most `steps` training steps on `loader` (passed over again as often as needed; `batch_idx`
    is the batch's index in its pass), each at `test.rate(step)`, until `test.add` says stop."""
    with preserved(model, target.precision), TrialSteps(model, target) as runner:
        for step, (batch_idx, batch) in zip(range(steps), _cycle(loader)):
            lr = test.rate(step)
            runner.set_lr(lr)
            loss = float(runner.step(batch, batch_idx))  # host read: the test records every loss
            if test.add(lr, loss):
                break


def _cycle(loader: Any) -> Any:
    while True:
        empty = True
        for batch_idx, batch in enumerate(loader):
            empty = False
            yield batch_idx, batch
        if empty:
            raise MisconfigurationError("lr_find: the train dataloader is empty (0 batches).")


def check_arguments(min_lr: Any, max_lr: Any, num_training: Any, mode: Any, threshold: Any) -> None:
    """Refuse, by name, a rate that is not > 0, a step count below 1, an unknown mode or a threshold <= 1."""
    for name, value in (("min_lr", min_lr), ("max_lr", max_lr)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise bad_value(name, value, "a number > 0")
    if isinstance(num_training, bool) or not isinstance(num_training, int) or num_training < 1:
        raise bad_value("num_training", num_training, "an int >= 1 (steps to run)")
    if mode not in MODES:
        raise bad_value("mode", mode, f"one of {MODES}")
    if threshold is not None and (not isinstance(threshold, int | float) or threshold <= 1):
        raise bad_value("early_stop_threshold", threshold, "None or a number > 1")
