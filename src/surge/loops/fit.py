"""The fit loop: epochs -> batches -> accumulation windows -> optimizer steps. The training step is the hot
path: per batch only fetch, (move), `training_step` under the precision context, one division for
accumulation, backward, and at a window's end the optimizer step. Host reads only where a comment says."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..data import loader_state
from ..data.stateful_loader import loader_position
from ..errors import SurgeRuntimeError
from ..optim.manual import OptimizerSteps
from .across_epochs import FitProgress
from .position import BATCH_END, CLOSED, DONE, RUNNING, EpochStart
from .resume_results import own_results
from .train_batches import TrainBatches

if TYPE_CHECKING:
    from .context import FitContext, FitSettings
    from .fit_data import EpochData


class FitLoop(FitProgress, TrainBatches):
    """Counters and the position: where training stands, what a checkpoint records about progress.
    `bind` hands it the fit's context before a checkpoint is restored or it runs; the loaders, the
    batch plan and the accumulation are the context's `FitData`."""

    def __init__(self) -> None:
        self.ctx: FitContext | None = None
        self.epoch = 0
        self.global_step = 0
        self.batches_done = 0  # batches trained in the current epoch
        self.manual_batches = 0  # batches trained under manual optimization: the loggers' step there
        self.stage = RUNNING  # DONE: the batches ran out (not stopped by max_steps); CLOSED: its end ran
        self.epoch_start_rng: dict[str, Any] | None = None
        self.start: EpochStart | None = None
        self.stopped_inside = False  # the fit stopped inside an epoch (after its end hooks ran)
        self.data_wait_s = 0.0  # seconds spent waiting for batches, ever (goodput reads it)

    @property
    def epoch_done(self) -> bool:
        """The epoch's batches ran out (or it was stopped where Lightning counts it done)."""
        return self.stage >= DONE

    @property
    def epoch_closed(self) -> bool:
        """The epoch's end has run through its schedulers' step."""
        return self.stage == CLOSED

    @property
    def ending(self) -> bool:
        """The batch-end hooks run (`trainer.is_last_batch`)."""
        return self.stage == BATCH_END

    def bind(self, ctx: FitContext) -> None:
        self.ctx, self.stopped_inside = ctx, False
        parts = ctx.parts
        ctx.results.reset()  # emptied now: the first epoch keeps what `on_train_start` logs (Lightning)
        self.start = EpochStart(fresh=True)
        if manual := not parts.module.automatic_optimization:
            ctx.optim.manual(ctx.data.accumulate)
        parts.module._attach(results=ctx.results, optimizer_steps=OptimizerSteps(
            ctx.optim.optimizers, parts.precision, parts.hooks, parts.strategy, parts.module,
            count=self._count_step if manual else None, compiled=ctx.optim.compiled_steps,
            watch=ctx.optim.guard.watch if manual and ctx.optim.guard.active else None))  # fmt: skip

    def _count_step(self) -> None:
        self.global_step += 1

    def where(self) -> tuple[int, int, int]:
        """The step about to be taken, the epoch and the batches done in it (for the optimizer's hooks)."""
        return self.global_step + 1, self.epoch, self.batches_done

    def logger_step(self, stepped: bool = True) -> int:
        """The loggers' step in training: `global_step` (manual optimization: the batches trained, as
        Lightning), less the publisher's offset (Lightning's is the batches stepped before the one
        logging) when that batch `stepped` (inside an accumulation window it stepped nothing)."""
        ctx = self.ctx
        if ctx is None:
            return self.global_step
        manual = not ctx.parts.module.automatic_optimization
        offset = ctx.parts.publisher.train_step_offset if stepped else 0
        return (self.manual_batches if manual else self.global_step) - offset

    def context(self) -> FitContext:
        """The bound context (a method that needs it calls this once, never per step)."""
        if self.ctx is None:
            raise SurgeRuntimeError("FitLoop: bind(ctx) must run before the loop is used")
        return self.ctx

    def keep_window_gradients(self) -> None:
        """A resume inside an accumulation window restored that window's gradients: keep them."""
        self.start = replace(self.start or EpochStart(), keep_grads=True)

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where training stands, exact at any point a checkpoint can be written."""
        ctx = self.ctx
        data = ctx.data.state_dict() if ctx is not None else {
            "generators": loader_state.generator_states(None), "sampler_seed": loader_state.sampler_seed(None)
        }  # fmt: skip
        return {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "manual_batches": self.manual_batches,
            "batches_done": self.batches_done,
            "epoch_done": self.epoch_closed,
            "epoch_start_rng": self.epoch_start_rng,
            **data,
            "world_size": ctx.parts.strategy.world_size if ctx is not None else 1,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ctx = self.context()
        self.global_step = state["global_step"]
        self.manual_batches = state.get("manual_batches", 0)
        rng, results = None, None
        if state["epoch_done"]:
            self.epoch, self.batches_done = state["epoch"] + 1, 0
        else:
            self.epoch, self.batches_done = state["epoch"], state["batches_done"]
            rng = state.get("epoch_start_rng")
            results = own_results(state, ctx.parts.strategy, self.batches_done, self.epoch)
        self.start = replace(self.start or EpochStart(), rng=rng, results=results)
        ctx.data.load_state_dict(state, at_epoch_start=self.batches_done == 0 and rng is None)
        self.stage, self.stopped_inside = RUNNING, False

    def show_resumed_step(self, state: Mapping[str, Any]) -> None:
        """Before a resumed fit's sanity check (the Lightning mode's): the checkpoint's global step,
        as Lightning's hooks see it there; `load_state_dict` restores the rest once training starts."""
        self.global_step = state["global_step"]

    def inside_window(self) -> bool:
        """True between two micro-batches of one accumulation window (gradients are pending)."""
        ctx = self.context()
        k, n, b = ctx.data.window, ctx.data.plan.train, self.batches_done
        if k == 1 or b == 0 or self.epoch_done or not ctx.parts.module.automatic_optimization:
            return False
        last = b - 1
        start = last - last % k
        return last - start != min(k, n - start) - 1

    # -- epochs ----------------------------------------------------------------------------
    def done(self) -> bool:
        ctx = self.context()
        settings = ctx.settings
        if 0 <= settings.max_steps <= self.global_step:
            return True
        if 0 <= settings.max_epochs <= self.epoch:
            return True
        return ctx.stop.requested and self._minimums_met(settings)

    def _minimums_met(self, settings: FitSettings) -> bool:
        return self.epoch >= settings.min_epochs and self.global_step >= settings.min_steps

    def run(self) -> None:
        """Epochs until done: each one's start, its batches (the step: `TrainBatches`), its end."""
        ctx, data = self.context(), self.context().data
        if ctx.rollback is not None:  # the first good state (unless a checkpoint brought its own)
            ctx.rollback.start(self)
        while data.plan.train != 0 and not self.done():  # a stop before min_epochs/min_steps waits
            epoch, k, it, keep_grads = self._start_epoch()
            manual = not ctx.parts.module.automatic_optimization  # (Lightning's two loops)
            train = self._train_manual if manual else self._train_batches
            exhausted, cut = train(it, epoch, k, keep_grads)
            self._finish_epoch(epoch, k, exhausted, cut)
        data.stop_at(loader_position(data.train) if self.batches_done else None)  # see there
        self.stopped_inside = self.batches_done > 0  # Lightning counts that epoch: current_epoch

    def _start_epoch(self) -> tuple[EpochData, int, Iterator[Any], bool]:
        """The epoch's data, results and start hooks; returns its data, window, batches and whether a
        resume's window gradients are kept."""
        ctx, start = self.context(), self.start or EpochStart()
        self.start, data = None, ctx.data
        hooks, results, model = ctx.parts.hooks, ctx.results, ctx.parts.module
        epoch = data.for_epoch(
            self.epoch, self.batches_done, start.rng, start.fresh, ctx.validation.due(self.epoch)
        )
        if not start.fresh:
            results.reset()
        if start.results is not None:  # resumed inside this epoch: its metrics so far
            results.load_state_dict(start.results, model.device)
        model._attach(results=results)
        ctx.parts.publisher.follow(results)  # callback_metrics show this epoch's step values
        self.epoch_start_rng = loader_state.epoch_start(epoch.train, self.epoch, start.rng)
        self.stage = RUNNING
        if self.batches_done == 0:  # (not when resumed inside the epoch, as in Lightning)
            hooks.call("on_train_epoch_start")
        k = data.start_windows()  # once per epoch, after its start hooks: a callback may set
        ctx.optim.refresh_schedulers()  # accumulate_grad_batches or change the schedulers (SWA)
        it = data.batches(self.epoch, self.batches_done, start.rng, self.epoch_start_rng)
        if ctx.rollback is not None and self.batches_done == 0:
            ctx.rollback.epoch_start(self)  # a snapshot of the judged state the epoch starts from
        return epoch, k, it, start.keep_grads

    def _finish_epoch(self, epoch: EpochData, k: int, exhausted: bool, cut: bool) -> None:
        """After the batches: validation at the epoch's end if due, the end hooks, the ranks agree."""
        ctx, validation, strategy, data = (
            self.context(),
            self.context().validation,
            self.context().parts.strategy,
            self.context().data,
        )
        ctx.end.trained_to(self.batches_done)  # (what the fit's end says: did it train?)
        data.end_epoch()  # num_workers="auto" decided: the loaders for later epochs
        stopped = ctx.stop.requested and self._minimums_met(ctx.settings)  # (Lightning counts the epoch done)
        early = stopped and not (exhausted or cut) and self.batches_done < epoch.plan.train  # its batches cut
        done = exhausted or cut or stopped or self.batches_done >= epoch.plan.train
        self.stage = DONE if done else RUNNING
        if done and not cut and validation.due_at_end(self.epoch, self.batches_done, epoch.plan, early):
            validation.run_in_fit(self.epoch, window_end=not early or self.batches_done % k == 0)  # host read
        self._end_epoch(plateau=not early)  # (Lightning steps no plateau for an epoch a stop cut short)
        if strategy.world_size > 1:
            ctx.stop.agree(strategy)  # every rank stops at the same epoch
        if self.epoch_done:
            self.epoch, self.batches_done, self.stage = self.epoch + 1, 0, RUNNING
            self.epoch_start_rng = None  # the next epoch's start is now: the RNG as it stands

    def _end_epoch(self, plateau: bool) -> None:
        ctx, step = self.context(), self.logger_step()  # hooks, metrics, plateau: in Lightning's order
        hooks, results, publish = ctx.parts.hooks, ctx.results, ctx.parts.publisher.publish
        ctx.parts.module._attach(results=results)
        results.batch = None  # as Lightning: an epoch-end mean weighs 1
        if self.stage == DONE:
            self.stage = CLOSED  # a checkpoint from here on resumes at the next epoch
        ctx.parts.publisher.follow(None)
        if hooks.read_at_epoch_end():  # they see the epoch's means, as in Lightning (host reads: epoch end)
            publish(results.read_step(), results.flags(), step=step, to_loggers=False)
            publish(results.read_epoch(), results.flags(), step=step, to_loggers=False)
        results.at_epoch_end(True)
        hooks.train_epoch_end()  # the callbacks, then the module
        results.at_epoch_end(False)
        flags = results.flags()
        publish(results.read_step(), flags, step=step, to_loggers=False)  # host read: what they logged too
        publish(results.read_epoch(), flags, step=step)
        ctx.optim.guard.report(self.global_step)  # host read: epoch end
        if self.epoch_done and plateau:  # ReduceLROnPlateau on the epoch's metrics (the others: last batch)
            ctx.optim.step_schedulers("epoch", self.epoch + 1, plateau=True)
        hooks.train_epoch_end_monitors()  # checkpointing and early stopping, on the published metrics
        ctx.parts.publisher.save_loggers()
