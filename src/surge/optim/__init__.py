"""Stepping what `configure_optimizers()` returned: the optimizers and schedulers of a run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch.optim import Optimizer

from ..checkpoint.optimizer_settings import settings_differ
from ..config.semantics import SURGE, Semantics
from ..errors import CheckpointError, MisconfigurationError
from ..module.steps import ModuleOptimizerStep
from ..precision.base import Precision
from ..utilities.clip import norm_clipper
from .config import SchedulerConfig, check_optimizer_count, configured_optimizers, parse_optimizers
from .nonfinite import NonFiniteGuard, handed_flag
from .tensor_lr import refuse_foreach_with_tensor_lr

__all__ = [
    "Optimization",
    "SchedulerConfig",
    "check_optimizer_count",
    "configured_optimizers",
    "parse_optimizers",
]


class Optimization:
    """Steps the optimizers and schedulers of a run: unscale, clip, step, zero_grad, schedule.

    Built once per fit; `step()` is called at the end of every accumulation window.
    """

    def __init__(
        self,
        optimizers: list[Optimizer],
        schedulers: list[SchedulerConfig],
        precision: Any,
        hooks: Any,
        clip_val: float | None,
        clip_algorithm: str | None,
        metrics: Callable[[], Mapping[str, Any]],
        guard: NonFiniteGuard | None = None,
        where: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0),
        compiled: Sequence[Callable[[], Any]] | None = None,
        semantics: Semantics = SURGE,
    ) -> None:
        self.optimizers = optimizers
        self.schedulers = schedulers
        self._precision = precision
        # (the base's does nothing: not called per step; the fp16 scaler's updates there)
        after = getattr(precision, "after_optimizer_steps", None)
        self._after_steps = (
            None if getattr(after, "__func__", None) is Precision.after_optimizer_steps else after
        )
        self._hooks = hooks
        self._before_step = hooks.any("on_before_optimizer_step")
        self._before_zero = hooks.any("on_before_zero_grad")
        self._metrics = metrics
        self._clip_val = clip_val
        module_clip = getattr(hooks, "module_fns", {}).get("configure_gradient_clipping")
        if module_clip is not None:  # the module clips (Lightning passes None for what is not set)
            algorithm = clip_algorithm if clip_val is not None else None
            self._clips: list[Callable[[], Any] | None] = [
                partial(module_clip, opt, gradient_clip_val=clip_val, gradient_clip_algorithm=algorithm)
                for opt in optimizers
            ]
        else:
            self._clips = [self._clip_fn(opt, clip_val, clip_algorithm) for opt in optimizers]
        self._manual = False  # set by `manual()`: the module steps optimizers and schedulers
        self.refresh_schedulers()
        self.skipped = False
        self.guard = guard if guard is not None else NonFiniteGuard(None, optimizers, False)
        self._where = where
        # compile="step": each optimizer's compiled step (the precision calls it instead of opt.step)
        self.compiled_steps: dict[int, Callable[[], Any]] = (
            {id(opt): step for opt, step in zip(optimizers, compiled)} if compiled is not None else {}
        )
        self._tensor_lr = compiled is not None and bool(schedulers)  # lrs lent as tensors: refuse what can't
        self._allow = self.guard.allow if self.guard.mode in ("raise", "skip") else None
        fns = getattr(hooks, "module_fns", {})  # the module's own optimizer_step & co., if overridden
        self._module_zero = fns.get("optimizer_zero_grad")
        # Nobody watches the zeroing: free the gradients at the step (less memory in the next forward);
        # the Lightning mode keeps them to the next window's first micro-batch, where Lightning frees
        # them (hooks in between see them; a backward a training step ran itself is dropped with them).
        at_step = semantics.frees_gradients == "at_step"
        self.free_after_step = not self._before_zero and self._module_zero is None and at_step
        self.semantics = semantics  # (the schedulers' clock and the loss on_train_batch_end gets: below)
        self._module_schedule = fns.get("lr_scheduler_step")
        self._module_step: ModuleOptimizerStep | None = None
        if "optimizer_step" in fns:
            before = self._before_optimizer_step if self._before_step else None
            self._module_step = ModuleOptimizerStep(fns["optimizer_step"], optimizers, self._step_one, before)

    @property
    def schedules_by_batch(self) -> bool:
        """A step-interval scheduler's `frequency` counts optimizer steps; in the Lightning mode, as
        Lightning, the batch's index in its epoch plus one (with accumulation it divides more often)."""
        return self.semantics.scheduler_clock == "batch_index"

    @property
    def scheduler_clock(self) -> Callable[[int, int], int]:
        """The count a step-interval scheduler's `frequency` divides, of (batches, optimizer steps)."""
        return _batches_counted if self.schedules_by_batch else _steps_counted

    @property
    def reports_divided_loss(self) -> bool:
        """Whether `on_train_batch_end` gets the loss divided by its window (the Lightning mode's)."""
        return self.semantics.batch_end_loss == "divided"

    def refresh_schedulers(self) -> None:
        """Sort `schedulers` by interval again (the fit loop calls it at each epoch's start, as a
        callback may have replaced one through `trainer.lr_scheduler_configs`). A module that steps
        its own optimizers steps its schedulers too: surge then steps none."""
        stepped = [] if self._manual else self.schedulers
        self._by_interval = {
            "step": [s for s in stepped if s.interval == "step"],
            "epoch": [s for s in stepped if s.interval == "epoch"],
        }

    def _clip_fn(
        self, opt: Optimizer, value: float | None, algorithm: str | None
    ) -> Callable[[], None] | None:
        if value is None:
            return None
        precision = self._precision
        clip_: Callable[..., Any] = torch.nn.utils.clip_grad_value_
        params: list[torch.Tensor] = []
        groups = -1

        def clip() -> None:
            nonlocal params, groups, clip_
            if len(opt.param_groups) != groups:  # a callback added a group (BaseFinetuning's unfreeze)
                params, groups = [p for g in opt.param_groups for p in g["params"]], len(opt.param_groups)
                clip_ = torch.nn.utils.clip_grad_value_ if algorithm == "value" else norm_clipper(params)
            precision.unscale_gradients(opt)
            clip_(params, value)

        return clip

    def step(self, grad_scale: float | None = None, loss: Any = None) -> None:
        """One optimizer step for every optimizer, each straight through the precision (or the
        module's own `optimizer_step` where it overrides it; its closure returns `loss`, the window's
        last loss, detached). The gradients are freed right after it, unless a zero_grad hook is
        overridden or in the Lightning mode: then they stay until the next window's first
        micro-batch (`zero_grad_window`), Lightning's point, where the hooks see them."""
        stepped, module_step, precision = True, self._module_step, self._precision
        direct = module_step is None and self._allow is None and not self._before_step
        for i, opt in enumerate(self.optimizers):
            if grad_scale is not None:
                grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
                if grads:
                    torch._foreach_mul_(grads, grad_scale)
            if direct:  # loop -> optimization -> precision: nothing in between
                compiled = self.compiled_steps.get(id(opt)) if self.compiled_steps else None
                if compiled is None:
                    stepped &= bool(precision.optimizer_step(opt, self._clips[i]))
                else:
                    stepped &= bool(precision.optimizer_step(opt, self._clips[i], step=compiled))
            elif module_step is not None:
                _, epoch, batch_idx = self._where()
                stepped &= module_step(i, epoch, batch_idx, loss)
            else:
                if self._before_step:
                    self._before_optimizer_step(opt)
                stepped &= self._step_one(i)
            if self.free_after_step:
                opt.zero_grad(set_to_none=True)
        if self._after_steps is not None:
            self._after_steps()
        self.skipped = not stepped

    def zero_grad_window(self, epoch: int, batch_idx: int) -> None:
        """At an accumulation window's first micro-batch, after its training step and before its
        backward: `on_before_zero_grad`, then `zero_grad(set_to_none=True)` (or the module's
        `optimizer_zero_grad`), per optimizer."""
        for opt in self.optimizers:
            if self._before_zero:
                self._hooks.call("on_before_zero_grad", opt)
            if self._module_zero is not None:
                self._module_zero(epoch, batch_idx, opt)
            else:
                opt.zero_grad(set_to_none=True)

    def manual(self, accumulate_grad_batches: int = 1) -> None:
        """The module steps the optimizers itself (automatic_optimization=False), as in Lightning:
        the schedulers are left to it (`self.lr_schedulers()`); they are still saved in checkpoints."""
        if accumulate_grad_batches != 1:
            raise MisconfigurationError(
                f"accumulate_grad_batches={accumulate_grad_batches} is not supported with "
                "manual optimization (automatic_optimization=False): accumulate in training_step and "
                "step the optimizer every n batches yourself."
            )
        if self._clip_val is not None:
            raise MisconfigurationError(
                "gradient_clip_val is set, but the module uses manual optimization "
                "(automatic_optimization=False): call self.clip_gradients(opt, gradient_clip_val=...) "
                "in training_step instead, and drop gradient_clip_val."
            )
        if self.guard.mode in ("raise", "skip"):
            raise MisconfigurationError(
                f'on_nonfinite="{self.guard.mode}" is not supported with manual optimization '
                "(automatic_optimization=False): the module steps its optimizers, so surge cannot decide "
                'before a step. Check torch.isfinite(loss) before opt.step() yourself, and set on_nonfinite="warn" '
                "(a non-finite loss given to manual_backward is reported) or None."
            )
        self._manual = True
        self.refresh_schedulers()

    def _before_optimizer_step(self, opt: Optimizer) -> None:
        self._precision.unscale_gradients(opt)  # hooks see true-scale gradients
        self._hooks.call("on_before_optimizer_step", opt)

    def _step_one(self, i: int) -> bool:
        """Clip and step optimizer `i` through the precision; False if skipped (non-finite gradients)."""
        opt, allow = self.optimizers[i], self._allow
        if allow is None:
            return precision_step(self._precision, opt, self._clips[i], self.compiled_steps)
        verdict = allow(opt, self._where)
        if verdict is False:
            return False  # on_nonfinite="skip": this window's gradients are dropped
        if verdict is True:
            return precision_step(self._precision, opt, self._clips[i], self.compiled_steps)
        with handed_flag(opt, verdict):  # a fused optimizer skips by itself on this device flag
            return precision_step(self._precision, opt, self._clips[i], self.compiled_steps)

    def zero_grad(self) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def step_schedulers(self, interval: str, count: int, plateau: bool | None = None) -> None:
        """Advance the schedulers of `interval` whose frequency divides `count` (not after a skipped
        step); `plateau` True/False: only those that do / do not need a metric (ReduceLROnPlateau)."""
        configs = self._by_interval[interval]
        if not configs or (interval == "step" and self.skipped):
            return
        for config in configs:
            if count % config.frequency or (plateau is not None and config.needs_metric != plateau):
                continue
            if config.needs_metric:
                metrics = self._metrics()
                if config.monitor is None or config.monitor not in metrics:
                    if config.strict:
                        raise MisconfigurationError(
                            f"the lr_scheduler monitors {config.monitor!r}, which was not logged; logged: {sorted(metrics)}"
                        )
                    continue
                metric: float | None = float(metrics[config.monitor])
            else:
                metric = None
            if self._module_schedule is not None:
                self._module_schedule(config.scheduler, metric)
            elif metric is None:
                config.scheduler.step()
            else:
                config.scheduler.step(metric)

    def step_schedulers_at_cut(self, batch_idx: int, epoch: int) -> None:
        """`on_train_batch_start` returned -1 at `batch_idx`: the epoch ends there, and its
        epoch-interval schedulers step; in the Lightning mode the step-interval ones too, as
        Lightning steps them at every epoch's last batch (here without an optimizer step)."""
        if self.schedules_by_batch:
            self.step_schedulers("step", batch_idx + 1, plateau=False)
        self.step_schedulers("epoch", epoch + 1, plateau=False)

    def schedules(self, interval: str) -> bool:
        """Whether surge steps a scheduler of `interval` ("step" or "epoch") in this epoch."""
        return bool(self._by_interval[interval])

    def step_plateaus(self) -> bool:
        """Whether a step-interval scheduler needs a metric (ReduceLROnPlateau): it steps after the
        batch's validation, as in Lightning, where the others step right after the optimizer."""
        return any(config.needs_metric for config in self._by_interval["step"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer_states": [opt.state_dict() for opt in self.optimizers],
            "lr_schedulers": [config.scheduler.state_dict() for config in self.schedulers],
        }

    def load_state_dict(
        self,
        state: Mapping[str, Any],
        load_optimizers: Callable[[list[Optimizer]], None] | None = None,
        source: str = "the checkpoint",
    ) -> None:
        """Restore optimizers (through `load_optimizers` when the strategy keeps their state itself,
        e.g. sharded) and schedulers, after checking the counts and the optimizers' kinds agree."""
        saved_opts, saved_scheds = state["optimizer_states"], state["lr_schedulers"]
        if len(saved_opts) != len(self.optimizers) or len(saved_scheds) != len(self.schedulers):
            raise MisconfigurationError(
                f"{source} has {len(saved_opts)} optimizers and {len(saved_scheds)} schedulers, but "
                f"configure_optimizers() returned {len(self.optimizers)} and {len(self.schedulers)}."
            )
        for i, (opt, saved) in enumerate(zip(self.optimizers, saved_opts)):
            problem = _optimizer_mismatch(opt, saved)
            if problem:
                raise CheckpointError(
                    f"{source} cannot restore optimizer {i} ({type(opt).__name__}): {problem}. Resume with the "
                    "optimizer the run was saved with, or start a new fit from the weights only "
                    "(Module.load_from_checkpoint)."
                )
        if load_optimizers is not None:
            load_optimizers(self.optimizers)
        else:
            for opt, saved in zip(self.optimizers, saved_opts):
                opt.load_state_dict(saved)
        for config, saved in zip(self.schedulers, saved_scheds):
            config.scheduler.load_state_dict(saved)
        if self._tensor_lr:
            refuse_foreach_with_tensor_lr(self.optimizers, restored_from=source)


def precision_step(
    precision: Any,
    optimizer: Optimizer,
    clip: Callable[[], None] | None,
    compiled: Mapping[int, Callable[[], Any]],
) -> bool:
    """The precision's clipped step of `optimizer`, through its compiled step under compile="step"
    (a precision written for the two-argument call keeps working without compile)."""
    step = compiled.get(id(optimizer)) if compiled else None
    if step is None:
        return bool(precision.optimizer_step(optimizer, clip))
    return bool(precision.optimizer_step(optimizer, clip, step=step))


def _optimizer_mismatch(opt: Optimizer, saved: Any) -> str | None:
    """Why `saved` (an optimizer state dict) cannot go into `opt`, or None: another optimizer class
    (its settings differ both ways, e.g. Adam's betas against SGD's momentum) or other groups."""
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        return None  # held elsewhere (sharded) or in a layout torch itself checks
    if len(groups) != len(opt.param_groups):
        return f"it saved {len(groups)} parameter groups, this optimizer has {len(opt.param_groups)}"
    for i, (group, own) in enumerate(zip(groups, opt.param_groups)):
        problem = settings_differ(opt, set(group), set(own))
        if problem:
            return problem
        if len(group.get("params", ())) != len(own["params"]):
            return (
                f"its parameter group {i} holds {len(group.get('params', ()))} parameters, this optimizer's "
                f"{len(own['params'])}"
            )
    return None


def _steps_counted(batches: int, steps: int) -> int:
    """surge's clock for a step-interval scheduler's `frequency`: optimizer steps."""
    return steps


def _batches_counted(batches: int, steps: int) -> int:
    """Lightning's: the batches of the epoch so far."""
    return batches
