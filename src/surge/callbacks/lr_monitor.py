"""`LearningRateMonitor`: logs each optimizer's learning rates."""

from __future__ import annotations

from typing import Any

from ..errors import bad_value
from .base import Callback


class LearningRateMonitor(Callback):
    """Logs `lr-{Optimizer}` (and `/pg{i}` per extra param group) at log intervals or each epoch.

    Learning rates are host floats in the optimizer, so this reads nothing from the device.
    """

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise bad_value(
                "LearningRateMonitor(logging_interval)", logging_interval, 'None, "step" or "epoch"'
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay  # as `{key}-weight_decay`, Lightning's name
        self._last_step = -1

    def _values(self, trainer: Any) -> dict[str, float]:
        values: dict[str, float] = {}
        names: dict[str, int] = {}
        for opt in trainer.optimizers:
            base = f"lr-{type(opt).__name__}"
            count = names.get(base, 0)
            names[base] = count + 1
            name = base if count == 0 else f"{base}-{count}"
            for i, group in enumerate(opt.param_groups):
                key = name if len(opt.param_groups) == 1 else f"{name}/pg{i + 1}"
                values[key] = float(group["lr"])
                if self.log_momentum:
                    momentum = group.get("momentum", group.get("betas", (None,))[0])
                    if momentum is not None:
                        values[key.replace("lr-", "lr-momentum-", 1)] = float(momentum)
                if self.log_weight_decay:
                    values[f"{key}-weight_decay"] = float(group.get("weight_decay", 0.0))
        return values

    def _log(self, trainer: Any) -> None:
        trainer.log_metrics(self._values(trainer))

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.logging_interval == "epoch":
            return
        every = trainer.log_every_n_steps
        if trainer.global_step % every == 0 and trainer.global_step != self._last_step:
            self._last_step = trainer.global_step
            self._log(trainer)

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if self.logging_interval != "step":
            self._log(trainer)
