"""`LearningRateMonitor`: logs each optimizer's learning rates, under Lightning's names and at
Lightning's points."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from ..errors import bad_value
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import LearningRates


class LearningRateMonitor(Callback):
    """Logs `lr-{Optimizer}` (a scheduler's `name` when it has one; `-1`, `-2` for further optimizers
    of one class; `/pg{i}` or the group's `name` per param group) with `-momentum` and
    `-weight_decay` when asked, as Lightning names them.

    As in Lightning: `logging_interval="step"` logs before each batch that ends a logging interval
    (the values that batch trains with, at the step of the batches stepped before it), `"epoch"` at
    each epoch's start, None both, each with the schedulers of that interval (and the optimizers
    without a scheduler). Learning rates are host floats in the optimizer: no device read."""

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise bad_value(
                "LearningRateMonitor(logging_interval)", logging_interval, 'None, "step" or "epoch"'
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay

    def _values(self, trainer: LearningRates, interval: str) -> dict[str, float]:
        """The stats of the schedulers of `interval` ("any": all) and of the optimizers without one."""
        values: dict[str, float] = {}
        types: Counter[type] = Counter()
        scheduled = []
        for config in trainer.lr_scheduler_configs:
            opt = config.scheduler.optimizer
            scheduled.append(opt)
            name = self._name(opt, config.name, types)
            if interval in (config.interval, "any"):
                values.update(self._stats(opt, name))
        for opt in trainer.optimizers:
            if not any(opt is seen for seen in scheduled):
                values.update(self._stats(opt, self._name(opt, None, types)))
        return values

    @staticmethod
    def _name(opt: Any, given: str | None, types: Counter[type]) -> str:
        if given is not None:
            return given
        types[type(opt)] += 1
        count = types[type(opt)]
        return f"lr-{type(opt).__name__}" + (f"-{count - 1}" if count > 1 else "")

    def _stats(self, opt: Any, name: str) -> dict[str, float]:
        stats: dict[str, float] = {}
        groups = opt.param_groups
        for i, group in enumerate(groups):
            label = group.get("name", f"pg{i + 1}") if len(groups) > 1 else group.get("name")
            key = f"{name}/{label}" if label else name
            stats[key] = _number(group["lr"])
            if self.log_momentum:
                betas = "betas" in opt.defaults
                stats[f"{key}-momentum"] = _number(group["betas"][0] if betas else group.get("momentum", 0))
            if self.log_weight_decay:
                stats[f"{key}-weight_decay"] = _number(group["weight_decay"])
        return stats

    def _log(self, trainer: LearningRates, interval: str) -> None:
        if values := self._values(trainer, interval):
            trainer.log_metrics(values, step=trainer.global_step)

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        every = trainer.log_every_n_steps
        due = every and ((trainer.global_step + 1) % every == 0 or trainer.should_stop)
        if self.logging_interval != "epoch" and due:
            self._log(trainer, "step" if self.logging_interval is None else "any")

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if self.logging_interval != "step":
            self._log(trainer, "epoch" if self.logging_interval is None else "any")


def _number(value: Any) -> Any:
    """A hyper-parameter as the loggers take it: a tensor one (a capturable optimizer's) as its number."""
    return value.item() if isinstance(value, torch.Tensor) else value
