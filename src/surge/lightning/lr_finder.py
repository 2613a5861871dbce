"""Lightning's learning-rate range test: its schedule, its smoothed losses, its early stop, its
suggestion and its plot, on surge's trial steps (`surge.tune.lr_finder.run_range_test`).

What Lightning's `Tuner.lr_find` and `LearningRateFinder` record, float for float:
- the rate: `min_lr` at the first step, then its `_ExponentialLR` / `_LinearLR` schedule at
  `(step + 1) / num_training` of the way (the scheduler's first step happens when it is built);
- the loss: a running average with `beta=0.98`, divided by `1 - beta ** (global_step + 1)`, the
  trainer's step count after the step;
- the stop: once past the trainer's first step, a smoothed loss above `early_stop_threshold` times
  the best so far (the best starts at the first step's; non-finite losses do not stop it);
- the suggestion: the steepest negative gradient (`torch.gradient` against the rates) of the
  finite smoothed losses between `skip_begin` and `skip_end`.
surge's own API keeps its range test (`surge.tune.lr_find`, docs/tuning.md): bias-corrected
smoothing that lags less and a slope against log(rate)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from ..callbacks.lr_finder import LearningRateFinder as _SurgeLearningRateFinder
from ..errors import MisconfigurationError

if TYPE_CHECKING:
    from ..trainer import Trainer

log = logging.getLogger("surge")


class LRFinder:
    """Lightning's `_LRFinder`: `results` (`{"lr": [...], "loss": [...]}`, the smoothed losses),
    `suggestion(skip_begin=10, skip_end=1)` and `plot(suggest=False, show=False, ax=None)`."""

    beta = 0.98

    def __init__(
        self,
        mode: str,
        lr_min: float,
        lr_max: float,
        num_training: int,
        early_stop_threshold: float | None = 4.0,
        start_step: int = 0,
    ) -> None:
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
        self.results: dict[str, Any] = {"lr": [], "loss": []}
        self._threshold, self._start_step = early_stop_threshold, start_step
        self._avg_loss, self._best_loss = 0.0, 0.0
        self._optimal_idx: int | None = None

    def rate(self, step: int) -> float:
        """The rate of `step`: `lr_min`, then the schedule `(step + 1) / num_training` of the way."""
        if step == 0:
            return self.lr_min
        r = (step + 1) / self.num_training
        if self.mode == "linear":
            return self.lr_min + r * (self.lr_max - self.lr_min)
        return self.lr_min * (self.lr_max / self.lr_min) ** r

    def add(self, lr: float, loss: float) -> bool:
        """Record the step's rate and smoothed loss; True once the loss diverged."""
        step = self._start_step + len(self.results["lr"]) + 1  # the trainer's step after this one
        self._avg_loss = self.beta * self._avg_loss + (1 - self.beta) * loss
        smoothed = self._avg_loss / (1 - self.beta ** (step + 1))
        diverged = self._threshold is not None and step > 1 and smoothed > self._threshold * self._best_loss
        if smoothed < self._best_loss or step == 1:
            self._best_loss = smoothed
        self.results["lr"].append(lr)
        self.results["loss"].append(smoothed)
        return diverged

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the smoothed loss falls fastest (per unit of rate); None, with an error in
        the log, when fewer than 2 finite losses are left after the skips."""
        kept = slice(skip_begin, -skip_end)
        losses = torch.tensor(self.results["loss"][kept])
        lrs = torch.tensor(self.results["lr"][kept])
        finite = torch.isfinite(losses)
        losses, lrs = losses[finite], lrs[finite]
        if len(losses) < 2:
            log.error(
                "lr_find: too few points to suggest a learning rate; raise num_training, the fit's "
                "epochs or the size of the train dataloader."
            )
            self._optimal_idx = None
            return None
        steepest = int(torch.argmin(torch.gradient(losses, spacing=[lrs])[0]).item())
        self._optimal_idx = int(torch.arange(len(self.results["loss"]))[kept][finite][steepest].item())
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The smoothed loss against the rate (log scale in exponential mode) on `ax` (default: a new
        figure), the suggestion as a red point; returns the figure. Needs matplotlib."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise MisconfigurationError("LRFinder.plot needs matplotlib: pip install -U matplotlib") from err
        lrs, losses = self.results["lr"], self.results["loss"]
        fig = ax.figure if ax is not None else None
        if ax is None:
            fig, ax = plt.subplots()
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest:
            self.suggestion()
            if self._optimal_idx:  # as Lightning: a suggestion at the first point is not marked
                idx = self._optimal_idx
                ax.plot(lrs[idx], losses[idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return fig


class LearningRateFinder(_SurgeLearningRateFinder):
    """Lightning's `LearningRateFinder`: surge's callback running Lightning's range test (`LRFinder`)."""

    def _range_test(self, trainer: Trainer, steps: int) -> LRFinder:
        del steps  # Lightning's schedule spans num_training_steps even when the fit's epochs end it sooner
        return LRFinder(
            self._mode, self._min_lr, self._max_lr, self._num_training_steps,
            self._early_stop_threshold, trainer.global_step,
        )  # fmt: skip


__all__ = ["LRFinder", "LearningRateFinder"]
