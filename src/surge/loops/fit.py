"""The fit loop: epochs -> batches -> accumulation windows -> optimizer steps. The training step is the hot
path: per batch only fetch, (move), `training_step` under the precision context, one division for
accumulation, backward, and at a window's end the optimizer step. Host reads only where a comment says."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..callbacks.batch_end import reads_outputs
from ..data import loader_length, loader_state
from ..data.stateful_loader import loader_position
from ..errors import SurgeRuntimeError
from ..optim.manual import OptimizerSteps, batch_only
from ..profiler.base import LoopParts
from . import step_checks
from .across_epochs import FitProgress
from .position import BATCH_END, CLOSED, DONE, RUNNING, EpochStart
from .preempt import preempt, signalled
from .resume_results import own_results
from .rollback import loss_watch
from .step_checks import check_loss, detach_outputs, explain_backward_error, explain_fetch_error, loss_from

if TYPE_CHECKING:
    from .context import FitContext, FitSettings
    from .fit_data import EpochData


class FitLoop(FitProgress):
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
            count=self._count_step if manual else None, compiled=ctx.optim.compiled_steps))  # fmt: skip

    def _count_step(self) -> None:
        self.global_step += 1

    def where(self) -> tuple[int, int, int]:
        """The step about to be taken, the epoch and the batches done in it (for the optimizer's hooks)."""
        return self.global_step + 1, self.epoch, self.batches_done

    def logger_step(self) -> int:
        """The loggers' step in training: `global_step` (manual optimization: the batches trained, as
        Lightning), less the publisher's offset (Lightning's is the batches stepped before the one logging)."""
        ctx = self.ctx
        if ctx is None:
            return self.global_step
        manual = not ctx.parts.module.automatic_optimization
        return (self.manual_batches if manual else self.global_step) - ctx.parts.publisher.train_step_offset

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
        ctx, data = self.context(), self.context().data
        if ctx.rollback is not None:  # the first good state (unless a checkpoint brought its own)
            ctx.rollback.start(self)
        while data.plan.train != 0 and not self.done():
            self.run_epoch()  # a stop before min_epochs/min_steps waits for them (should_stop stays set)
        data.stop_at(loader_position(data.train) if self.batches_done else None)  # see there
        self.stopped_inside = self.batches_done > 0  # Lightning counts that epoch: current_epoch

    def run_epoch(self) -> None:
        ctx, start = self.context(), self.start or EpochStart()
        self.start, data = None, ctx.data
        hooks, results, model = ctx.parts.hooks, ctx.results, ctx.parts.module
        validation, strategy = ctx.validation, ctx.parts.strategy
        epoch = data.for_epoch(
            self.epoch, self.batches_done, start.rng, start.fresh, validation.due(self.epoch)
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
        exhausted, cut = self._train_batches(it, epoch, k, start.keep_grads)
        ctx.end.trained_to(self.batches_done)  # (what the fit's end says: did it train?)
        data.end_epoch()  # num_workers="auto" decided: the loaders for later epochs
        stopped = ctx.stop.requested and self._minimums_met(ctx.settings)  # (Lightning counts the epoch done)
        early = stopped and not (exhausted or cut) and self.batches_done < epoch.plan.train  # its batches cut
        done = exhausted or cut or stopped or self.batches_done >= epoch.plan.train
        self.stage = DONE if done else RUNNING
        if done and not cut and validation.due_at_end(self.epoch, self.batches_done, epoch.plan, early):
            validation.run_in_fit(self.epoch, zero_grad=not early or self.batches_done % k == 0)  # host read
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

    # -- the training step -----------------------------------------------------------------
    def _loop_parts(self, batches: Iterator[Any], window: int, n: float) -> tuple[LoopParts, LoopParts]:
        """The callables the step uses, looked up once per epoch (timed versions under a profiler):
        the first batch's (the fit's first step goes through the FLOP count) and the others'. The
        strategy decides what runs a batch in windows of `window` (a pipeline: its schedule)."""
        ctx = self.context()
        hooks, precision, module = ctx.parts.hooks, ctx.parts.precision, ctx.parts.module
        step = batch_only(ctx.training_step_fn(), module.training_step)
        parts = LoopParts(
            batches=batches,
            move=ctx.parts.move,
            step=ctx.parts.strategy.micro_batches(step, window, n),
            backward=partial(precision.backward, run=hooks.module_fns["backward"])
            if hooks.overridden("backward")
            else precision.backward,
            optimizer_step=ctx.optim.step,
            start_module=hooks.module_fns.get("on_train_batch_start"),
            start_callbacks=hooks.callback_fns.get("on_train_batch_start", ()),
            end_module=hooks.module_fns.get("on_train_batch_end"),
            end_callbacks=hooks.batch_end_callbacks(),
            publish=ctx.parts.publisher.publish,
        )
        parts = ctx.profiler.instrument(parts) if ctx.profiler is not None else parts
        if ctx.flops is None:
            return parts, parts
        return ctx.flops.instrument(parts, manual=not module.automatic_optimization), parts

    def _train_batches(  # noqa: C901 - the step reads top to bottom, in one place
        self, it: Iterator[Any], epoch: EpochData, k: int, keep_grads: bool
    ) -> tuple[bool, bool]:
        """Train on the epoch's batches (`k` per accumulation window); returns whether the loader ran
        out, and whether `on_train_batch_start` returned -1 (the epoch ends there, no validation)."""
        ctx = self.context()
        settings, t, stop, data = ctx.settings, ctx.parts.hooks.trainer, ctx.stop, ctx.data
        model, optim, hooks, strategy = ctx.parts.module, ctx.optim, ctx.parts.hooks, ctx.parts.strategy
        results, validation, signals = ctx.results, ctx.validation, ctx.signals
        val_every = epoch.plan.val_every_n_batches  # 0: validation only at the epoch's end
        p, steady = self._loop_parts(it, k, epoch.plan.train)
        counting = p is not steady  # the fit's first step through the FLOP count, the rest not
        batches, move, step, backward = p.batches, p.move, p.step, p.backward
        optimizer_step, publish, start_module = p.optimizer_step, p.publish, p.start_module
        start_callbacks, end_module, end_callbacks = p.start_callbacks, p.end_module, p.end_callbacks
        batch_ends = bool(end_callbacks) or end_module is not None
        wants_outputs = end_module is not None or reads_outputs(end_callbacks)  # else none are built
        n, loader, cut = epoch.plan.train, epoch.train, False
        max_steps = settings.max_steps if settings.max_steps >= 0 else math.inf
        log_every = settings.log_every_n_steps if ctx.parts.publisher.loggers else 0
        single, checked = strategy.world_size == 1, self.global_step > 0
        # Without a length the last window is only known when the loader runs out; a strategy that
        # cannot reduce skipped gradients afterwards (FSDP) then syncs every micro-batch.
        late_ok = n != math.inf or strategy.syncs_late
        no_sync = strategy.no_sync if not single and late_ok else None
        manual, divided = not model.automatic_optimization, optim.reports_divided_loss  # (see below)
        counted, reported, plateaus = optim.scheduler_clock, None, optim.step_plateaus()
        step_schedulers = optim.schedules("step")  # (sorted at the epoch's start)
        watch, rollback = loss_watch(optim.guard, ctx.rollback), ctx.rollback
        forward_context = ctx.parts.precision.forward_context
        zero_grad = None if optim.free_after_step else optim.zero_grad_window
        before_backward, after_backward = hooks.any("on_before_backward"), hooks.any("on_after_backward")
        pending = 0  # micro-batches since the last optimizer step
        rolled_back = snapshot_due = False  # set by a rollback's check (its batch end and the next batch)
        window: int | float = k  # the current divisor (n - start is a float when n is math.inf)
        clock, batch_idx = perf_counter, self.batches_done
        pace_at = data.pace_mark(batch_idx, measured=ctx.profiler is None)  # the data-wait advice
        batch: Any = None
        if not keep_grads and zero_grad is None:  # (else the window's first batch zeroes, as Lightning)
            optim.zero_grad()  # nothing left over from an epoch that ended inside a window
        while batch_idx < n:
            t0 = clock()
            try:
                batch = next(batches, _END)
            except Exception as err:  # a sample raised, or a worker died or timed out
                explain_fetch_error(err, self.epoch, batch_idx, loader)
                raise
            if batch is _END:
                break
            self.data_wait_s += clock() - t0
            if move is not None:
                batch = move(batch)
            results.batch = batch
            for fn in start_callbacks:
                fn(t, model, batch, batch_idx)
            if start_module is not None and start_module(batch, batch_idx) == -1:  # the epoch ends here
                if rollback is not None:
                    self.global_step = rollback.settle(self, batch_idx)  # host read: judged before its end
                self.batches_done, cut = batch_idx + 1, True
                optim.step_schedulers_at_cut(batch_idx, self.epoch)
                break
            window_start = batch_idx - batch_idx % k
            window = k if n - window_start >= k else n - window_start  # min(k, ...) without a call
            window_end = batch_idx - window_start == window - 1
            # Non-final micro-batches skip the gradient allreduce. DDP decides that during forward,
            # so the forward and the backward both run inside no_sync().
            with no_sync() if no_sync is not None and not window_end else _NO_CONTEXT:
                with forward_context():
                    out = step(batch, batch_idx)
                if manual:
                    loss = out  # the module steps its optimizers; each step counts (LightningOptimizer)
                elif out is None:  # no gradient from this batch; its window still steps
                    step_checks.skipped_batch(ctx, self.epoch, batch_idx, first=batch_idx == window_start)
                    reported = None
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
                    reported = scaled if divided else loss  # the mode: Lightning's, divided
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
                    optimizer_step(None, reported)  # host read inside with fp16: the scaler's inf check
                    self.global_step += 1
                    if step_schedulers:
                        optim.step_schedulers("step", counted(batch_idx + 1, self.global_step), False)
                    if rollback is not None and (
                        self.global_step % rollback.every == 0
                        or batch_idx + 1 == n
                        or self.global_step >= max_steps
                    ):  # host read: a log point, or the epoch's or the fit's end (judged before they act)
                        back = rollback.check(self, batch_idx + 1, epoch_end=batch_idx + 1 == n)
                        if back is not None:  # rolled back: this batch's end hooks are skipped, as its window
                            self.global_step, rolled_back = back, True
                        snapshot_due = rollback.guard.snapshot_due
                    if batch_idx + 1 == n:  # the epoch's last batch: epoch schedulers step before validation
                        optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
                    if log_every and self.global_step % log_every == 0:
                        if optim.guard.device_skip:
                            optim.guard.report(self.global_step)  # host read: a fused optimizer's skips
                        publish(results.read_step(), results.flags(), step=self.logger_step())  # host read
            self.batches_done = batch_idx = batch_idx + 1
            if counting:  # counted: the loop's own step and backward from the next batch on
                counting, step, backward = False, steady.step, steady.backward
                ctx.flops.close()  # type: ignore[union-attr]  # (if the step ran no backward)
            if batch_ends and not rolled_back:
                detached = detach_outputs(out, reported) if wants_outputs else None
                self.stage = BATCH_END
                for fn in end_callbacks:
                    fn(t, model, detached, batch, batch_idx - 1)
                if end_module is not None:
                    end_module(detached, batch, batch_idx - 1)
                self.stage = RUNNING
            if manual:  # the module stepped its optimizers; its metrics reach the loggers per batch
                self.manual_batches += 1
                if log_every and self.manual_batches % log_every == 0:
                    publish(results.read_step(), results.flags(), step=self.logger_step())  # host read
            if window_end and (signals.received is not None or not single) and signalled(self, single):
                preempt(self)  # (ranks agree at log intervals: a collective and a host read there)
            if batch_idx == pace_at:
                pace_at = data.pace(batch_idx, self.data_wait_s)
            if (
                val_every
                and batch_idx % val_every == 0
                and validation.due_inside(self.epoch, batch_idx, epoch.plan)
            ):
                validation.run_in_fit(self.epoch, zero_grad=window_end)  # host read at its end
                model._attach(results=results)
            if window_end and plateaus:  # a step-interval ReduceLROnPlateau: after validation, as Lightning
                optim.step_schedulers("step", counted(batch_idx, self.global_step), plateau=True)
            if snapshot_due or rolled_back:  # after a check: the state between this batch and the next
                assert rollback is not None
                rollback.take_due(self)
                snapshot_due = rolled_back = False
            if self.global_step >= max_steps or (stop.requested and self._minimums_met(settings)):
                if rollback is not None:  # host read: the fit stops on a judged state
                    self.global_step = rollback.settle(self, batch_idx)
                break  # (a stop inside a window leaves its gradients unstepped, as Lightning)
        if batch is not _END and batch_idx == n == loader_length(loader):
            # Let the sampler finish its epoch as a plain `for` loop would: RandomSampler with a
            # user generator draws once more at exhaustion, and later epochs depend on that draw.
            batch = next(batches, _END)
        if pending and batch is _END:
            # The loader ran out inside a window (no length to plan by): step the mean over the
            # micro-batches seen (having run under no_sync, averaged over ranks here).
            strategy.average_gradients(model)
            optim.step(grad_scale=window / pending, loss=reported)
            self.global_step += 1
            optim.step_schedulers("step", counted(batch_idx, self.global_step))
        if rollback is not None and batch is _END:  # (known lengths were judged at their last batch)
            self.global_step = rollback.settle(self, batch_idx)  # host read: the epoch's end
        if batch is _END and n == math.inf:  # no length: the last batch is known only now
            optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
        return batch is _END, cut


_END = object()
_NO_CONTEXT = contextlib.nullcontext()
