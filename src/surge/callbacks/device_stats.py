"""`DeviceStatsMonitor`: memory and utilisation of the device (and CPU) at log intervals."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import MisconfigurationError, bad_value
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import StatsLogging


class DeviceStatsMonitor(Callback):
    """Logs `torch.cuda.memory_stats()` on CUDA, and the CPU's (psutil: `cpu_percent`,
    `cpu_vm_percent`, `cpu_swap_percent`) on the CPU or with `cpu_stats=True`, through
    `trainer.log_metrics` under `DeviceStatsMonitor.on_train_batch_start/...` and `..._end/...`.

    At Lightning's points: in both hooks of every batch whose step is a logging one (the batches
    that stepped before it, plus one, divide by `log_every_n_steps`, or the fit is stopping), in a
    row at that count, so under accumulation each micro-batch of such a window logs. The
    statistics are host-side counters: reading them does not wait for the device.
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise bad_value("DeviceStatsMonitor(cpu_stats)", cpu_stats, "None, True or False")
        self._cpu_stats = cpu_stats
        self._step = 0  # the batch's logging step, fixed at its start (its own optimizer step comes later)

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        on_cpu = trainer.root_device.type == "cpu"
        if (self._cpu_stats or (self._cpu_stats is None and on_cpu)) and not _has_psutil():
            raise MisconfigurationError(
                "DeviceStatsMonitor logs CPU stats with psutil, which is not installed: "
                "pip install psutil (or pass cpu_stats=False)."
            )

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        # The batches that stepped before this one: optimizer steps (manual optimization: batches).
        manual = not module.automatic_optimization
        self._step = trainer.fit_loop.total_batch_idx + 1 if manual else trainer.global_step
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(
        self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._log(trainer, "on_train_batch_end")

    def _log(self, trainer: StatsLogging, key: str) -> None:
        every, step = trainer.log_every_n_steps, self._step
        if not trainer.loggers or every <= 0 or ((step + 1) % every and not trainer.should_stop):
            return
        stats = self.device_stats(trainer.root_device)
        if stats:
            prefixed = {f"DeviceStatsMonitor.{key}/{k}": v for k, v in stats.items()}
            trainer.log_metrics(prefixed, step=step, callback_metrics=False)  # loggers only, as Lightning

    def device_stats(self, device: torch.device) -> dict[str, float]:
        """The statistics logged for `device` (the CPU's as asked by `cpu_stats`)."""
        stats: dict[str, float] = {}
        if device.type == "cuda":
            stats.update({k: float(v) for k, v in torch.cuda.memory_stats(device).items()})
        if (device.type == "cpu" and self._cpu_stats is not False) or (
            device.type != "cpu" and self._cpu_stats
        ):
            stats.update(cpu_stats())
        return stats


def cpu_stats() -> dict[str, float]:
    import psutil

    return {
        "cpu_vm_percent": psutil.virtual_memory().percent,
        "cpu_percent": psutil.cpu_percent(),
        "cpu_swap_percent": psutil.swap_memory().percent,
    }


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True
