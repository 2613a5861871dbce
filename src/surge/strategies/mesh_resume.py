"""Resuming on another layout: a checkpoint's tensors are DCP shards keyed by parameter name with
their global shapes, so DCP reshards them onto whatever this run holds (another mesh, FSDP or one
process), and a mesh's checkpoint records its sizes only to say what moved. What resharding
cannot change is a tensor whose size the layout itself decided (a layer built with a size divided by
the tensor-parallel size, outside the plan): such a load fails, and its error names both layouts and
the fix."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..checkpoint.shard_files import SHARDS, is_sharded
from ..errors import CheckpointError
from ..rank_zero import info

MESH = "mesh"  # the checkpoint entry: the sizes of the mesh it was saved on, in NAMES' order
NAMES = ("data_parallel", "tensor_parallel", "pipeline_parallel")


def saved_layout(ckpt: Mapping[str, Any]) -> str:
    """The layout `ckpt` was saved on, in words."""
    sizes = ckpt.get(MESH)
    if isinstance(sizes, list) and sizes and all(isinstance(s, int) for s in sizes):
        return describe(sizes)
    if is_sharded(ckpt):
        world = ckpt[SHARDS].get("world_size") if isinstance(ckpt[SHARDS], Mapping) else None
        return f"{world if isinstance(world, int) else 'several'} process(es) without a device mesh (FSDP)"
    return "one whole state dict (one process, DDP or DP)"


def describe(sizes: list[int] | tuple[int, ...]) -> str:
    """`[2, 2]` as "a mesh of data_parallel=2 x tensor_parallel=2"."""
    return "a mesh of " + " x ".join(f"{name}={size}" for name, size in zip(NAMES, sizes))


def say_if_moved(ckpt: Mapping[str, Any], sizes: list[int], path: str | Path) -> None:
    """One line when the checkpoint is resharded onto another layout than it was saved on."""
    if ckpt.get(MESH) != sizes:
        info(f"{path} was saved on {saved_layout(ckpt)}: resharded onto {describe(sizes)}")


@contextlib.contextmanager
def layout_errors(ckpt: Mapping[str, Any], sizes: list[int], path: str | Path) -> Iterator[None]:
    """A load that fails on another layout than the checkpoint's is refused with both named."""
    try:
        yield
    except CheckpointError as err:
        if ckpt.get(MESH) == sizes:
            raise
        raise CheckpointError(
            f"{err}. {path} was saved on {saved_layout(ckpt)} and this run is {describe(sizes)}: every "
            "tensor reshards onto any layout, but not one whose size the layout decided (a layer built with "
            "a size divided by the tensor-parallel size, outside the plan). Resume on the layout it was saved "
            "with, or build such layers whole and split them with the tensor-parallel plan in configure_model."
        ) from err
