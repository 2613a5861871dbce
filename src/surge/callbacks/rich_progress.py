"""`RichProgressBar`: the progress bar drawn with rich (an optional dependency: `pip install rich`)."""

from __future__ import annotations

import math
from time import perf_counter
from typing import TYPE_CHECKING, Any

from ..errors import MisconfigurationError, bad_value
from .progress import ProgressBar, _fmt

if TYPE_CHECKING:
    from ..trainer import Trainer


class RichProgressBar(ProgressBar):
    """Lightning's arguments: `refresh_rate` (batches between bar updates; 0 hides the bar),
    `leave` (keep each epoch's bar), `console_kwargs` (for `rich.console.Console`). Metrics are
    read from the device at most every half second, not per batch. `theme` is not supported."""

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = False,
        theme: Any = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise MisconfigurationError(
                "RichProgressBar needs rich, which is not installed: pip install rich"
            ) from None
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise bad_value(
                "RichProgressBar(refresh_rate)", refresh_rate, "an int >= 0 (batches; 0 hides the bar)"
            )
        if theme is not None:
            raise bad_value("RichProgressBar(theme)", theme, "None (surge draws rich's default theme)")
        if console_kwargs is not None and not isinstance(console_kwargs, dict):
            raise bad_value("RichProgressBar(console_kwargs)", console_kwargs, "None or a dict")
        super().__init__(mode="bar")
        self.batches_per_refresh, self.leave = refresh_rate, leave
        self._console_kwargs = console_kwargs or {}
        self._progress: Any = None
        self._task: Any = None

    @property
    def is_enabled(self) -> bool:
        return self.batches_per_refresh > 0

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if not trainer.is_global_zero or not self.is_enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        if self._progress is None:
            self._progress = Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(), TextColumn("{task.fields[metrics]}"),
                console=Console(**self._console_kwargs), transient=not self.leave,
            )  # fmt: skip
            self._progress.start()
        total = trainer.num_training_batches
        self._task = self._progress.add_task(
            f"Epoch {trainer.current_epoch}",
            total=None if math.isinf(total) else int(total),
            completed=trainer.fit_loop.batches_done,
            metrics="",
        )
        self._next_refresh = perf_counter() + self.refresh_rate

    def on_train_batch_end(
        self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._task is None or (batch_idx + 1) % self.batches_per_refresh:
            return
        fields: dict[str, Any] = {"completed": batch_idx + 1}
        now = perf_counter()
        if now >= self._next_refresh:  # host read of the metrics, on a timer
            self._next_refresh = now + self.refresh_rate
            fields["metrics"] = _text(self._metrics(trainer, module))
        self._progress.update(self._task, **fields)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._task is None:
            return
        done = trainer.fit_loop.batches_done
        self._progress.update(self._task, completed=done, metrics=_text(self._metrics(trainer, module)))
        if not self.leave:
            self._progress.remove_task(self._task)
        self._task = None

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._stop()

    def on_exception(self, trainer: Trainer, module: Any, err: BaseException) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress, self._task = None, None


def _text(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v}" for k, v in _fmt(metrics).items())
