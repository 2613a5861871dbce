"""What a model's parallel plan must satisfy on a mesh, checked once after `configure_model`: a
tensor-parallel split divides the dimension it splits, and every parameter ends up sharded over the
data-parallel dimension (else its gradients would differ between data-parallel ranks, silently)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import MisconfigurationError
from .mesh import DATA, TENSOR


def check_tensor_parallel_applied(module: nn.Module, tensor_parallel: int, owner: str) -> None:
    """A tensor-parallel size > 1 with no parameter split over it would repeat the same work on every
    rank of the group: refused, naming where the plan goes."""
    if tensor_parallel > 1 and not any(TENSOR in _dim_names(p) for p in module.parameters()):
        raise MisconfigurationError(
            f"{owner}: the mesh has a tensor-parallel size of {tensor_parallel}, but no parameter is split over "
            "it. Apply your plan in configure_model: parallelize_module(layer, "
            'self.device_mesh["tensor_parallel"], {...: ColwiseParallel(), ...: RowwiseParallel()}).'
        )


def check_plan_divides(module: nn.Module, tensor_parallel: int, owner: str) -> None:
    """Refuse a parameter that the tensor-parallel plan splits into unequal shards."""
    uneven = []
    for name, param in module.named_parameters():
        dim = _split_dim(param, TENSOR)
        if dim is not None and param.shape[dim] % tensor_parallel:
            uneven.append(f"{name} {tuple(param.shape)} along dim {dim}")
    if uneven:
        raise MisconfigurationError(
            f"{owner}: the tensor-parallel plan applied in configure_model splits {', '.join(uneven[:5])} "
            f"{tensor_parallel} ways, which does not divide it (uneven shards give wrong per-head reshapes "
            f"and idle ranks). Choose layer sizes divisible by the tensor-parallel size {tensor_parallel}, "
            "or leave those layers out of the plan."
        )


def check_data_parallel(module: nn.Module, owner: str) -> None:
    """Refuse a parameter left out of the data-parallel sharding (e.g. `fully_shard` given the
    default mesh of every process instead of `self.device_mesh["data_parallel"]`)."""
    outside = [name for name, param in module.named_parameters() if DATA not in _dim_names(param)]
    if outside:
        raise MisconfigurationError(
            f"{owner}: parameters {outside[:5]} are not sharded over the mesh's data-parallel dimension, "
            "so their gradients would not be averaged between data-parallel ranks. In configure_model, "
            'call fully_shard(layer, mesh=self.device_mesh["data_parallel"]) (or leave fully_shard to surge).'
        )


def _dim_names(param: Any) -> tuple[str, ...]:
    mesh = getattr(param, "device_mesh", None)
    return tuple(mesh.mesh_dim_names or ()) if mesh is not None else ()


def _split_dim(param: Any, dim_name: str) -> int | None:
    """The tensor dimension `param` is sharded along on the mesh dimension `dim_name` (None: not split)."""
    names = _dim_names(param)
    if dim_name not in names:
        return None
    placement = param.placements[names.index(dim_name)]
    return placement.dim if placement.is_shard() else None
