"""DistributedDataParallel: one process per device, gradients averaged during backward.

Checkpoints are the bare module's, written by rank zero (every rank holds the same weights).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..config.registry import register_strategy
from ..errors import bad_value
from ..launch.multiprocessing_launcher import check_start_method
from .base import _spans_devices
from .parallel import ProcessGroupStrategy

if TYPE_CHECKING:
    from ..module import Module


class _TrainingStep(nn.Module):
    """What DDP wraps: its forward is the user's `training_step`, so DDP's hooks see every step.

    Checkpoints are taken from the user's module itself, never from this wrapper.
    """

    def __init__(self, module: Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any) -> Any:
        return self.module.training_step(*args)


def _manual_training_step(ddp: nn.parallel.DistributedDataParallel, *args: Any) -> Any:
    """Manual optimization's `training_step` through DDP's forward, as Lightning runs it.

    The step's own `manual_backward` arms DDP's reducer before each backward, so DDP's forward must
    not arm it once more as the step returns: that backward never comes, and the next forward's
    bucket rebuild fails ("must NOT be called during autograd execution"). Such a forward also asks
    the next one for no buffer broadcast, as Lightning's (rank 1 keeps its own BatchNorm statistics).
    """
    sync = ddp.require_backward_grad_sync
    done = ddp.module.register_forward_hook(lambda *_: setattr(ddp, "require_backward_grad_sync", False))
    try:
        return ddp(*args)
    finally:
        done.remove()
        ddp.require_backward_grad_sync = sync


def _validation_step(ddp: nn.parallel.DistributedDataParallel, step: Callable[..., Any], *args: Any) -> Any:
    """`step` with the buffers DDP's own forward would give it (Lightning runs validation there).

    A forward through DDP first broadcasts rank 0's buffers (BatchNorm's running statistics) when
    the forward before it was a synchronised training step, so every rank validates the model
    rank 0 checkpoints; a forward without gradients asks the next one for no broadcast.
    """
    if ddp.will_sync_module_buffers():
        ddp._sync_buffers()
    ddp.require_forward_param_sync = torch.is_grad_enabled() and ddp.require_backward_grad_sync
    return step(*args)


@register_strategy("ddp")
class DDPStrategy(ProcessGroupStrategy):
    """`torch.nn.parallel.DistributedDataParallel` over `world_size` processes.

    `comm_hook` (with its `comm_state`) replaces DDP's gradient all-reduce, as
    `DistributedDataParallel.register_comm_hook(comm_state, comm_hook)` does (e.g. torch's
    `fp16_compress_hook`); it is registered on each wrapper this strategy makes.

    `start_method` says how a process alone starts the others: "popen" (the script runs again for
    ranks 1..N-1; this process is rank 0), or "spawn", "fork", "forkserver" (each stage starts N
    ranks from inside `fit()`/`validate()`/...; see docs/distributed.md). Under torchrun or SLURM the
    processes exist already and it plays no part.
    """

    name = "ddp"
    wrapped: nn.parallel.DistributedDataParallel | None

    def __init__(
        self,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = True,
        bucket_cap_mb: float | None = None,
        broadcast_buffers: bool = True,
        comm_hook: Callable[..., Any] | None = None,
        comm_state: object = None,
        timeout: datetime.timedelta | float | None = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
        start_method: str = "popen",
    ) -> None:
        if start_method != "popen":
            check_start_method(start_method, "DDPStrategy(start_method)")
        super().__init__(timeout=timeout, process_group_backend=process_group_backend)
        self.start_method = start_method
        self.ddp_kwargs: dict[str, Any] = {
            "find_unused_parameters": find_unused_parameters, "static_graph": static_graph,
            "gradient_as_bucket_view": gradient_as_bucket_view,
        }  # fmt: skip
        if not broadcast_buffers:  # torch warns about the argument itself: passed only to turn it off
            self.ddp_kwargs["broadcast_buffers"] = False
        if bucket_cap_mb is not None:
            self.ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb
        if comm_hook is not None and not callable(comm_hook):
            raise bad_value(
                "comm_hook", comm_hook, "None or a DDP communication hook, (state, bucket) -> Future"
            )
        self.comm_hook, self.comm_state = comm_hook, comm_state

    def setup_module(self, module: nn.Module) -> nn.Module:
        self.module = module
        if not _spans_devices(module):
            module.to(self.device)
        device_ids = (
            [self.device.index] if self.device.type == "cuda" and not _spans_devices(module) else None
        )
        self.wrapped = nn.parallel.DistributedDataParallel(
            _TrainingStep(cast("Module", module)), device_ids=device_ids, **self.ddp_kwargs
        )
        if self.comm_hook is not None:
            self.wrapped.register_comm_hook(self.comm_state, self.comm_hook)
        return module

    def step_fn(self, module: nn.Module, hook: str) -> Callable[..., Any]:
        if self.wrapped is not None and hook == "training_step":
            if not getattr(module, "automatic_optimization", True):
                return functools.partial(_manual_training_step, self.wrapped)
            return self.wrapped
        if self.wrapped is not None and hook == "validation_step" and self.stage_set_up == "fit":
            return functools.partial(_validation_step, self.wrapped, getattr(module, hook))
        return getattr(module, hook)

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self.wrapped.no_sync() if self.wrapped is not None else contextlib.nullcontext()

    def prepare_manual_backward(self, loss: Tensor) -> None:
        """Arm DDP's gradient reduction for this backward: under manual optimization one forward
        (the training step) may be followed by several backwards, each of which all-reduces."""
        ddp = self.wrapped
        if ddp is None or not torch.is_grad_enabled() or not ddp.require_backward_grad_sync:
            return
        ddp.require_forward_param_sync = True
        # With find_unused_parameters the reducer walks this loss's graph for the parameters it uses.
        outputs = [loss] if ddp.find_unused_parameters and not ddp.static_graph else []
        ddp.reducer._rebuild_buckets()  # before autograd runs (DDP's next forward would, inside it)
        ddp.reducer.prepare_for_backward(outputs)

    def wrap_gradient_allreduce(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
        if self.wrapped is None or self.comm_hook is not None:  # DDP takes one hook: the user's
            return False
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.wrapped.register_comm_hook(None, wrap(allreduce_hook))
        return True

    def average_gradients(self, module: nn.Module) -> None:
        for p in module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.world_size)


@register_strategy("ddp_find_unused_parameters_true")
class DDPFindUnusedStrategy(DDPStrategy):
    """Lightning's `strategy="ddp_find_unused_parameters_true"`: DDP that finds, in each backward,
    the parameters the loss did not use (e.g. a GAN's toggled-off discriminator)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"find_unused_parameters": True, **kwargs})
