"""Gradient clipping by the global norm, also over DTensor shards that live on different meshes.

torch's `clip_grad_norm_` stacks every gradient's norm, which fails when a model mixes meshes (a
tensor-parallel layer's parameters on the 2-D data x tensor mesh, a layer norm's on the 1-D data
mesh). Here each mesh's gradients give one norm over all their shards (a collective), and those
norms combine into the global one; a model on one mesh, or none, uses torch's function unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

ClipNorm = Callable[[Iterable[Tensor], float], Tensor]


def norm_clipper(params: Sequence[Tensor]) -> ClipNorm:
    """The norm-clipping function for these parameters, chosen once: torch's, or the mixed-mesh one."""
    return clip_grad_norm_over_meshes if len(_meshes(params)) > 1 else torch.nn.utils.clip_grad_norm_


def clip_grad_norm_over_meshes(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """Scale the gradients so that their global 2-norm is at most `max_norm`; returns that norm."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    by_mesh: dict[int, list[Tensor]] = {}
    for grad in grads:
        by_mesh.setdefault(id(getattr(grad, "device_mesh", None)), []).append(grad)
    norms = [_norm(group) for group in by_mesh.values()]
    total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))
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


def _meshes(params: Sequence[Tensor]) -> set[int]:
    return {id(getattr(p, "device_mesh", None)) for p in params}
