"""The device mesh of a model-parallel run: its shape checked once, built once, and the collectives
that belong to its data-parallel dimension (tensor-parallel ranks hold the same batch, so metrics are
reduced over the data-parallel group only)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
from torch import Tensor

from ..errors import MisconfigurationError, bad_value

DATA, TENSOR = "data_parallel", "tensor_parallel"  # the mesh's dimension names (Lightning's too)
PIPE = "pipeline_parallel"  # the outer dimension of a pipelined mesh (present only when its size > 1)
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


@dataclass(frozen=True)
class MeshShape:
    """How many ranks each dimension spans: `pipeline_parallel` x `data_parallel` x `tensor_parallel`
    = the world size (laid out row-major: a pipeline stage's ranks are adjacent)."""

    data_parallel: int
    tensor_parallel: int
    owner: str = field(default="ModelParallel", compare=False)  # the constructor (for messages)
    pipeline_parallel: int = 1

    def __post_init__(self) -> None:
        for arg in ("data_parallel", "tensor_parallel", "pipeline_parallel"):
            value = getattr(self, arg)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad_value(f"{self.owner}({arg})", value, "an int >= 1")

    @property
    def size(self) -> int:
        return self.pipeline_parallel * self.data_parallel * self.tensor_parallel

    def check_world(self, world_size: int, names: tuple[str, str], asked: str) -> None:
        """The mesh must cover every process exactly once (`asked`: how the processes were asked for)."""
        if self.size != world_size:
            dp, tp = names
            pp = f", pipeline_parallel={self.pipeline_parallel}" if self.pipeline_parallel > 1 else ""
            raise MisconfigurationError(
                f"{self.owner}({dp}={self.data_parallel}, {tp}={self.tensor_parallel}{pp}) is a mesh of "
                f"{self.size} processes, but {asked} runs {world_size}: choose sizes whose product is "
                f"{world_size}, or Trainer(devices=..., num_nodes=...) that start {self.size} processes."
            )

    def sampler_kwargs(self, global_rank: int) -> dict[str, int]:
        """A sampler's `num_replicas` and `rank`: this rank's place along the data-parallel dimension
        (the mesh is laid out row-major, so the ranks of one tensor-parallel group are adjacent; the
        stages of one pipeline read the same batches: the first its inputs, the last its targets)."""
        rank = (global_rank // self.tensor_parallel) % self.data_parallel
        return {"num_replicas": self.data_parallel, "rank": rank}

    def build(self, device_type: str) -> Any:
        """The named DeviceMesh (`"data_parallel"`, `"tensor_parallel"`, and `"pipeline_parallel"` first
        when there are stages); every rank calls it."""
        from torch.distributed.device_mesh import init_device_mesh

        sizes: tuple[int, ...] = (self.data_parallel, self.tensor_parallel)
        names: tuple[str, ...] = (DATA, TENSOR)
        if self.pipeline_parallel > 1:
            sizes, names = (self.pipeline_parallel, *sizes), (PIPE, *names)
        return init_device_mesh(device_type, sizes, mesh_dim_names=names)


class GroupReducer:
    """Metric reduction (sums, means, max/min) over one process group, looked up when it reduces
    (the group is made after the Trainer that holds this reducer)."""

    def __init__(self, group: Callable[[], Any]) -> None:
        self._group = group

    def all_reduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        group = self._group()
        out = tensor.detach().clone()
        if dist.get_backend(group) == "gloo" and out.device.type != "cpu":
            out = out.cpu()
        dist.all_reduce(out, op=_OPS[op], group=group)
        return out

    def mean(self, tensor: Tensor) -> Tensor:
        return self.all_reduce(tensor, "sum") / dist.get_world_size(self._group())
