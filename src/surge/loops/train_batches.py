"""An epoch's training batches: the window's spine (fetch, move, forward, scale, backward, step) in
one short loop, and between batches the owners that decide their own cadence: after an optimizer
step the schedulers, a rollback's check and the loggers (`_after_step`); after a batch preemption,
the data-wait pace, validation inside the epoch, plateau schedulers, snapshots and stopping
(`_between`). Each is asked only where an int compare in the loop says it is due, so the default
step calls nothing it does not need. Manual optimization has its own, shorter loop (as Lightning).
What the step calls is bound once per epoch (`EpochSteps`). Host reads only where a comment says."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..callbacks.batch_end import reads_outputs
from ..data import loader_length
from ..optim.manual import batch_only
from ..profiler.base import LoopParts
from . import step_checks
from .position import BATCH_END, RUNNING
from .preempt import preempt, signalled
from .rollback import loss_watch
from .step_checks import check_loss, detach_outputs, explain_backward_error, explain_fetch_error, loss_from
from .window_backward import WindowBackward, window_backward

if TYPE_CHECKING:
    from .context import FitContext, FitSettings
    from .fit_data import EpochData


@dataclass(slots=True)
class EpochSteps:
    """What one epoch's step calls, bound at its start, and when its owners are next due."""

    parts: LoopParts  # the first batch's (through the FLOP count when it is the fit's first)
    steady: LoopParts  # the other batches'
    step: Callable[..., Any]  # the training step (the first one's, then the steady one)
    backward: WindowBackward  # (loss, window): the precision's, the backward hooks around it if any
    inspect: Callable[[Tensor], None] | None  # what each loss is handed to (checked once, watched)
    data: EpochData  # the epoch's loader and batch plan, as `FitData.for_epoch` handed them
    n: float  # batches in the epoch (math.inf: no length)
    k: int  # micro-batches per window
    max_steps: float
    log_every: int  # 0: nothing published per interval (no logger)
    agree_every: int  # several processes: they agree on a preemption every this many steps (else 0)
    step_schedulers: bool  # a step-interval scheduler steps after each optimizer step
    plateaus: bool  # one needs a metric: it steps after the batch's validation (Lightning's order)
    starts: bool  # an on_train_batch_start hook runs
    batch_ends: bool  # an on_train_batch_end hook runs
    wants_outputs: bool  # and one reads its outputs
    after_batch: bool  # `_after_batch` has something to do (end hooks, or the FLOP count to close)
    pace_at: int  # the batch count at which the data-wait pace is asked (-1: never)
    step_due: float = 0  # the global step at which `_after_step` is next asked
    between_at: float = 0  # the batch count at which `_between` is next asked
    rolled_back: bool = False  # set by a rollback's check (its batch end and the next batch)
    row_held: bool = False  # a log interval's row waits for the batch's end hooks
    snapshot_due: bool = False
    ran_out: bool = False  # the loader ran out
    cut: bool = False  # on_train_batch_start returned -1


class TrainBatches:
    """The fit loop's batches; the counters and the context are `FitLoop`'s."""

    epoch: int
    global_step: int
    batches_done: int
    manual_batches: int
    stage: int
    data_wait_s: float

    def context(self) -> FitContext:
        raise NotImplementedError

    def logger_step(self, stepped: bool = True) -> int:
        raise NotImplementedError

    def _minimums_met(self, settings: FitSettings) -> bool:
        raise NotImplementedError

    # -- the spine -------------------------------------------------------------------------
    def _train_batches(
        self, it: Iterator[Any], epoch: EpochData, k: int, keep_grads: bool
    ) -> tuple[bool, bool]:
        """Train on the epoch's batches (`k` per accumulation window); returns whether the loader ran
        out, and whether `on_train_batch_start` returned -1 (the epoch ends there, no validation)."""
        ctx = self.context()
        s = self._bind(ctx, it, epoch, k, keep_grads)
        optim, stop, signals, strategy = ctx.optim, ctx.stop, ctx.signals, ctx.parts.strategy
        optimizer_step = s.parts.optimizer_step
        late_ok = s.n != math.inf or strategy.syncs_late  # (else a strategy like FSDP syncs each micro-batch)
        no_sync = strategy.no_sync if strategy.world_size > 1 and late_ok else None
        zero_grad = None if optim.free_after_step else optim.zero_grad_window
        divided, n, max_steps = optim.reports_divided_loss, s.n, s.max_steps
        batch_idx, pending, reported = self.batches_done, 0, None
        window: float = k  # the current divisor (a float when n is math.inf)
        for batch in self._fetched(ctx, s, batch_idx):  # fetched, moved, through the batch-start hooks
            window_start = batch_idx - batch_idx % k
            window = k if n - window_start >= k else n - window_start  # min(k, ...) without a call
            window_end = batch_idx - window_start == window - 1
            # Non-final micro-batches skip the gradient allreduce. DDP decides that during forward,
            # so the forward and the backward both run inside no_sync().
            with no_sync() if no_sync is not None and not window_end else _NO_CONTEXT:
                out = s.step(batch, batch_idx)  # (in the precision's forward context)
                if out is None:  # no gradient from this batch; its window still steps
                    step_checks.skipped_batch(ctx, self.epoch, batch_idx, first=batch_idx == window_start)
                    reported = None
                else:
                    loss = out if isinstance(out, Tensor) else loss_from(out, batch_idx)
                    if s.inspect is not None:  # checked once; inf/NaN counted on the device (no read)
                        s.inspect(loss)
                    if zero_grad is not None and batch_idx == window_start:
                        zero_grad(self.epoch, batch_idx)  # the window's first micro-batch (hooks watch)
                    try:  # the loss divided by the window (or the same gradients from a seed: no division)
                        scaled = s.backward(loss, window)
                    except RuntimeError as err:
                        explain_backward_error(err, loss, self.epoch, batch_idx)
                        raise
                    reported = scaled if divided else loss  # the mode: Lightning's, divided
            pending += 1
            if window_end:
                pending = 0
                optimizer_step(None, reported)  # host read inside with fp16: the scaler's inf check
                self.global_step += 1
                if self.global_step >= s.step_due or batch_idx + 1 == n:
                    self._after_step(ctx, s, batch_idx + 1)  # schedulers, a rollback's check, loggers
            self.batches_done = batch_idx = batch_idx + 1
            if s.after_batch:  # the FLOP count closed; the batch-end hooks
                self._after_batch(ctx, s, out, reported, batch, batch_idx - 1)
            due = batch_idx >= s.between_at or self.global_step >= max_steps
            if (due or stop.requested or signals.received is not None) and self._between(
                ctx, s, batch_idx, window_end
            ):
                break  # (a stop inside a window leaves its gradients unstepped, as Lightning)
        return self._ran_out(ctx, s, batch_idx, pending, window, reported)

    def _train_manual(
        self, it: Iterator[Any], epoch: EpochData, k: int, keep_grads: bool
    ) -> tuple[bool, bool]:
        """Manual optimization's batches: the module steps its optimizers (each step counts); its
        metrics reach the loggers per batch. Returns as `_train_batches`."""
        ctx = self.context()
        stop, signals = ctx.stop, ctx.signals
        s = self._bind(ctx, it, epoch, k, keep_grads)
        batch_idx = self.batches_done
        for batch in self._fetched(ctx, s, batch_idx):  # fetched, moved, through the batch-start hooks
            out = s.step(batch, batch_idx)  # (in the precision's forward context)
            self.batches_done = batch_idx = batch_idx + 1
            if s.after_batch:
                self._after_batch(ctx, s, out, None, batch, batch_idx - 1)
            self.manual_batches += 1
            if s.log_every and self.manual_batches % s.log_every == 0:
                self._log_point(ctx, s)
            due = batch_idx >= s.between_at or self.global_step >= s.max_steps
            if (due or stop.requested or signals.received is not None) and self._between(
                ctx, s, batch_idx, True
            ):
                break
        return self._ran_out(ctx, s, batch_idx, 0, 1, None)

    def _fetched(self, ctx: FitContext, s: EpochSteps, batch_idx: int) -> Iterator[Any]:
        """The epoch's batches from `batch_idx` up to its end (none fetched beyond), each one's wait
        timed, moved and through the batch-start hooks; `s.ran_out` when the loader runs out first,
        `s.cut` when `on_train_batch_start` returns -1 (that batch is not trained)."""
        n, move, results, fetching = s.n, s.parts.move, ctx.results, True
        if batch_idx >= n:
            return
        clock, t0 = perf_counter, perf_counter()
        try:
            for batch in s.parts.batches:
                fetching = False
                self.data_wait_s += clock() - t0
                if move is not None:
                    batch = move(batch)
                results.batch = batch
                if s.starts and self._batch_start(ctx, s, batch, batch_idx):
                    s.cut = True
                    return
                yield batch
                batch_idx += 1
                if batch_idx >= n:
                    return
                fetching, t0 = True, clock()
        except Exception as err:
            if fetching:  # a sample raised, or a worker died or timed out
                explain_fetch_error(err, self.epoch, batch_idx, s.data.train)
            raise
        s.ran_out = True

    # -- bound once per epoch --------------------------------------------------------------
    def _bind(
        self, ctx: FitContext, batches: Iterator[Any], epoch: EpochData, k: int, keep_grads: bool
    ) -> EpochSteps:
        """What the epoch's step calls, and when each owner is first due."""
        settings, optim, world = ctx.settings, ctx.optim, ctx.parts.strategy.world_size
        first, steady = self._loop_parts(ctx, batches, k, epoch)
        watch = loss_watch(optim.guard, ctx.rollback)
        batch_ends = bool(first.end_callbacks) or first.end_module is not None
        s = EpochSteps(
            parts=first,
            steady=steady,
            step=first.step,
            backward=window_backward(_with_hooks(ctx, first.backward), ctx.optim.reports_divided_loss, k),
            inspect=watch,
            data=epoch,
            n=epoch.plan.train,
            k=k,
            max_steps=settings.max_steps if settings.max_steps >= 0 else math.inf,
            log_every=settings.log_every_n_steps if ctx.parts.publisher.loggers else 0,
            agree_every=settings.log_every_n_steps if world > 1 else 0,
            step_schedulers=optim.schedules("step"),
            plateaus=optim.step_plateaus(),
            starts=bool(first.start_callbacks) or first.start_module is not None,
            batch_ends=batch_ends,
            wants_outputs=first.end_module is not None or reads_outputs(first.end_callbacks),
            after_batch=batch_ends or first.step is not steady.step,
            pace_at=ctx.data.pace_mark(self.batches_done, measured=ctx.profiler is None),
        )
        if self.global_step == 0:  # the fit's first loss is checked
            s.inspect = partial(_first_loss, watch, s)
        s.step_due = self._next_step_due(ctx, s)
        s.between_at = self._next_between(ctx, s, self.batches_done)
        if not keep_grads and optim.free_after_step:  # (else the window's first batch zeroes, as Lightning)
            optim.zero_grad()  # nothing left over from an epoch that ended inside a window
        return s

    def _loop_parts(
        self, ctx: FitContext, batches: Iterator[Any], window: int, epoch: EpochData
    ) -> tuple[LoopParts, LoopParts]:
        """The callables the step uses, looked up once per epoch (timed versions under a profiler):
        the first batch's (the fit's first step goes through the FLOP count) and the others'. The
        strategy decides what runs a batch in windows of `window` (a pipeline: its schedule)."""
        hooks, precision, module = ctx.parts.hooks, ctx.parts.precision, ctx.parts.module
        step = batch_only(ctx.training_step_fn(), module.training_step)
        step = ctx.parts.strategy.micro_batches(step, window, epoch.plan.train, epoch.train)
        parts = LoopParts(
            batches=batches,
            move=ctx.parts.move,
            step=precision.in_forward_context(step),
            backward=partial(precision.backward, run=hooks.module_fns["backward"])
            if hooks.overridden("backward")
            else precision.loss_backward(),
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

    # -- the owners, each at its cadence -----------------------------------------------------
    def _batch_start(self, ctx: FitContext, s: EpochSteps, batch: Any, batch_idx: int) -> bool:
        """The batch-start hooks; True when the module's returned -1 (the epoch ends at this batch)."""
        t, model = ctx.parts.hooks.trainer, ctx.parts.module
        for fn in s.parts.start_callbacks:
            fn(t, model, batch, batch_idx)
        start = s.parts.start_module
        if start is None or start(batch, batch_idx) != -1:
            return False
        if ctx.rollback is not None:
            self.global_step = ctx.rollback.settle(self, batch_idx)  # host read: judged before its end
        self.batches_done = batch_idx + 1
        ctx.optim.step_schedulers_at_cut(batch_idx, self.epoch)
        return True

    def _after_batch(
        self, ctx: FitContext, s: EpochSteps, out: Any, reported: Any, batch: Any, batch_idx: int
    ) -> None:
        """After the fit's first step its FLOP count closes (the loop's own step and backward from
        the next batch on); the batch-end hooks (callbacks, then the module) unless rolled back."""
        if s.step is not s.steady.step:
            backward = _with_hooks(ctx, s.steady.backward)
            s.step, s.backward = s.steady.step, window_backward(backward, ctx.optim.reports_divided_loss, s.k)
            s.after_batch = s.batch_ends
            if ctx.flops is not None:
                ctx.flops.close()  # (if the step ran no backward)
        if s.batch_ends and not s.rolled_back:
            copy = ctx.parts.module.automatic_optimization  # (Lightning copies that loss only)
            detached = detach_outputs(out, reported, copy) if s.wants_outputs else None
            t, model, end = ctx.parts.hooks.trainer, ctx.parts.module, s.parts.end_module
            self.stage = BATCH_END
            try:
                for fn in s.parts.end_callbacks:
                    fn(t, model, detached, batch, batch_idx)
                if end is not None:
                    end(detached, batch, batch_idx)
            except BaseException:
                if s.row_held:  # the batch never ends: its row is not written, nor carried by a
                    s.row_held = False  # checkpoint saved on the way out (as in Lightning)
                    ctx.parts.publisher.drop_row()
                raise
            self.stage = RUNNING
        if s.row_held:  # the log interval's row, with what the end hooks logged (Lightning's order)
            s.row_held = False
            metrics, flags, step = ctx.parts.publisher.take_row()
            s.parts.publish(metrics, flags, step=step)

    def _after_step(self, ctx: FitContext, s: EpochSteps, done: int) -> None:
        """After an optimizer step where one is due: step schedulers, a rollback's check, the epoch's
        schedulers at its last batch, the loggers every `log_every` steps."""
        optim, rollback, g, last = ctx.optim, ctx.rollback, self.global_step, done == s.n
        if s.step_schedulers:
            optim.step_schedulers("step", optim.scheduler_clock(done, g), False)
        if rollback is not None and (g % rollback.every == 0 or last or g >= s.max_steps):
            back = rollback.check(
                self, done, epoch_end=last
            )  # host read: a log point, the epoch's or the fit's end
            if back is not None:  # rolled back: this batch's end hooks are skipped, as its window
                self.global_step, s.rolled_back = back, True
            s.snapshot_due = rollback.guard.snapshot_due
        if last:  # the epoch's last batch: epoch schedulers step before validation
            optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
        g = self.global_step
        if s.log_every and g % s.log_every == 0:
            self._log_point(ctx, s, hold=s.batch_ends)
        if s.rolled_back or s.snapshot_due or (s.agree_every and g % s.agree_every == 0):
            s.between_at = done  # (the ranks agree on a preemption at log intervals)
        s.step_due = self._next_step_due(ctx, s)

    def _log_point(self, ctx: FitContext, s: EpochSteps, hold: bool = False) -> None:
        """A log interval (either loop): what the non-finite guard counted since the last one, then
        the step's values to the loggers (host reads: where values are read anyway). `hold`: the
        batch's end hooks run first, and their values join its row (`_after_batch` writes it)."""
        ctx.optim.guard.report(self.global_step)
        metrics, flags, step = ctx.results.read_step(), ctx.results.flags(), self.logger_step()
        s.parts.publish(metrics, flags, step=step, to_loggers=not hold)
        if hold:
            s.row_held = True
            ctx.parts.publisher.hold_row(ctx.results, metrics, flags, step)

    def _next_step_due(self, ctx: FitContext, s: EpochSteps) -> float:
        """The next global step at which `_after_step` has something to do."""
        g, rollback = self.global_step, ctx.rollback
        if s.step_schedulers or not ctx.parts.module.automatic_optimization:
            return g + 1
        due: list[float] = [_next_multiple(g, every) for every in (s.log_every, s.agree_every) if every]
        if rollback is not None:
            due += [_next_multiple(g, rollback.every), s.max_steps]
        return min(due, default=math.inf)

    def _between(self, ctx: FitContext, s: EpochSteps, done: int, window_end: bool) -> bool:
        """Between two batches where an owner is due: preemption, the data-wait pace, validation,
        plateau schedulers, a rollback's snapshot, a stop. True when the fit stops here."""
        optim, rollback, validation, single = ctx.optim, ctx.rollback, ctx.validation, not s.agree_every
        if window_end and (ctx.signals.received is not None or not single) and signalled(self, single):
            preempt(self)  # (ranks agree at log intervals: a collective and a host read there)
        if done == s.pace_at:
            s.pace_at = ctx.data.pace(done, self.data_wait_s)
        val_every = s.data.plan.val_every_n_batches
        if val_every and done % val_every == 0 and validation.due_inside(self.epoch, done, s.data.plan):
            validation.run_in_fit(self.epoch, window_end=window_end)  # host read at its end
            ctx.parts.module._attach(results=ctx.results)
        if window_end and s.plateaus:  # a step-interval ReduceLROnPlateau: after validation
            optim.step_schedulers("step", optim.scheduler_clock(done, self.global_step), plateau=True)
        if s.snapshot_due or s.rolled_back:  # after a check: the state between this batch and the next
            assert rollback is not None
            rollback.take_due(self)
            s.snapshot_due = s.rolled_back = False
        if self.global_step >= s.max_steps or (ctx.stop.requested and self._minimums_met(ctx.settings)):
            if rollback is not None:  # host read: the fit stops on a judged state
                self.global_step = rollback.settle(self, done)
            return True
        s.between_at = self._next_between(ctx, s, done)
        return False

    def _next_between(self, ctx: FitContext, s: EpochSteps, done: int) -> float:
        """The next batch count at which `_between` has something to do."""
        due: list[float] = [s.pace_at] if s.pace_at > done else []
        if s.data.plan.val_every_n_batches:
            due.append(_next_multiple(done, s.data.plan.val_every_n_batches))
        if s.plateaus:
            due.append(min(_next_multiple(done, s.k), s.n))  # the next window's end
        if s.agree_every and not ctx.parts.module.automatic_optimization:
            due.append(done + 1)  # (steps counted by the module: agreed at each batch)
        return min(due, default=math.inf)

    def _ran_out(
        self, ctx: FitContext, s: EpochSteps, batch_idx: int, pending: int, window: float, reported: Any
    ) -> tuple[bool, bool]:
        """After the batches: whether the loader ran out (and what that leaves to do), whether cut."""
        optim = ctx.optim
        if s.cut:
            return False, True
        if not s.ran_out and batch_idx == s.n == loader_length(s.data.train):
            # Let the sampler finish its epoch as a plain `for` loop would: RandomSampler with a
            # user generator draws once more at exhaustion, and later epochs depend on that draw.
            s.ran_out = next(s.parts.batches, _END) is _END
        if not s.ran_out:
            return False, False
        if pending:
            # The loader ran out inside a window (no length to plan by): step the mean over the
            # micro-batches seen (having run under no_sync, averaged over ranks here).
            ctx.parts.strategy.average_gradients(ctx.parts.module)
            optim.step(grad_scale=window / pending, loss=reported)
            self.global_step += 1
            optim.step_schedulers("step", optim.scheduler_clock(batch_idx, self.global_step))
        if ctx.rollback is not None:  # (known lengths were judged at their last batch)
            self.global_step = ctx.rollback.settle(self, batch_idx)  # host read: the epoch's end
        if s.n == math.inf:  # no length: the last batch is known only now
            optim.step_schedulers("epoch", self.epoch + 1, plateau=False)
        return True, False


def _first_loss(watch: Callable[[Tensor], None] | None, s: EpochSteps, loss: Tensor) -> None:
    """The fit's first loss is checked (a scalar that requires grad); the later ones only watched."""
    check_loss(loss)
    s.inspect = watch
    if watch is not None:
        watch(loss)


def _with_hooks(ctx: FitContext, backward: Callable[[Any], None]) -> Callable[[Any], None]:
    """`backward` with `on_before_backward`/`on_after_backward` around it where one is overridden."""
    hooks = ctx.parts.hooks
    before, after = hooks.any("on_before_backward"), hooks.any("on_after_backward")
    if not (before or after):
        return backward

    def hooked(scaled: Any) -> None:
        if before:
            hooks.call("on_before_backward", scaled)
        backward(scaled)
        if after:
            hooks.call("on_after_backward")

    return hooked


def _next_multiple(done: int, every: int) -> int:
    return (done // every + 1) * every


_END = object()
_NO_CONTEXT = contextlib.nullcontext()
