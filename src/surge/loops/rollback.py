"""The fit loop's side of `SpikeGuard`: judgments, snapshots of judged states, rollbacks.

The loop hands each loss to `watch` (no device op). A judgment reads one flag (under several
processes agreed by one small collective): the losses since the last judgment against the guard's
statistics, and whether the parameters are finite after the last update (a finite loss with a
non-finite gradient ruins the weights too). The loop asks for one (`check`) every `every`
optimizer steps, where it reads its logged values anyway, and after an epoch's last step, before
its schedulers, validation and end hooks; before the fit stops anywhere else (max_steps, a stop
request, an epoch cut short, a preemption's checkpoint, a loader without a length running out) it
asks `settle`, which reads nothing when nothing is left to judge.

A snapshot is taken only of a judged state: at a check every `snapshot_every` steps and at each
epoch's start (after its start hooks and its loader's iterator). So no rollback crosses an epoch's
end: what happens there (epoch schedulers, ReduceLROnPlateau, validation, SWA, checkpoints) happens
once, on judged weights, as in the run that never saw the skipped batches. What a snapshot holds
and how it is put back: `surge.loops.snapshot`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..callbacks.spike_guard import NONFINITE, NONFINITE_WEIGHTS, SpikeError, SpikeGuard
from ..errors import MisconfigurationError
from ..optim.rates import scale_rates
from ..rank_zero import info
from .optimizer_restore import restore_optimizer
from .snapshot import Snapshots

if TYPE_CHECKING:
    from ..optim import Optimization
    from ..optim.nonfinite import NonFiniteGuard
    from .context import FitSettings, RunParts
    from .train_batches import TrainBatches

__all__ = ["Rollback", "loss_watch", "restore_optimizer"]


class Rollback:
    """One fit's judgments and rollbacks for `guard` (built by `Rollback.of`)."""

    def __init__(
        self, guard: SpikeGuard, parts: RunParts, optim: Optimization, every: int, callbacks: Sequence[Any]
    ) -> None:
        self.guard, self.parts, self.optim, self.every = guard, parts, optim, every
        self.snapshot_every = guard.snapshot_every or every
        self.watch = guard.watch
        self.snapshots = Snapshots(parts, optim, [cb for cb in callbacks if cb is not guard])
        self.params = [p for p in parts.module.parameters() if p.numel()]
        self.judged_at = -1  # the step of the last judgment (-1: not known, e.g. resumed with losses pending)

    @classmethod
    def of(
        cls, callbacks: Sequence[Any], parts: RunParts, optim: Optimization, settings: FitSettings
    ) -> Rollback | None:
        """The fit's rollbacks when a `SpikeGuard` is among `callbacks` (None otherwise)."""
        guards = [cb for cb in callbacks if isinstance(cb, SpikeGuard)]
        if not guards:
            return None
        if len(guards) > 1:
            raise MisconfigurationError(
                f"Trainer(callbacks=...) has {len(guards)} SpikeGuard callbacks; give one."
            )
        if not parts.module.automatic_optimization:
            raise MisconfigurationError(
                "SpikeGuard (or on_nonfinite='rollback') needs automatic optimization: under manual "
                "optimization the loop does not see the loss. Set automatic_optimization = True or drop it."
            )
        every = guards[0].check_interval(max(1, settings.log_every_n_steps))
        return cls(guards[0], parts, optim, every, callbacks)

    def start(self, loop: TrainBatches) -> None:
        """When training starts: a snapshot a checkpoint brought is checked against this run before
        anything uses it; resumed inside an epoch without one, the state as it stands is the first
        good one (at an epoch's start `epoch_start` takes it)."""
        snap = self.guard.snapshot
        if snap is not None:
            self.snapshots.check_loaded(snap)
        if self.guard.snapshot_due or (snap is None and loop.batches_done):
            self._take(loop.global_step, loop.epoch, loop.batches_done)
        if not self.guard.pending:
            self.judged_at = loop.global_step

    def epoch_start(self, loop: TrainBatches) -> None:
        """At an epoch's start, after its start hooks and its loader's iterator: the state was judged
        at the last epoch's end (or is the fit's first), so it is the snapshot a rollback in this
        epoch goes back to; a rollback never undoes an epoch's end."""
        if not self.guard.pending or self.guard.snapshot is None:
            self._take(loop.global_step, loop.epoch, 0)

    def check(self, loop: TrainBatches, batches_done: int, epoch_end: bool = False) -> int | None:
        """Judge what happened since the last judgment (after the optimizer step of `batches_done`;
        a host read and, under several processes, one small collective). On a spike, an inf/NaN
        loss or non-finite weights roll back and return the snapshot's step; else None, with a
        snapshot due every `snapshot_every` steps (not at an epoch's end: `epoch_start` takes it),
        taken when the batch is over (`take_due`: after its end hooks, validation and schedulers,
        the state the next batch starts from)."""
        step, epoch = loop.global_step, loop.epoch
        since = self.judged_at if self.judged_at >= 0 else max(0, step - self.every)
        found = self.guard.judge(self._params_bad())  # host read: a log point, an epoch's end or a stop
        strategy = self.parts.strategy
        bad = strategy.reduce_bool(found != 0.0) if strategy.world_size > 1 else found != 0.0
        if not bad:
            self.guard.snapshot_due = self.guard.snapshot_due or (
                not epoch_end and step % self.snapshot_every == 0
            )
            self.judged_at = step
            return None
        self.judged_at = self._roll_back(found, since, step, epoch, batches_done)
        return self.judged_at

    def take_due(self, loop: TrainBatches) -> None:
        """Between two batches, after a check: the snapshot it found due (the judged state)."""
        if self.guard.snapshot_due:
            self._take(loop.global_step, loop.epoch, loop.batches_done)

    def settle(self, loop: TrainBatches, batches_done: int) -> int:
        """Before the fit stops or an epoch ends anywhere but at a check: judge what is left (nothing
        read when nothing is) and roll back on a spike. Returns the step training stands at."""
        self.take_due(loop)
        if not self.guard.pending and self.judged_at == loop.global_step:
            return loop.global_step
        back = self.check(loop, batches_done, epoch_end=True)
        self.guard.snapshot_due = False  # (the fit stops here)
        return loop.global_step if back is None else back

    def _params_bad(self) -> Tensor | None:
        """On the device, no read: set when a parameter holds inf/NaN (one fused max-abs pass)."""
        if not self.params:
            return None
        local = [p.detach() for p in self.params]
        local = [t.to_local() if hasattr(t, "to_local") else t for t in local]  # DTensor: this rank's shard
        norms = torch._foreach_norm(local, math.inf)
        device = norms[0].device
        return torch.stack([n.to(device) for n in norms]).isfinite().all().logical_not()

    def _take(self, step: int, epoch: int, batches_done: int) -> None:
        self.guard.snapshot_due = False
        self.guard.keep(self.snapshots.take(self.guard.stats, step, epoch, batches_done))

    def _roll_back(self, found: float, since: int, step: int, epoch: int, batches_done: int) -> int:
        guard, snap = self.guard, self.guard.snapshot
        assert snap is not None, "start() or epoch_start() took the first snapshot"
        what = (
            "a non-finite loss"
            if found >= NONFINITE
            else "non-finite weights after a step (a non-finite gradient)"
            if found >= NONFINITE_WEIGHTS
            else ("a loss spike" if found else "another rank's spike")
        )
        self.snapshots.restore(snap)
        self.optim.guard.forget()  # the non-finite losses rolled back are not warned about
        if guard.rollbacks >= guard.max_rollbacks:  # the fit ends on the last good state, not the failing one
            raise SpikeError(
                f"SpikeGuard: {what} between step {since} and {step} (epoch {epoch}, batch "
                f"{batches_done}) after {guard.rollbacks} rollback(s), max_rollbacks={guard.max_rollbacks}. The "
                f"model and optimizers are back to the last good state, of step {snap['global_step']}. Lower the learning "
                "rate, clip gradients, check the data there, or raise max_rollbacks/threshold."
            )
        if guard.lr_scale != 1.0:
            scale_rates(self.optim.optimizers, [c.scheduler for c in self.optim.schedulers], guard.lr_scale)
        guard.rolled_back(snap["stats"].clone() if snap["stats"] is not None else None)
        back = snap["global_step"]
        info(
            f"SpikeGuard: {what} between step {since} and {step}; restored the state of step {back} "
            f"and skipped the batches from epoch {snap['epoch']} batch {snap['batches_done']} to epoch {epoch} "
            f"batch {batches_done}"
            + (f", learning rates x{guard.lr_scale:g}" if guard.lr_scale != 1.0 else "")
            + f" (rollback {guard.rollbacks} of at most {guard.max_rollbacks})"
        )
        self.parts.publisher.publish({"rollbacks": float(guard.rollbacks)}, {}, step=back)
        guard.snapshot_due = (
            True  # the restored (rescaled) state, once the batch is over: the next rollback's
        )
        return back


def loss_watch(guard: NonFiniteGuard, rollback: Rollback | None) -> Callable[[Tensor], None] | None:
    """What the loop hands each loss to: the non-finite guard, the spike guard, both or neither."""
    first = guard.watch if guard.active else None
    second = rollback.watch if rollback is not None else None
    if first is None or second is None:
        return first or second

    def both(loss: Tensor) -> None:
        first(loss)
        second(loss)

    return both
