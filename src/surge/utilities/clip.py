"""Gradient clipping by the global norm, also over DTensor shards that live on different meshes.

torch's `clip_grad_norm_` stacks every gradient's norm, which fails when a model mixes meshes (a
tensor-parallel layer's parameters on the 2-D data x tensor mesh, a layer norm's on the 1-D data
mesh). Here each mesh's gradients give one norm over all their shards (a collective), and those
norms combine into the global one; a model on one mesh, or none, uses torch's function unchanged.
Under pipeline parallelism a rank holds only its stages' parameters (DTensors on a mesh whose root has
a `"pipeline_parallel"` dimension): their squared norm is summed over the pipeline group as well, so
every stage clips by the norm of the whole model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

PIPE = "pipeline_parallel"  # (surge.strategies.mesh's name; not imported: utilities stay below strategies)

ClipNorm = Callable[[Iterable[Tensor], float], Tensor]


def norm_clipper(params: Sequence[Tensor]) -> ClipNorm:
    """The norm-clipping function for these parameters, chosen once: torch's, the mixed-mesh one, or
    the one over pipeline stages."""
    stages = _pipeline_group(params)
    if stages is not None:
        return partial(clip_grad_norm_over_meshes, stages=stages)
    return clip_grad_norm_over_meshes if len(_meshes(params)) > 1 else torch.nn.utils.clip_grad_norm_


def clip_grad_norm_over_meshes(params: Iterable[Tensor], max_norm: float, stages: Any = None) -> Tensor:
    """Scale the gradients so that their global 2-norm is at most `max_norm`; returns that norm.
    `stages`: the pipeline group whose ranks hold the model's other parameters."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads and stages is None:
        return torch.tensor(0.0)
    by_mesh: dict[int, list[Tensor]] = {}
    for grad in grads:
        by_mesh.setdefault(id(getattr(grad, "device_mesh", None)), []).append(grad)
    norms = [_norm(group) for group in by_mesh.values()] or [torch.zeros(())]
    total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))
    if stages is not None:
        squared = total.square()
        torch.distributed.all_reduce(squared, group=stages)  # the other stages' parameters
        total = squared.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        local.mul_(coef.to(local.device, local.dtype))
    return total


def _norm(grads: list[Tensor]) -> Tensor:
    """The 2-norm of gradients on one mesh, over every shard (a plain tensor on each rank)."""
    norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads])
    )
    full = getattr(norm, "full_tensor", None)
    return full() if full is not None else norm


def _pipeline_group(params: Sequence[Tensor]) -> Any:
    """The pipeline group of these parameters' mesh, when it has one of more than one rank."""
    for p in params:
        mesh = getattr(p, "device_mesh", None)
        root: Any = mesh._get_root_mesh() if mesh is not None and hasattr(mesh, "_get_root_mesh") else None
        names = tuple(root.mesh_dim_names or ()) if root is not None else ()
        if PIPE in names and root.size(names.index(PIPE)) > 1:
            return root[PIPE].get_group()
    return None


def _meshes(params: Sequence[Tensor]) -> set[int]:
    return {id(getattr(p, "device_mesh", None)) for p in params}
