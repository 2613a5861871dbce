"""DistributedDataParallel: one process per device, gradients averaged during backward.

The strategy owns the process group (started here, or joined when torchrun or SLURM started the
processes), the wrapping, the collectives and rank-zero checkpoint writes.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import MisconfigurationError
from ..launch.environment import ClusterEnvironment, detect
from ..launch.subprocess_launcher import SubprocessLauncher
from .base import Strategy, _spans_devices

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class _TrainingStep(nn.Module):
    """What DDP wraps: its forward is the user's `training_step`, so DDP's hooks see every step.

    Checkpoints are taken from the user's module itself, never from this wrapper.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any) -> Any:
        return self.module.training_step(*args)


class DDPStrategy(Strategy):
    """`torch.nn.parallel.DistributedDataParallel` over `world_size` processes."""

    name = "ddp"

    def __init__(
        self,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = True,
        bucket_cap_mb: float | None = None,
        timeout: datetime.timedelta | float = datetime.timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        super().__init__()
        self.ddp_kwargs: dict[str, Any] = {
            "find_unused_parameters": find_unused_parameters, "static_graph": static_graph,
            "gradient_as_bucket_view": gradient_as_bucket_view,
        }  # fmt: skip
        if bucket_cap_mb is not None:
            self.ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb
        self.timeout = (
            timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
        )
        self.backend = process_group_backend
        self.env: ClusterEnvironment = detect()
        self.launcher: SubprocessLauncher | None = None
        self.wrapped: nn.Module | None = None
        self._owns_group = False

    # -- ranks -----------------------------------------------------------------------------
    @property
    def global_rank(self) -> int:  # type: ignore[override]
        return self.env.global_rank

    @property
    def local_rank(self) -> int:  # type: ignore[override]
        return self.env.local_rank

    @property
    def node_rank(self) -> int:  # type: ignore[override]
        return self.env.node_rank

    @property
    def world_size(self) -> int:  # type: ignore[override]
        return self.env.world_size

    @property
    def reducer(self) -> DDPStrategy:
        return self

    def configure(self, processes_per_node: int, num_nodes: int) -> None:
        """Check the environment agrees with `devices` and `num_nodes`; plan a launch if alone."""
        expected = processes_per_node * num_nodes
        if self.env.source == "local":
            if num_nodes > 1:
                raise MisconfigurationError(
                    f"num_nodes={num_nodes} needs a launcher that starts processes on every node: run under "
                    "torchrun (`surge launch`) or SLURM (`srun`)."
                )
            self.launcher = SubprocessLauncher(processes_per_node)
            self.env = ClusterEnvironment(source="surge", world_size=expected, local_world_size=expected)
        elif self.env.world_size != expected:
            raise MisconfigurationError(
                f"Trainer(devices={processes_per_node}, num_nodes={num_nodes}) expects {expected} processes, but the "
                f"{self.env.source} environment says WORLD_SIZE={self.env.world_size} (this is rank "
                f"{self.env.global_rank}, local rank {self.env.local_rank}, node {self.env.node_rank}); make them agree."
            )

    # -- set-up ----------------------------------------------------------------------------
    def setup_environment(self, device: torch.device) -> None:
        self.device = device
        if dist.is_available() and dist.is_initialized():
            return
        if self.launcher is not None and not self.launcher.children and self.env.global_rank == 0:
            self.launcher.launch()
            self.env = detect()
        elif self.env.source == "slurm":
            self.env.export()
        backend = self.backend or ("nccl" if device.type == "cuda" else "gloo")
        dist.init_process_group(
            backend,
            rank=self.env.global_rank,
            world_size=self.env.world_size,
            timeout=self.timeout,
            init_method="env://",
        )
        self._owns_group = True
        # The group lives on for validate/test/predict after fit; at exit it must be destroyed, or
        # gloo's threads can abort the interpreter at shutdown ("terminate called without an active
        # exception"). Registered after the launcher's join, so it runs before it.
        atexit.register(self._destroy_at_exit)

    def setup_module(self, module: nn.Module) -> nn.Module:
        self.module = module
        if not _spans_devices(module):
            module.to(self.device)
        device_ids = (
            [self.device.index] if self.device.type == "cuda" and not _spans_devices(module) else None
        )
        self.wrapped = nn.parallel.DistributedDataParallel(
            _TrainingStep(module), device_ids=device_ids, **self.ddp_kwargs
        )
        return module

    def step_fn(self, module: nn.Module, hook: str) -> Callable[..., Any]:
        if hook == "training_step" and self.wrapped is not None:
            return self.wrapped
        return getattr(module, hook)

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self.wrapped.no_sync() if self.wrapped is not None else contextlib.nullcontext()

    # -- collectives -----------------------------------------------------------------------
    def barrier(self, name: str = "") -> None:
        if dist.is_initialized():
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_reduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        out = tensor.detach().clone()
        if self._backend_name() == "gloo" and out.device.type != "cpu":
            out = out.cpu()
        dist.all_reduce(out, op=_OPS[op])
        return out

    def mean(self, tensor: Tensor) -> Tensor:
        return self.all_reduce(tensor, "sum") / self.world_size

    def average_gradients(self, module: nn.Module) -> None:
        for p in module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.world_size)

    def reduce_bool(self, flag: bool) -> bool:
        t = torch.tensor(float(flag), device=self.device if self._backend_name() != "gloo" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def _backend_name(self) -> str:
        return dist.get_backend() if dist.is_initialized() else "gloo"

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], path: str | Path) -> None:
        super().save_checkpoint(state, path)  # rank zero writes, then everyone waits

    def _destroy_at_exit(self) -> None:
        # DDP's reducer holds the process group: drop it first, so the group (and its gloo threads)
        # is really freed here rather than during interpreter shutdown, where a still-joinable
        # thread aborts the process.
        self.wrapped = None
        gc.collect()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False

    def teardown(self, failed: bool = False) -> None:
        if failed and self.launcher is not None:
            self.launcher.terminate()
        if self._owns_group and dist.is_initialized():
            if not failed:
                dist.barrier()
            dist.destroy_process_group()
            self._owns_group = False
