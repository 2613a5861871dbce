"""Lightning's tensor collectives (`strategy.reduce`, `strategy.all_gather`) with its semantics,
for scripts that call them: reduced in place, "mean" as a sum divided by the world size on gloo
(which has no average), gathered tensors stacked along a new first dimension."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def reduce_op_of(reduce_op: Any, group: Any) -> tuple[Any, bool]:
    """torch's ReduceOp for Lightning's `reduce_op` ("mean"/"avg", "sum", "max", ... or a ReduceOp),
    and whether the result must still be divided by the world size (an average on gloo)."""
    if not isinstance(reduce_op, str):
        return reduce_op, False
    name = "avg" if reduce_op.lower() == "mean" else reduce_op.lower()
    if name == "avg" and dist.get_backend(group) == "gloo":
        return dist.ReduceOp.SUM, True
    return getattr(dist.ReduceOp, name.upper()), False


def reduce_tensor(tensor: Tensor, group: Any = None, reduce_op: Any = "mean") -> Tensor:
    """All-reduce `tensor` in place over `group` (None: every process) after a barrier; returns it."""
    group = dist.group.WORLD if group is None else group
    op, divide = reduce_op_of(reduce_op, group)
    dist.barrier(group=group)
    dist.all_reduce(tensor, op=op, group=group)
    if not divide:
        return tensor
    size = dist.get_world_size(group)
    if not torch.is_floating_point(tensor):
        return tensor.copy_(tensor / size)  # an integer tensor keeps its dtype, truncated
    return tensor.div_(size)


def gather_tensor(tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
    """Every process's `tensor`, stacked: shape (world_size, *tensor.shape). With `sync_grads`,
    gradients flow back to each process's own input."""
    from torch.distributed.nn.functional import all_gather

    group = dist.group.WORLD if group is None else group
    tensor = tensor.contiguous()
    if sync_grads:
        return torch.stack(all_gather(tensor, group))
    with torch.no_grad():
        return torch.stack(all_gather(tensor, group))
