"""`ProgressBar`: epoch, step/total, it/s, ETA, loss and `prog_bar` metrics, on rank zero.

It refreshes on a timer (reading metrics from the device then, never per step), so a bar costs a
clock read per step; printing plain lines, it costs nothing per step (the loop leaves its batch hook
out of such an epoch). When the output is not a terminal, or a terminal that reports no width (a pseudo-terminal nobody
sized: some containers and CI runners), it prints one plain line per epoch.
"""

from __future__ import annotations

import math
import os
import sys
from time import perf_counter
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import bad_value
from .base import Callback
from .batch_end import quiet_batch_end

if TYPE_CHECKING:
    from ..trainer import Trainer


MIN_BAR_WIDTH = 20  # columns below which a bar has no room: plain lines instead


def _width(stream: Any) -> int:
    """The width of the terminal `stream` writes to, 0 where it reports none."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class ProgressBar(Callback):
    """`mode="auto"` draws a tqdm bar on a terminal and plain lines elsewhere; "bar" or "lines" force one."""

    def __init__(self, refresh_rate: float = 0.5, mode: str = "auto", stream: TextIO | None = None) -> None:
        if mode not in ("auto", "bar", "lines"):
            raise bad_value("ProgressBar(mode)", mode, '"auto", "bar" or "lines"')
        if refresh_rate <= 0:
            raise bad_value("ProgressBar(refresh_rate)", refresh_rate, "seconds > 0")
        self.refresh_rate, self.mode, self._stream = refresh_rate, mode, stream
        self._bar: Any = None
        self._next_refresh = 0.0
        self._shown = 0
        self._epoch_start = 0.0
        self._trainer: Trainer | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def trainer(self) -> Any:
        """The Trainer of the stage running now (Lightning's `progress_bar.trainer`)."""
        if self._trainer is None:
            # TypeError, as Lightning's, so code that catches it keeps working
            raise TypeError(
                f"The `{type(self).__name__}._trainer` reference has not been set yet: a progress bar "
                "is attached to a Trainer when a stage starts (its `setup`)"
            )
        return self._trainer

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        self._trainer = trainer

    @property
    def total_train_batches(self) -> int | float:
        """Training batches this epoch (inf for a loader without a length); fewer when
        `max_epochs=-1` and `max_steps` ends the run sooner, as in Lightning."""
        t = self.trainer
        if t.max_epochs == -1 and t.max_steps > 0:
            return min(t.num_training_batches, t.max_steps - t.global_step)
        return t.num_training_batches

    @property
    def total_val_batches(self) -> int | float:
        """Validation batches of all val loaders at this epoch's end: 0 when this epoch does not
        validate (`check_val_every_n_epoch`)."""
        t = self.trainer
        every = t.check_val_every_n_epoch  # None: any epoch may validate
        if not t.enable_validation or (every is not None and (t.current_epoch + 1) % every):
            return 0
        return sum(t.num_val_batches)

    def _use_bar(self) -> bool:
        if self.mode != "auto":
            return self.mode == "bar"
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty()) and _width(self.stream) >= MIN_BAR_WIDTH

    def get_metrics(self, trainer: Trainer, pl_module: Any) -> dict[str, Any]:
        """What the bar shows, as in Lightning: the first logger's version (`v_num`) and the
        `prog_bar=True` values (read from the device now: a host read). Override it to change the
        items shown."""
        standard: dict[str, Any] = {}
        version = trainer.loggers[0].version if trainer.loggers else None
        if version is not None:
            standard["v_num"] = (
                str(version)[len("version_") :] if str(version).startswith("version_") else version
            )
        return {**standard, **trainer.read_progress_bar_metrics()}

    def _metrics(self, trainer: Trainer, module: Any) -> dict[str, Any]:
        # Host read at a refresh, not per step: all values in one transfer.
        shown = self.get_metrics(trainer, module)
        if trainer.precision_plugin.skipped_steps:
            shown["skipped_steps"] = trainer.precision_plugin.skipped_steps
        return shown

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        self._epoch_start = perf_counter()
        self._next_refresh = self._epoch_start + self.refresh_rate
        self._shown = trainer.fit_loop.batches_done
        if self._use_bar():
            from tqdm.auto import tqdm

            total = trainer.num_training_batches
            self._bar = tqdm(
                total=None if math.isinf(total) else int(total),
                initial=self._shown,
                desc=f"Epoch {trainer.current_epoch}",
                file=self.stream,
                dynamic_ncols=True,
                leave=True,
                mininterval=self.refresh_rate,
                smoothing=0.1,
            )

    def batch_end_idle(self, trainer: Trainer) -> bool:
        """No bar this epoch (plain lines, or not rank zero): nothing to do per batch."""
        return self._bar is None

    @quiet_batch_end
    def on_train_batch_end(
        self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._bar is None:
            return
        now = perf_counter()
        if now < self._next_refresh:
            return
        self._next_refresh = now + self.refresh_rate
        done = batch_idx + 1
        self._bar.update(done - self._shown)
        self._shown = done
        self._bar.set_postfix(_fmt(self._metrics(trainer, module)), refresh=True)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        done = trainer.fit_loop.batches_done
        metrics = self._metrics(trainer, module)
        if self._bar is not None:
            self._bar.update(done - self._shown)
            self._bar.set_postfix(_fmt(metrics), refresh=True)
            self._bar.close()
            self._bar = None
            return
        elapsed = max(perf_counter() - self._epoch_start, 1e-9)
        total = trainer.num_training_batches
        total_text = "?" if math.isinf(total) else str(int(total))
        rate = (done - self._shown) / elapsed
        parts = [
            f"Epoch {trainer.current_epoch}",
            f"{done}/{total_text} batches",
            f"{rate:.1f} it/s",
            f"{elapsed:.1f}s",
            f"step {trainer.global_step}",
        ]
        parts += [f"{k}={v}" for k, v in _fmt(metrics).items()]
        self.stream.write(" | ".join(parts) + "\n")
        self.stream.flush()

    def on_exception(self, trainer: Trainer, module: Any, err: BaseException) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _fmt(metrics: dict[str, Any]) -> dict[str, str]:
    return {k: f"{v:.4g}" if isinstance(v, float) else str(v) for k, v in metrics.items()}
