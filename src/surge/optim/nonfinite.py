"""`on_nonfinite`: what happens when a loss or a gradient holds inf or NaN.

- "warn" (default): every loss is kept (detached) and checked on the device where values are read
  anyway (the loggers' log intervals, epoch ends), all at once: no kernel and no sync per step; a
  warning names the steps between which it was seen.
- "skip": the optimizer step of a window whose loss or gradients are non-finite is skipped,
  counted and reported.
- "raise": training stops with the step, epoch and batch index, before the step is applied.
- "rollback": the state of the last good check is restored (`surge.callbacks.SpikeGuard`, which
  the Trainer adds with `threshold=math.inf` when none is given); this guard keeps the per-step
  check of "warn" (what is rolled back is not warned about).
- None: no checks.

For "skip" and "raise" the decision must be known before the step. A fused optimizer
(`torch.optim.AdamW(..., fused=True)` and the like) takes the flag on the device (set on it for
its step only, as torch's GradScaler hands it, then removed) and skips by itself, so nothing is read per step (a "raise" is then raised at the next read point, with the
bad step never applied). Other optimizers need one host read per optimizer step.
fp16 with a GradScaler already skips non-finite steps; the guard leaves those to it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..errors import SurgeRuntimeError
from ..rank_zero import SurgeWarning, global_rank, info, warn

MODES = ("raise", "skip", "warn")


class NonFiniteError(SurgeRuntimeError):
    """A loss or gradient was inf/NaN under `on_nonfinite="raise"`."""


_FOLD_EVERY = 256  # watched losses kept before they are counted on the device (memory stays bounded)


@contextlib.contextmanager
def handed_flag(opt: Optimizer, found: Tensor) -> Iterator[None]:
    """`found` handed to a fused optimizer's step the one way torch's fused optimizers read it (as
    torch's GradScaler does): `grad_scale`/`found_inf` set on the optimizer for that step only, and
    removed after it, so the optimizer is left as the user built it."""
    opt.grad_scale, opt.found_inf = None, found  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del opt.grad_scale, opt.found_inf  # type: ignore[attr-defined]


class NonFiniteGuard:
    """Watches losses and gradients for one fit; the decisions above live here and nowhere else."""

    def __init__(self, mode: str | None, optimizers: list[Optimizer], scaler_skips: bool) -> None:
        # "rollback": the loss is still checked per step, as under "warn" (SpikeGuard rolls back)
        self.mode = None if scaler_skips else "warn" if mode == "rollback" else mode
        self.optimizers = optimizers
        self.device_skip = self.mode in ("raise", "skip") and all(
            getattr(opt, "_step_supports_amp_scaling", False) for opt in optimizers
        )
        self.skipped = 0  # steps skipped with a host decision
        self._loss_bad: Tensor | None = None  # non-finite losses since the last read (a device count)
        self._pending: list[Tensor] = []  # losses watched since the last fold (detached; no kernel ran)
        self._steps_bad: Tensor | None = None  # steps the fused optimizers skipped (device)
        self._one: dict[torch.device, Tensor] = {}
        self._since = 0
        if self.mode in ("raise", "skip") and not self.device_skip:
            info(
                f'on_nonfinite="{self.mode}" reads one flag per optimizer step to decide before stepping; a fused '
                "optimizer (e.g. AdamW(..., fused=True)) decides on the device with no read."
            )

    @property
    def active(self) -> bool:
        return self.mode is not None

    def watch(self, loss: Tensor) -> None:
        """Keep a micro-batch's loss, detached, for the next read point (a log interval, the epoch's
        end): no kernel runs per step. The kept losses' inf/NaN are counted on the device there (or every
        `_FOLD_EVERY` losses).
        A loss that views a bigger tensor (`per_sample[0]`) is copied: kept as it is, it would keep
        that whole tensor alive until the read point."""
        pending = self._pending
        pending.append(loss.detach() if loss._base is None else loss.detach().clone())
        if len(pending) == _FOLD_EVERY:
            self._fold()

    def _fold(self) -> Tensor | None:
        """The count of non-finite losses, with the kept ones counted (one stack, one add for all)."""
        pending = self._pending
        if pending:
            if self._loss_bad is None:
                self._loss_bad = torch.zeros((), device=pending[0].device)
            self._pending = []
            try:
                kept = torch.stack(pending)
            except RuntimeError:  # one-element losses of different shapes, e.g. (1,) after ()
                kept = torch.stack([p.reshape(()) for p in pending])
            self._loss_bad.add_(kept.isfinite().logical_not().sum())
        return self._loss_bad

    def _loss_flag(self, total: Tensor) -> Tensor:
        """True (a scalar) if a loss counted into `total` since the last read was inf/NaN."""
        return total.gt(0)

    def forget(self) -> None:
        """The losses watched since the last read were rolled back (`SpikeGuard`): not reported."""
        self._pending = []
        if self._loss_bad is not None:
            self._loss_bad.zero_()

    def allow(self, opt: Optimizer, where: Callable[[], tuple[int, int, int]]) -> bool | Tensor:
        """Whether `opt` may step now ("skip"/"raise"); with a fused optimizer, the device flag to
        hand its step (`handed_flag`): it always 'runs' and skips by itself."""
        if self.mode not in ("raise", "skip"):
            return True
        found = self._found(opt)
        if self.device_skip:
            self._steps_bad = (
                found.to(torch.int32)
                if self._steps_bad is None
                else self._steps_bad.add_(found.to(torch.int32))
            )
            return found
        if not found.item():  # host read: the step must not be applied when this is set
            return True
        step, epoch, batch = where()
        if self.mode == "raise":
            raise NonFiniteError(
                f"non-finite loss or gradients at step {step} (epoch {epoch}, batch {batch}); the optimizer step "
                'was not applied. Lower the learning rate, clip gradients, check the data, or use on_nonfinite="skip".'
            )
        self.skipped += 1
        return False

    def _found(self, opt: Optimizer) -> Tensor:
        """1.0 on the device if any gradient of `opt` (or a loss in this window) is inf/NaN."""
        grads: dict[tuple[torch.device, torch.dtype], list[Tensor]] = defaultdict(list)
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g = p.grad
                    g = g._local_tensor if hasattr(g, "_local_tensor") else g  # a DTensor shard
                    grads[(g.device, g.dtype)].append(g)
        device = next(iter(grads))[0] if grads else torch.device("cpu")
        found = torch.zeros((), device=device)
        one = self._one.get(device)
        if one is None:
            one = self._one[device] = torch.ones((), device=device)
        for (dev, _), tensors in grads.items():
            flag = found if dev == device else torch.zeros((), device=dev)
            # The amp kernel: one pass over the gradients, sets the flag on any inf/NaN (scale 1).
            torch._amp_foreach_non_finite_check_and_unscale_(tensors, flag, one.to(dev))
            if flag is not found:
                found.add_(flag.to(device))
        total = self._fold()
        if total is not None:
            found.add_(self._loss_flag(total).to(device)).clamp_(max=1)
            total.zero_()
        return found

    def report(self, step: int) -> None:
        """At a read point: say what the device counted since the last one (one small transfer)."""
        if self.mode is None:
            return
        flags = []
        total = self._fold()
        if total is not None:
            flags.append(self._loss_flag(total).float())
        if self._steps_bad is not None:
            flags.append(self._steps_bad.float().to(flags[0].device if flags else self._steps_bad.device))
        if not flags:
            return
        values = torch.stack(flags).tolist()  # host read: a read point (log interval or epoch end)
        loss_bad = values[0] if self._loss_bad is not None else 0
        steps_bad = int(values[-1]) if self._steps_bad is not None else 0
        since, self._since = self._since, step
        if steps_bad and self._steps_bad is not None:
            self._steps_bad.zero_()
            self.skipped += steps_bad
            if self.mode == "raise":
                raise NonFiniteError(
                    f"non-finite loss or gradients in {steps_bad} optimizer step(s) between step {since} and {step}; "
                    "the fused optimizer did not apply them."
                )
            warn(
                f"skipped {steps_bad} optimizer step(s) with non-finite loss or gradients (steps {since}-{step})"
            )
        if self._loss_bad is not None:
            self._loss_bad.zero_()
        if loss_bad and self.mode == "warn":
            _warn_seen(
                f"between step {since} and {step}; the weights may be ruined. "
                'on_nonfinite="skip" skips such steps, "raise" stops at the first.'
            )


def _warn_seen(where: str) -> None:
    """A non-finite loss seen by this process: said on every rank that saw one (its rank named), as
    the other ranks' losses may all be finite (the allreduced gradients carry it to their weights)."""
    rank = global_rank()
    if rank == 0:
        warn(f"a non-finite loss was seen {where}")
    else:
        warnings.warn(f"a non-finite loss was seen on rank {rank} {where}", SurgeWarning, stacklevel=3)
