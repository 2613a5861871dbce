"""The fit loop's side of `SpikeGuard`: checks at the log points, in-memory snapshots, rollbacks.

The loop hands each loss to `watch` (no device op), calls `check` every `every` optimizer steps
(where it reads its logged values anyway) and starts with `start`. A snapshot is the state a
checkpoint resumes from, less what the loop keeps going (the loader's position, the epoch, the
logged metrics): the module's state, the optimizers' and schedulers' (`Optimization.state_dict`),
the precision's (a GradScaler's scale), the RNG, the step and the guard's statistics. Tensors are
cloned where they live (no host copy, no sync on an accelerator).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..callbacks.spike_guard import NONFINITE, SpikeError, SpikeGuard
from ..errors import MisconfigurationError
from ..rank_zero import info
from ..seed import rng_state, set_rng_state

if TYPE_CHECKING:
    from ..optim import Optimization
    from ..optim.nonfinite import NonFiniteGuard
    from .context import FitSettings, RunParts
    from .fit import FitLoop


class Rollback:
    """One fit's rollbacks for `guard` (built by `Rollback.of`)."""

    def __init__(self, guard: SpikeGuard, parts: RunParts, optim: Optimization, every: int) -> None:
        self.guard, self.parts, self.optim, self.every = guard, parts, optim, every
        self.snapshot_every = guard.snapshot_every or every
        self.watch = guard.watch

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
        return cls(guards[0], parts, optim, guards[0].check_interval(max(1, settings.log_every_n_steps)))

    def start(self, loop: FitLoop) -> None:
        """When training starts: the state as it stands is the first good one (unless a checkpoint
        brought the snapshot it had)."""
        if self.guard.snapshot is None:
            self._take(loop.global_step, loop.epoch, loop.batches_done)

    def check(self, loop: FitLoop, batches_done: int) -> int:
        """At a check point (`step % every == 0`, after the optimizer step of `batches_done`): judge
        the losses since the last one (a host read and, under several processes, one small
        collective); on a spike roll back. Returns the step training stands at afterwards (the
        snapshot's after a rollback)."""
        step, epoch = loop.global_step, loop.epoch
        found = self.guard.judge()  # host read: a log point
        strategy = self.parts.strategy
        bad = strategy.reduce_bool(found != 0.0) if strategy.world_size > 1 else found != 0.0
        if not bad:
            if step % self.snapshot_every == 0:
                self._take(step, epoch, batches_done)
            return step
        return self._roll_back(found, step, epoch, batches_done)

    def _take(self, step: int, epoch: int, batches_done: int) -> None:
        stats = self.guard.stats
        self.guard.keep({
            "model": {k: v.detach().clone() for k, v in self.parts.module.state_dict().items()},
            "optim": copy.deepcopy(self.optim.state_dict()),
            "precision": copy.deepcopy(self.parts.precision.state_dict()),
            "rng": rng_state(),
            "stats": stats.clone() if stats is not None else None,
            "global_step": step,
            "epoch": epoch,
            "batches_done": batches_done,
        })  # fmt: skip

    def _restore(self, snap: dict[str, Any]) -> None:
        """Model, optimizers, schedulers, precision and RNG as `snap` holds them."""
        with torch.no_grad():
            self.parts.module.load_state_dict(snap["model"])
        for opt, saved in zip(self.optim.optimizers, snap["optim"]["optimizer_states"]):
            restore_optimizer(opt, saved)
        for config, saved in zip(self.optim.schedulers, snap["optim"]["lr_schedulers"]):
            config.scheduler.load_state_dict(copy.deepcopy(saved))
        self.parts.precision.load_state_dict(copy.deepcopy(snap["precision"]))
        set_rng_state(snap["rng"])
        self.optim.guard.forget()  # the non-finite losses rolled back are not warned about

    def _roll_back(self, found: float, step: int, epoch: int, batches_done: int) -> int:
        guard, snap = self.guard, self.guard.snapshot
        assert snap is not None, "start() took the first snapshot"
        what = (
            "a non-finite loss"
            if found >= NONFINITE
            else ("a loss spike" if found else "another rank's spike")
        )
        self._restore(snap)
        if guard.rollbacks >= guard.max_rollbacks:  # the fit ends on the last good state, not the failing one
            raise SpikeError(
                f"SpikeGuard: {what} between step {step - self.every} and {step} (epoch {epoch}, batch "
                f"{batches_done}) after {guard.rollbacks} rollback(s), max_rollbacks={guard.max_rollbacks}. The "
                f"model and optimizers are back to the last good state, of step {snap['global_step']}. Lower the learning "
                "rate, clip gradients, check the data there, or raise max_rollbacks/threshold."
            )
        if guard.lr_scale != 1.0:
            scale_learning_rates(self.optim, guard.lr_scale)
        guard.rolled_back(snap["stats"].clone() if snap["stats"] is not None else None)
        back = snap["global_step"]
        info(
            f"SpikeGuard: {what} between step {step - self.every} and {step}; restored the state of step {back} "
            f"and skipped the batches from epoch {snap['epoch']} batch {snap['batches_done']} to epoch {epoch} "
            f"batch {batches_done}"
            + (f", learning rates x{guard.lr_scale:g}" if guard.lr_scale != 1.0 else "")
            + f" (rollback {guard.rollbacks} of at most {guard.max_rollbacks})"
        )
        self.parts.publisher.publish({"rollbacks": float(guard.rollbacks)}, {}, step=back)
        self._take(back, epoch, batches_done)  # the restored (rescaled) state: the next rollback's
        return back


def restore_optimizer(opt: Optimizer, saved: dict[str, Any]) -> None:
    """`opt` back to `saved` (its `state_dict()` then, copied): in place where the state has the
    same entries, so its tensors stay the ones a compiled step or a CUDA graph holds; else through
    `load_state_dict` (e.g. state created after the snapshot)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    states = saved["state"]
    same = len(states) == len(opt.state) and all(
        i < len(params) and params[i] in opt.state and _same_entries(opt.state[params[i]], s)
        for i, s in states.items()
    )
    if not same:
        opt.load_state_dict(copy.deepcopy(saved))
        return
    with torch.no_grad():
        for i, entries in states.items():
            current = opt.state[params[i]]
            for key, value in entries.items():
                if isinstance(value, Tensor):
                    current[key].copy_(value)
                else:
                    current[key] = copy.deepcopy(value)
        for group, saved_group in zip(opt.param_groups, saved["param_groups"]):
            for key, value in saved_group.items():
                if key == "params":
                    continue
                if isinstance(group.get(key), Tensor) and isinstance(value, Tensor):
                    group[key].copy_(value)
                else:
                    group[key] = copy.deepcopy(value)


def _same_entries(current: Mapping[str, Any], saved: Mapping[str, Any]) -> bool:
    if current.keys() != saved.keys():
        return False
    for key, value in saved.items():
        now = current[key]
        if isinstance(value, Tensor) != isinstance(now, Tensor):
            return False
        if isinstance(value, Tensor) and (value.shape != now.shape or value.dtype != now.dtype):
            return False
    return True


def scale_learning_rates(optim: Optimization, scale: float) -> None:
    """Every parameter group's rate (and its schedulers' base rates, so that a schedule keeps the
    scale) multiplied by `scale`."""
    for opt in optim.optimizers:
        for group in opt.param_groups:
            for key in ("lr", "initial_lr"):
                if key in group:
                    value = group[key]
                    if isinstance(value, Tensor):
                        value.mul_(scale)
                    else:
                        group[key] = value * scale
    for config in optim.schedulers:
        state = config.scheduler.state_dict()  # through its own load_state_dict, as a checkpoint would
        if isinstance(state.get("base_lrs"), list):
            config.scheduler.load_state_dict({**state, "base_lrs": [b * scale for b in state["base_lrs"]]})


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
