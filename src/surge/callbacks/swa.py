"""`StochasticWeightAveraging`: average the weights of the last epochs (Lightning's semantics).

From epoch `swa_start` on, the learning rate follows `torch.optim.swa_utils.SWALR` (it replaces
the scheduler for the rest of the fit) and, at the start of every epoch from `swa_start` to the
last, the current weights join a running average. When the last epoch ends, the module takes the
averaged weights; if it has BatchNorm layers, their statistics are then recomputed by one pass of
`training_step` over the training data without gradients (Lightning runs that pass as an extra
epoch; here it runs inside `on_train_end`, with no hooks, validation or optimizer step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer
from torch.optim.swa_utils import SWALR

from ..data import move_to_device
from ..errors import CheckpointError, MisconfigurationError, bad_value
from ..optim import SchedulerConfig
from ..rank_zero import info
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer
    from .trainer_views import Averaging


AvgFn = Callable[[Tensor, Tensor, Tensor], Tensor]


class StochasticWeightAveraging(Callback):
    """Lightning's arguments: `swa_lrs` (a rate, or one per param group), `swa_epoch_start` (an int
    >= 1, counted from 1, or a fraction of max_epochs), `annealing_epochs`, `annealing_strategy`
    ("cos" or "linear"), `avg_fn(averaged, current, n_averaged)` and the `device` of the average
    (None: the module's)."""

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AvgFn | None = None,
        device: torch.device | str | None = torch.device("cpu"),  # noqa: B008 - Lightning's default
    ) -> None:
        _check(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn or self.avg_fn
        self._device = device
        self._average: list[Tensor] | None = None  # the averaged parameters, in `parameters()` order
        self.n_averaged: Tensor | None = None
        self._initialized = False
        self._latest_update_epoch = -1
        self._max_epochs = -1
        self._has_batch_norm = False
        self.momenta: dict[_BatchNorm, float | None] = {}

    @property
    def swa_start(self) -> int:
        """The first averaged epoch, 0-based."""
        return max(int(self._swa_epoch_start) - 1, 0)

    @property
    def swa_end(self) -> int:
        """The last averaged epoch, 0-based."""
        return self._max_epochs - 1

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if stage == "fit" and trainer.strategy.name == "fsdp":
            raise MisconfigurationError(
                "StochasticWeightAveraging does not support sharded models (strategy='fsdp')."
            )

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        _check_optimization(trainer.optimizers, trainer.lr_scheduler_configs)
        if trainer.max_epochs < 0:
            raise MisconfigurationError(
                f"StochasticWeightAveraging needs max_epochs (its last epoch ends the average); "
                f"got max_epochs={trainer.max_epochs}."
            )
        if isinstance(self._swa_epoch_start, float):
            self._swa_epoch_start = int(trainer.max_epochs * self._swa_epoch_start)
        self._max_epochs = trainer.max_epochs
        self._has_batch_norm = any(isinstance(m, _BatchNorm) for m in module.modules())

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        epoch = trainer.current_epoch
        if not self._initialized and self.swa_start <= epoch <= self.swa_end:
            self._initialized = True
            self._start(trainer, module)
        if self.swa_start <= epoch <= self.swa_end and epoch > self._latest_update_epoch:
            self._update(module)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        if trainer.current_epoch - 1 != self.swa_end or self._average is None:
            return  # stopped before the last epoch ended: the module keeps its own weights
        self.transfer_weights(self._average, module)
        if self._has_batch_norm:
            self._update_batch_norm(trainer, module)

    # -- the steps -------------------------------------------------------------------------
    def _start(self, trainer: Averaging, module: Any) -> None:
        last = trainer.max_epochs if self._annealing_strategy == "cos" else -1
        self._install_swalr(trainer.optimizers[0], trainer.lr_scheduler_configs, last)
        self._average = [p.detach().to(self._device or p.device, copy=True) for p in module.parameters()]
        self.n_averaged = torch.tensor(0, dtype=torch.long)

    def _install_swalr(self, optimizer: Optimizer, configs: list[SchedulerConfig], last_epoch: int) -> None:
        """SWALR on `optimizer` in place of the scheduler in `configs` (or as the only one)."""
        lrs = self._swa_lrs
        if isinstance(lrs, float):
            lrs = [lrs] * len(optimizer.param_groups)
        if len(lrs) != len(optimizer.param_groups):
            raise bad_value(
                "StochasticWeightAveraging(swa_lrs)",
                lrs,
                f"one rate per param group ({len(optimizer.param_groups)})",
            )
        for lr, group in zip(lrs, optimizer.param_groups):
            group["initial_lr"] = lr
        scheduler = SWALR(
            optimizer,
            swa_lr=lrs,  # type: ignore[arg-type]  # one rate per param group works (Lightning passes a list)
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,  # type: ignore[arg-type]  # checked: "cos" or "linear"
            last_epoch=last_epoch,
        )
        config = SchedulerConfig(scheduler=scheduler)  # stepped every epoch
        if configs:
            info(f"StochasticWeightAveraging: swapping {type(configs[0].scheduler).__name__} for SWALR")
            configs[0] = config
        else:
            configs.append(config)

    def restore_optimization(
        self, optimizers: list[Any], lr_scheduler_configs: list[Any], module: Any
    ) -> None:
        """Resumed after averaging began: SWALR replaces the scheduler again (its state and the
        optimizer's are loaded next) and the average is checked against the module's parameters."""
        if not self._initialized:
            return
        _check_optimization(optimizers, lr_scheduler_configs)
        params = list(module.parameters())
        average = self._average or []
        shapes = [tuple(a.shape) for a in average]
        if shapes != [tuple(p.shape) for p in params]:
            raise CheckpointError(
                f"StochasticWeightAveraging: the checkpoint's average holds {len(shapes)} tensors of shapes "
                f"{shapes[:4]}..., but {type(module).__name__} has {len(params)} parameters of other shapes; "
                "resume with the model the run was saved with."
            )
        self._average = [a.to(self._device or p.device, copy=True) for a, p in zip(average, params)]
        self._install_swalr(optimizers[0], lr_scheduler_configs, -1)  # the saved state sets its epoch

    def _update(self, module: Any) -> None:
        assert self._average is not None and self.n_averaged is not None
        n = self.n_averaged
        for avg, p in zip(self._average, module.parameters()):
            current = p.detach().to(avg.device)
            avg.copy_(current if n == 0 else self._avg_fn(avg, current, n.to(avg.device)))
        n += 1

    def _update_batch_norm(self, trainer: Averaging, module: Any) -> None:
        """BatchNorm statistics of the averaged weights: one pass of `training_step`, no gradients."""
        self.reset_batch_norm_and_save_state(module)
        module.train()
        step = trainer.strategy.step_fn(module, "training_step")
        precision, limit = trainer.precision_plugin, trainer.num_training_batches
        with torch.no_grad():
            for i, batch in enumerate(trainer.train_dataloader):
                if i >= limit:
                    break
                batch = move_to_device(batch, module.device)
                if precision.converts_input:
                    batch = precision.convert_input(batch)
                with precision.forward_context():
                    step(batch, i)
        self.reset_momenta()

    # -- Lightning's helpers ---------------------------------------------------------------
    @staticmethod
    def avg_fn(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
        """The running mean: `averaged + (current - averaged) / (num_averaged + 1)`."""
        return averaged + (current - averaged) / (num_averaged + 1)

    @staticmethod
    def transfer_weights(average: list[Tensor], module: nn.Module) -> None:
        for src, dst in zip(average, module.parameters()):
            dst.detach().copy_(src.to(dst.device))

    def reset_batch_norm_and_save_state(self, module: nn.Module) -> None:
        """Zero the running statistics and use a cumulative mean (momentum None), as `update_bn` does."""
        self.momenta = {}
        for m in module.modules():
            if isinstance(m, _BatchNorm) and m.track_running_stats:
                m.reset_running_stats()
                self.momenta[m] = m.momentum
                m.momentum = None

    def reset_momenta(self) -> None:
        for m, momentum in self.momenta.items():
            m.momentum = momentum

    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": 0 if self.n_averaged is None else int(self.n_averaged),
            "latest_update_epoch": self._latest_update_epoch,
            "average": self._average,
            "initialized": self._initialized,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._average = state_dict["average"]
        self._initialized = state_dict.get("initialized", self._average is not None)
        self.n_averaged = torch.tensor(state_dict["n_averaged"], dtype=torch.long)


def _check_optimization(optimizers: list[Any], configs: list[Any]) -> None:
    if len(optimizers) != 1:
        raise MisconfigurationError(
            f"StochasticWeightAveraging works with 1 optimizer; configure_optimizers() returned {len(optimizers)}."
        )
    if len(configs) > 1:
        raise MisconfigurationError(
            "StochasticWeightAveraging supports at most 1 lr_scheduler; configure_optimizers() "
            f"returned {len(configs)}."
        )


def _check(lrs: Any, start: Any, annealing: Any, strategy: Any, avg_fn: Any, device: Any) -> None:
    name = "StochasticWeightAveraging"
    if isinstance(start, bool) or not isinstance(start, int | float):
        raise bad_value(f"{name}(swa_epoch_start)", start, "an int >= 1 or a float in [0, 1]")
    if (isinstance(start, int) and start < 1) or (isinstance(start, float) and not 0 <= start <= 1):
        raise bad_value(f"{name}(swa_epoch_start)", start, "an int >= 1 or a float in [0, 1]")
    positive = lambda v: isinstance(v, float) and v > 0  # noqa: E731
    if not (positive(lrs) or (isinstance(lrs, list) and lrs and all(positive(v) for v in lrs))):
        raise bad_value(f"{name}(swa_lrs)", lrs, "a positive float, or a list of positive floats")
    if isinstance(annealing, bool) or not isinstance(annealing, int) or annealing < 0:
        raise bad_value(f"{name}(annealing_epochs)", annealing, "an int >= 0")
    if strategy not in ("cos", "linear"):
        raise bad_value(f"{name}(annealing_strategy)", strategy, '"cos" or "linear"')
    if avg_fn is not None and not callable(avg_fn):
        raise bad_value(f"{name}(avg_fn)", avg_fn, "None or a callable (averaged, current, n_averaged)")
    if device is not None and not isinstance(device, torch.device | str):
        raise bad_value(f"{name}(device)", device, "None, a torch.device or a str")
