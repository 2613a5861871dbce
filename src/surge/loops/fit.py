"""The fit loop: epochs -> batches -> accumulation windows -> optimizer steps. The training step is the hot
path: per batch only fetch, (move), `training_step` under the precision context, one division for
accumulation, backward, and at a window's end the optimizer step. Host reads only where a comment says."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..data import (
    data_wait_advice,
    iter_without_worker_seed_draw,
    loader_length,
    loader_state,
    resume_iterator,
    starts_workers,
)
from ..data.stateful_loader import check_train_loader, loader_position
from ..errors import SurgeRuntimeError
from ..optim.manual import OptimizerSteps, batch_only
from ..profiler.base import LoopParts
from .across_epochs import FitProgress
from .preempt import preempt, signalled
from .resume_results import own_results
from .step_checks import check_loss, detach_outputs, explain_backward_error, explain_fetch_error, loss_from

if TYPE_CHECKING:
    from ..tune.auto_workers import AutoWorkers
    from .context import FitContext, FitSettings
    from .reload import LoaderReload


class FitLoop(FitProgress):
    """Counters and the epoch/step logic. Its state is what a checkpoint records about progress.
    `bind` hands it the fit's context and train loader before a checkpoint is restored or it runs."""

    def __init__(self) -> None:
        self.ctx: FitContext | None = None
        self.train_loader: Any = None
        self.epoch = 0
        self.global_step = 0
        self.batches_done = 0  # batches trained in the current epoch
        self.epoch_done = False  # the epoch's batches ran out (not stopped early by max_steps)
        self.epoch_closed = False  # the epoch's end has run through its schedulers' step
        self.accumulate = 1  # this epoch's accumulation window, read at the epoch's start
        self._resume_rng: dict[str, Any] | None = None  # RNG at the epoch's start, for a mid-epoch resume
        self._keep_grads = False  # resumed inside an accumulation window: its gradients were restored
        self._resume_results: dict[str, Any] | None = None  # the resumed epoch's metrics so far
        self.epoch_start_rng: dict[str, Any] | None = None
        self._advised = self.ending = False  # ending: the batch-end hooks run (`trainer.is_last_batch`)
        self.auto_workers: AutoWorkers | None = None  # num_workers="auto", until its first epoch ends
        self.reload: LoaderReload | None = None  # reload_dataloaders_every_n_epochs > 0
        self.inexact_said: str | None = None  # why checkpoints cannot resume exactly ("": they can)
        self.loader_resume: Any = None  # a stateful_loader.LoaderResume: the loader's own position
        self.manual = False  # the module steps its optimizers (automatic_optimization=False)
        self.manual_batches = 0  # batches trained under manual optimization: the loggers' step there
        self._results_fresh = False  # the epoch's results were emptied when fit began (see bind)
        self.step_offset = 0  # taken off the loggers' training step (the publisher's, from bind)
        self.skipped_rest = False  # on_train_batch_start returned -1: the epoch ends at that batch
        self.end_position: Any = None  # the train loader's position where the fit stopped inside an epoch
        self.stopped_inside = False  # the fit stopped inside an epoch (after its end hooks ran)

    def bind(self, ctx: FitContext, train_loader: Any) -> None:
        self.ctx, self.train_loader, self.end_position = ctx, check_train_loader(train_loader), None
        self.stopped_inside = False
        self.trainer = ctx.parts.hooks.trainer  # what callbacks get; its public `should_stop` they set
        self.accumulate, parts = ctx.settings.accumulate_grad_batches, ctx.parts
        self.step_offset, self._results_fresh = parts.publisher.train_step_offset, True
        ctx.results.reset()  # emptied now: the first epoch keeps what `on_train_start` logs (Lightning)
        self.manual = manual = not parts.module.automatic_optimization
        if manual:
            ctx.optim.manual(ctx.settings.accumulate_grad_batches)
        parts.module._attach(results=ctx.results, optimizer_steps=OptimizerSteps(
            ctx.optim.optimizers, parts.precision, parts.hooks, parts.strategy, parts.module,
            count=self._count_step if manual else None, compiled=ctx.optim.compiled_steps))  # fmt: skip

    def _count_step(self) -> None:
        self.global_step += 1

    def logger_step(self) -> int:
        """The loggers' step in training: `global_step` (manual optimization: the batches trained, as
        Lightning), less `step_offset` (Lightning's is the batches stepped before the one logging)."""
        return (self.manual_batches if self.manual else self.global_step) - self.step_offset

    def _context(self) -> FitContext:
        """The bound context (a method that needs it calls this once, never per step)."""
        if self.ctx is None:
            raise SurgeRuntimeError("FitLoop: bind(ctx, train_loader) must run before the loop is used")
        return self.ctx

    def keep_window_gradients(self) -> None:
        """A resume inside an accumulation window restored that window's gradients: keep them."""
        self._keep_grads = True

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where training stands, exact at any point a checkpoint can be written."""
        return {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "manual_batches": self.manual_batches,
            "batches_done": self.batches_done,
            "epoch_done": self.epoch_closed,
            "epoch_start_rng": self.epoch_start_rng,
            "generators": loader_state.generator_states(self.train_loader),
            "sampler_seed": loader_state.sampler_seed(self.train_loader),
            "world_size": self.ctx.parts.strategy.world_size if self.ctx is not None else 1,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.global_step = state["global_step"]
        self.manual_batches = state.get("manual_batches", 0)
        if state["epoch_done"]:
            self.epoch, self.batches_done = state["epoch"] + 1, 0
        else:
            self.epoch, self.batches_done = state["epoch"], state["batches_done"]
            self._resume_rng = state.get("epoch_start_rng")
            self._resume_results = own_results(
                state, self._context().parts.strategy, self.batches_done, self.epoch
            )
        if self.batches_done == 0 and self._resume_rng is None and state.get("generators") is not None:
            # At an epoch's start the loader's own generators stand where the saved run left them.
            loader_state.set_generator_states(self.train_loader, state["generators"])
        loader_state.set_sampler_seed(self.train_loader, state.get("sampler_seed"))
        self.epoch_done = self.epoch_closed = self.stopped_inside = False

    def inside_window(self) -> bool:
        """True between two micro-batches of one accumulation window (gradients are pending)."""
        ctx = self._context()
        k, n, b = self.accumulate, ctx.settings.batches_per_epoch, self.batches_done
        if k == 1 or b == 0 or self.epoch_done or not ctx.parts.module.automatic_optimization:
            return False
        last = b - 1
        start = last - last % k
        return last - start != min(k, n - start) - 1

    # -- epochs ----------------------------------------------------------------------------
    def done(self) -> bool:
        settings = self._context().settings
        if 0 <= settings.max_steps <= self.global_step:
            return True
        if 0 <= settings.max_epochs <= self.epoch:
            return True
        return self.trainer.should_stop and self._minimums_met(settings)

    def _minimums_met(self, settings: FitSettings) -> bool:
        return self.epoch >= settings.min_epochs and self.global_step >= settings.min_steps

    def run(self) -> None:
        settings = self._context().settings
        while settings.batches_per_epoch != 0 and not self.done():
            self.run_epoch()  # a stop before min_epochs/min_steps waits for them (should_stop stays set)
        self.end_position = loader_position(self.train_loader) if self.batches_done else None  # see there
        self.stopped_inside = self.batches_done > 0  # Lightning counts that epoch: current_epoch

    def run_epoch(self) -> None:
        if self.reload is not None:
            self.reload.at_epoch_start()  # once per epoch: new loaders when due
        t, ctx = self.trainer, self._context()
        hooks, results, model = ctx.parts.hooks, ctx.results, ctx.parts.module
        validation, strategy = ctx.validation, ctx.parts.strategy
        if not self._results_fresh:
            results.reset()
        self._results_fresh = False
        if self._resume_results is not None:  # resumed inside this epoch: its metrics so far
            results.load_state_dict(self._resume_results, model.device)
            self._resume_results = None
        model._attach(results=results)
        ctx.parts.publisher.follow(results)  # callback_metrics show this epoch's step values
        loader = self.train_loader
        self.epoch_start_rng = loader_state.epoch_start(loader, self.epoch, self._resume_rng)
        self.epoch_done = self.epoch_closed = False
        if self.batches_done == 0:  # (not when resumed inside the epoch, as in Lightning)
            hooks.call("on_train_epoch_start")
        self.accumulate = t.accumulate_grad_batches  # once per epoch, after its start hooks: a callback
        ctx.optim.refresh_schedulers()  # may set accumulate_grad_batches or change the schedulers (SWA)
        exhausted = self._train_batches(self._iterator(loader))
        if self.auto_workers is not None:  # the worker count is decided: the loaders for later epochs
            self.train_loader, validation.loaders = self.auto_workers.settled()
            self.auto_workers = None
        cut, self.skipped_rest = self.skipped_rest, False  # no validation after on_train_batch_start's -1
        stopped = t.should_stop and self._minimums_met(ctx.settings)  # (Lightning counts the epoch done)
        self.epoch_done = exhausted or cut or stopped or self.batches_done >= ctx.settings.batches_per_epoch
        if self.epoch_done and not cut and validation.due_at_end(self.epoch, self.batches_done):
            validation.run(zero_grad=True)  # host read at its end
        self._end_epoch()
        if strategy.world_size > 1:
            t.should_stop = strategy.reduce_bool(t.should_stop)  # every rank stops at the same epoch
        if self.epoch_done:
            self.epoch += 1
            self.batches_done = 0
            self.epoch_done = self.epoch_closed = False
            self.epoch_start_rng = None  # the next epoch's start is now: the RNG as it stands

    def _end_epoch(self) -> None:
        ctx, step = self._context(), self.logger_step()  # hooks, metrics, plateau: in Lightning's order
        hooks, results, publish = ctx.parts.hooks, ctx.results, ctx.parts.publisher.publish
        ctx.parts.module._attach(results=results)
        results.batch = None  # as Lightning: an epoch-end mean weighs 1
        self.epoch_closed = self.epoch_done  # a checkpoint from here on resumes at the next epoch
        ctx.parts.publisher.follow(None)
        if hooks.read_at_epoch_end():  # they see the epoch's means, as in Lightning (host reads: epoch end)
            publish(results.read_step(), results.flags(), step=step, to_loggers=False)
            publish(results.read_epoch(), results.flags(), step=step, to_loggers=False)
        results.default_on_step, results.default_on_epoch = False, True
        hooks.train_epoch_end()  # the callbacks, then the module
        results.default_on_step, results.default_on_epoch = True, False
        flags = results.flags()
        publish(results.read_step(), flags, step=step, to_loggers=False)  # host read: what they logged too
        publish(results.read_epoch(), flags, step=step)
        ctx.optim.guard.report(self.global_step)  # host read: epoch end
        if self.epoch_done:  # ReduceLROnPlateau on the epoch's metrics (the others stepped at its last batch)
            ctx.optim.step_schedulers("epoch", self.epoch + 1, plateau=True)
        hooks.train_epoch_end_monitors()  # checkpointing and early stopping, on the published metrics
        ctx.parts.publisher.save_loggers()

    def _iterator(self, loader: Any) -> Iterator[Any]:
        # Persistent workers start in a run's first epoch; a run resumed later starts them without that draw.
        later = self.epoch > 0
        if self.loader_resume is not None:  # the loader continues from its own saved position
            it, self._resume_rng, self.loader_resume = self.loader_resume.iterator(loader), None, None
        elif self.batches_done == 0 and self._resume_rng is None:
            it = iter_without_worker_seed_draw(loader) if later and starts_workers(loader) else iter(loader)
        else:
            it = resume_iterator(loader, self.batches_done, self._resume_rng, later_epoch=later)
            self._resume_rng = None
        if self.auto_workers is not None:
            it = self.auto_workers.watch(it, self.batches_done, self.epoch_start_rng)
            self._advised = True  # the advice to load in workers is what auto acts on
        return it

    # -- the training step -----------------------------------------------------------------
    def _loop_parts(self, batches: Iterator[Any]) -> LoopParts:
        """The callables the step uses, looked up once per epoch (timed versions under a profiler)."""
        ctx = self._context()
        hooks, precision, module = ctx.parts.hooks, ctx.parts.precision, ctx.parts.module
        parts = LoopParts(
            batches=batches,
            move=ctx.parts.move,
            step=batch_only(ctx.training_step_fn(), module.training_step),
            backward=partial(precision.backward, run=hooks.module_fns["backward"])
            if hooks.overridden("backward")
            else precision.backward,
            optimizer_step=ctx.optim.step,
            start_module=hooks.module_fns.get("on_train_batch_start"),
            start_callbacks=hooks.callback_fns.get("on_train_batch_start", ()),
            end_module=hooks.module_fns.get("on_train_batch_end"),
            end_callbacks=hooks.callback_fns.get("on_train_batch_end", ()),
            publish=ctx.parts.publisher.publish,
        )
        return ctx.profiler.instrument(parts) if ctx.profiler is not None else parts

    def _train_batches(self, it: Iterator[Any]) -> bool:  # noqa: C901 - the step reads top to bottom, in one place
        """Train on the epoch's batches; returns True if the loader ran out."""
        t, ctx = self.trainer, self._context()
        settings = ctx.settings
        model, optim, hooks, strategy = ctx.parts.module, ctx.optim, ctx.parts.hooks, ctx.parts.strategy
        results, validation, signals = ctx.results, ctx.validation, ctx.signals
        val_every = validation.plan.val_every_n_batches  # 0: validation only at the epoch's end
        p = self._loop_parts(it)
        batches, move, step, backward, optimizer_step, publish = (
            p.batches, p.move, p.step, p.backward, p.optimizer_step, p.publish
        )  # fmt: skip
        start_module, start_callbacks = p.start_module, p.start_callbacks
        end_module, end_callbacks = p.end_module, p.end_callbacks
        wants_outputs = bool(end_callbacks) or end_module is not None
        n, k = settings.batches_per_epoch, self.accumulate
        max_steps = settings.max_steps if settings.max_steps >= 0 else math.inf
        log_every = settings.log_every_n_steps if ctx.parts.publisher.loggers else 0
        single = strategy.world_size == 1
        # Without a length the last window is only known when the loader runs out; a strategy that
        # cannot reduce skipped gradients afterwards (FSDP) then syncs every micro-batch.
        late_ok = n != math.inf or strategy.syncs_late
        no_sync = strategy.no_sync if not single and late_ok else None
        manual = not model.automatic_optimization
        watch = optim.guard.watch if optim.guard.active else None
        forward_context = ctx.parts.precision.forward_context
        zero_grad = None if optim.free_after_step else optim.zero_grad_window
        checked = self.global_step > 0
        before_backward, after_backward = hooks.any("on_before_backward"), hooks.any("on_after_backward")
        pending = 0  # micro-batches since the last optimizer step
        window: int | float = k  # the current divisor (n - start is a float when n is math.inf)
        clock = perf_counter
        wait, t_epoch = 0.0, clock()
        batch_idx = self.batches_done
        batch: Any = None
        if not self._keep_grads:  # (a resume inside a window restored that window's gradients)
            optim.zero_grad()  # nothing left over from an epoch that ended inside a window
        self._keep_grads = False
        while batch_idx < n:
            t0 = clock()
            try:
                batch = next(batches, _END)
            except Exception as err:  # a sample raised, or a worker died or timed out
                explain_fetch_error(err, self.epoch, batch_idx, self.train_loader)
                raise
            if batch is _END:
                break
            wait += clock() - t0
            if move is not None:
                batch = move(batch)
            results.batch = batch
            for fn in start_callbacks:
                fn(t, model, batch, batch_idx)
            if start_module is not None and start_module(batch, batch_idx) == -1:  # the epoch ends here
                self.batches_done, self.skipped_rest = batch_idx + 1, True
                optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
                break
            window_start = batch_idx - batch_idx % k
            window = min(k, n - window_start)
            window_end = batch_idx - window_start == window - 1
            # Non-final micro-batches skip the gradient allreduce. DDP decides that during forward,
            # so the forward and the backward both run inside no_sync().
            with no_sync() if no_sync is not None and not window_end else _NO_CONTEXT:
                with forward_context():
                    out = step(batch, batch_idx)
                if manual:
                    loss = out  # the module steps its optimizers; each step counts (LightningOptimizer)
                else:
                    loss = out if isinstance(out, Tensor) else loss_from(out, batch_idx)
                    if not checked:
                        check_loss(loss)
                        checked = True
                    if watch is not None:
                        watch(loss)  # on the device: inf/NaN counted, read at the next read point
                    if zero_grad is not None and batch_idx == window_start:
                        zero_grad(self.epoch, batch_idx)  # the window's first micro-batch (hooks watch)
                    scaled = loss / window if window != 1 else loss
                    if before_backward:
                        hooks.call("on_before_backward", scaled)
                    try:
                        backward(scaled)
                    except RuntimeError as err:
                        explain_backward_error(err, loss, self.epoch, batch_idx)
                        raise
                    if after_backward:
                        hooks.call("on_after_backward")
            if not manual:
                pending += 1
                if window_end:
                    pending = 0
                    optimizer_step()  # host read inside with fp16: the scaler's inf check
                    self.global_step += 1
                    optim.step_schedulers("step", self.global_step)
                    if batch_idx + 1 == n:  # the epoch's last batch: epoch schedulers step before validation
                        optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
                    if log_every and self.global_step % log_every == 0:
                        if optim.guard.device_skip:
                            optim.guard.report(self.global_step)  # host read: a fused optimizer's skips
                        publish(results.read_step(), results.flags(), step=self.logger_step())  # host read
            self.batches_done = batch_idx = batch_idx + 1
            if wants_outputs:
                detached = detach_outputs(out)
                self.ending = True
                for fn in end_callbacks:
                    fn(t, model, detached, batch, batch_idx - 1)
                if end_module is not None:
                    end_module(detached, batch, batch_idx - 1)
                self.ending = False
            if manual:  # the module stepped its optimizers; its metrics reach the loggers per batch
                self.manual_batches += 1
                if log_every and self.manual_batches % log_every == 0:
                    publish(results.read_step(), results.flags(), step=self.logger_step())  # host read
            if window_end and (signals.received is not None or not single) and signalled(self, single):
                preempt(self)  # (ranks agree at log intervals: a collective and a host read there)
            if batch_idx == ADVICE_AFTER_BATCHES and not self._advised and ctx.profiler is None:
                self._advised = True
                data_wait_advice(self.train_loader, wait, clock() - t_epoch, batch_idx)
            if val_every and batch_idx % val_every == 0 and validation.due_inside(self.epoch, batch_idx):
                validation.run(zero_grad=window_end)  # host read at its end (the epoch metrics of validation)
                model._attach(results=results)
            if self.global_step >= max_steps or (
                t.should_stop and window_end and self._minimums_met(settings)
            ):
                break
        if batch is not _END and batch_idx == n == loader_length(self.train_loader):
            # Let the sampler finish its epoch as a plain `for` loop would: RandomSampler with a
            # user generator draws once more at exhaustion, and later epochs depend on that draw.
            batch = next(batches, _END)
        if pending and batch is _END:
            # The loader ran out inside a window (no length to plan by): step the mean over the
            # micro-batches seen (having run under no_sync, averaged over ranks here).
            strategy.average_gradients(model)
            optim.step(grad_scale=window / pending)
            self.global_step += 1
            optim.step_schedulers("step", self.global_step)
        if batch is _END and n == math.inf:  # no length: the last batch is known only now
            optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
        return batch is _END


_END = object()
ADVICE_AFTER_BATCHES = 50  # when the loop says whether it mostly waited for data
_NO_CONTEXT = contextlib.nullcontext()
