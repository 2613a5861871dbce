"""Validation inside fit: how many batches, when it runs, and running it without moving training's
random streams (so training is the same whether and how often it validates).

In the Lightning mode validation moves them as Lightning's does: creating each val loader's
iterator draws its base seed from torch's global RNG (as a hand-written loop's `iter(loader)`
does), and whatever `validation_step` draws counts too, so epoch 2 onwards shuffles as under
Lightning. The sanity check leaves them untouched in both (Lightning isolates it as well)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..data import limit_batches, loader_length
from ..errors import MisconfigurationError
from ..seed import rng_state, rng_untouched
from .across_epochs import AcrossEpochs
from .evaluate import run_evaluation

if TYPE_CHECKING:
    from .context import RunParts
    from .control import SanityFlag
    from .fit_data import FitData


@dataclass(frozen=True)
class BatchPlan:
    """Batches per epoch (train, and each val loader) and validation's interval in train batches."""

    train: int | float
    val: list[int | float]
    val_every_n_batches: int  # 0: at the epoch's end only (1 when counting across epochs: asked each batch)
    across_epochs: int = 0  # check_val_every_n_epoch=None: every this many batches counted across epochs


def plan_batches(
    train: Iterable,
    vals: Sequence[Iterable],
    limit_train_batches: int | float,
    limit_val_batches: int | float,
    val_check_interval: int | float,
    across_epochs: bool = False,
) -> BatchPlan:
    """The batches a fit runs per epoch, checked against the loaders before any work. With
    `across_epochs` (check_val_every_n_epoch=None) the int `val_check_interval` counts the batches
    of all epochs together, and may be longer than one epoch."""
    if loader_length(train) == 0:
        raise MisconfigurationError(
            "the train dataloader is empty (0 batches): check the dataset and batch_size."
        )
    n = limit_batches(train, limit_train_batches, "limit_train_batches")
    val = [limit_batches(v, limit_val_batches, "limit_val_batches") for v in vals]
    interval = val_check_interval
    if across_epochs:
        return BatchPlan(n, val, 1, int(interval))
    if isinstance(interval, float):
        if interval < 1.0 and n == math.inf:
            raise MisconfigurationError(
                f"val_check_interval={interval} is a fraction, but the train dataloader has no length; use an int."
            )
        every = 0 if interval == 1.0 else max(1, int(n * interval))
    else:
        if interval > n and limit_val_batches != 0:  # (no validation: nothing to schedule)
            raise MisconfigurationError(  # a ValueError, with the words Lightning users match
                f"`val_check_interval` ({interval}) must be less than or equal to the number of the training "
                f"batches ({n}): use <= {n} or a fraction, or limit_val_batches=0 to disable validation."
            )
        every = interval
    return BatchPlan(n, val, every)


class Validation:
    """When fit validates, and the run itself (the evaluation loop over the val loaders). The loaders
    and the batch plan are `FitData`'s: a run inside fit asks it for them (new ones when due).

    While it runs, `training_rng` holds training's RNG state: what a checkpoint written during
    validation records.
    """

    def __init__(
        self, parts: RunParts, data: FitData, every_n_epochs: int | None, global_step: Callable[[bool], int]
    ) -> None:
        self.parts, self.data, self.global_step = parts, data, global_step
        self.every_n_epochs = every_n_epochs
        self.across = AcrossEpochs()  # used when the plan counts across epochs
        self.training_rng: dict[str, Any] | None = None
        self.moves_training_rng = parts.semantics.validation_moves_training_rng
        self._seen: tuple[list[Iterable], list[int]] = ([], [])  # step rows' count, per loaders

    def due(self, epoch: int) -> bool:
        """Whether epoch `epoch` validates (at its end, and at the interval inside it); every epoch
        may when the interval counts across epochs (`every_n_epochs` None)."""
        every = self.every_n_epochs
        return self.data.val_enabled and (every is None or (epoch + 1) % every == 0)

    def due_at_end(self, epoch: int, batches_done: int, plan: BatchPlan, stopped: bool = False) -> bool:
        """Whether epoch `epoch` validates at its end, `batches_done` batches in. With an interval
        that does not divide the epoch (10 batches, `val_check_interval=0.3`: every 3) the last
        validation is the interval's (after batch 9), not an extra one at the end, as in Lightning;
        a stream with no length validates when it runs out. An epoch a stop (`should_stop`) cut
        short validates there, as Lightning's, unless the interval's validation just ran."""
        if stopped:
            return self.due(epoch) and not self.due_inside(epoch, batches_done, plan)
        if plan.across_epochs:
            return self.data.val_enabled and self.across.at_epoch_end(epoch, batches_done, plan)
        every = plan.val_every_n_batches
        on_interval = not every or batches_done % every == 0 or plan.train == math.inf
        return self.due(epoch) and on_interval

    def due_inside(self, epoch: int, batches_done: int, plan: BatchPlan) -> bool:
        """Whether validation runs now, `batches_done` batches into epoch `epoch` (not its end)."""
        every = plan.val_every_n_batches
        if batches_done >= plan.train or not self.data.val_enabled:
            return False
        if plan.across_epochs:
            return self.across.due(epoch, batches_done, plan)
        return bool(every) and batches_done % every == 0 and self.due(epoch)

    def sanity_check(self, steps: int, flag: SanityFlag) -> None:
        """Validate `steps` batches per loader (-1: all; 0: no sanity check) before training, between
        the sanity-check hooks, with `flag` on meanwhile (`trainer.sanity_checking`, also in both
        hooks, as Lightning's); the val loaders are asked for inside it. The global RNG is left as it was. A strategy that cannot run
        validation_step refuses it here, before training, also with no sanity check or on resuming."""
        if self.data.validates:
            self.parts.strategy.step_fn(self.parts.module, "validation_step")  # (a look-up)
        if steps == 0 or not self.data.validates:
            return
        hooks = self.parts.hooks
        with rng_untouched():
            flag.set(True)
            try:
                hooks.callbacks("on_sanity_check_start")
                loaders, plan = self.data.ask_vals(), self.data.plan
                if self.data.val_enabled:
                    self._run(loaders, [n if steps == -1 else min(n, steps) for n in plan.val], sanity=True)
                hooks.callbacks("on_sanity_check_end")  # still sanity checking, its values shown
            finally:
                flag.set(False)
            self.parts.publisher.reset_metrics()  # as Lightning: what the sanity check showed goes

    def run_in_fit(self, epoch: int, window_end: bool = False) -> None:
        """Validate inside fit on every loader, training's RNG (global and CPU generators) left as it
        was (in the Lightning mode moved as Lightning moves it). `window_end` (the batch before it
        ended an accumulation window, its optimizer stepped): the gradients are freed first
        (`on_validation_model_zero_grad`); inside a window, the loggers' step is that of the batches
        stepped so far (Lightning's: the steps before the batch)."""
        if window_end:
            hooks, module = self.parts.hooks, self.parts.module
            if hooks.overridden("on_validation_model_zero_grad"):
                hooks.module("on_validation_model_zero_grad")
            else:
                module.zero_grad(set_to_none=True)
        loaders, plan = self.data.for_validation(epoch)
        if sum(plan.val) == 0:
            return  # the loaders requested again have no batches (as Lightning, nothing runs)
        self.parts.publisher.show_synced_steps(self.parts.module.global_step)
        self._run(loaders, plan.val, sanity=False, stepped=window_end)

    def _run(
        self, loaders: list[Iterable], limits: list[int | float], sanity: bool, stepped: bool = True
    ) -> None:
        if self._seen[0] is not loaders:  # loaders requested again: their batches count from 0
            self._seen = (loaders, [0] * len(loaders))
        seen, step = self._seen[1], self.global_step(stepped)
        if self.moves_training_rng and not sanity:
            self.training_rng = rng_state()
            try:
                run_evaluation(self.parts, "validate", loaders, limits, step, sanity, seen)
            finally:
                self.training_rng = None
            return
        with rng_untouched() as training_rng:
            self.training_rng = training_rng
            try:
                run_evaluation(self.parts, "validate", loaders, limits, step, sanity, seen)
            finally:
                self.training_rng = None
