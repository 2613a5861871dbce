"""Sharded checkpoints: each rank writes its shards with `torch.distributed.checkpoint` (DCP).

A sharded checkpoint is two things side by side:
- `NAME.ckpt`, an ordinary surge checkpoint file (loop, callbacks, RNG, schedulers, written
  atomically with its content digest) that names its shard folder and the blake2b digest of
  every file in it;
- `NAME.ckpt.shards-PID-ID/`, the DCP folder with the model and optimizer states.
The small file is committed last, so a crash at any moment leaves the previous checkpoint
whole; a shard folder that no checkpoint names is debris and is removed. Shards are verified
against the digests before any state is used, and DCP's pickled `.metadata` is read by an
unpickler that only builds DCP's own metadata classes, so a hostile checkpoint cannot run code.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import shutil
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    StorageMeta,
    TensorStorageMetadata,
)

from ..errors import CheckpointError
from . import load_checkpoint, save_atomic
from .model_state import clean_state_dict
from .shard_files import (
    SHARDS,
    TENSOR_KEYS,
    _named_folder,
    _plain_name,
    _remove_if_unreferenced,
    file_digest,
    is_sharded,
    shard_dir,
    verify_shards,
)

# -- writing -------------------------------------------------------------------------------
__all__ = ["consolidate", "read_weights"]  # the public API: the rest serves checkpointing


def save_sharded(
    state: dict[str, Any],
    path: str | Path,
    *,
    rank: int,
    world_size: int,
    broadcast: Callable[[Any], Any],
    gather: Callable[[Any], list[Any]],
    barrier: Callable[[], None],
    group: Any = None,
) -> Path:
    """Write `state` as a sharded checkpoint at `path`; a collective, every rank calls it (DCP's own
    collectives on `group`, the default process group when None)."""
    path = Path(path)
    tag = broadcast(f"{os.getpid()}-{uuid.uuid4().hex[:8]}" if rank == 0 else None)
    folder = path.parent / f"{path.name}.shards-{tag}"
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=False)
    barrier()
    tensors = {k: state[k] for k in TENSOR_KEYS if k in state}
    try:
        dcp.save(tensors, storage_writer=dcp.FileSystemWriter(folder, sync_files=True), process_group=group)
    except (OSError, CheckpointException) as err:
        # DCP gathers every rank's failure and raises on all of them, so all ranks get here.
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
        raise CheckpointError(
            f"could not write checkpoint shards {folder}: {err}; the previous checkpoint is intact"
        ) from err
    barrier()
    files = sorted(p.name for p in folder.iterdir()) if rank == 0 else None
    files = broadcast(files)
    mine = {name: file_digest(folder / name) for name in files[rank::world_size]}
    digests = {name: d for part in gather(mine) for name, d in part.items()}
    if rank == 0:
        meta = {k: v for k, v in state.items() if k not in TENSOR_KEYS}
        meta[SHARDS] = {
            "dir": folder.name,
            "files": digests,
            "world_size": world_size,
            "keys": sorted(tensors),
        }
        if "optimizer_states" in tensors:
            meta["optimizer_states"] = [SHARDS] * len(tensors["optimizer_states"])
        replaced = _named_folder(path)
        save_atomic(meta, path)
        if replaced is not None and replaced != folder.name:
            _remove_if_unreferenced(path.parent / replaced)
    barrier()
    return path


# -- reading -------------------------------------------------------------------------------
def read_metadata(folder: Path) -> Any:
    """DCP's metadata for `folder`, unpickled safely."""
    return _SafeReader(folder).read_metadata()


def load_into(
    template: dict[str, Any], ckpt: Mapping[str, Any], path: str | Path, partial: bool = False
) -> None:
    """Fill `template` (same nesting as the saved state, e.g. {"state_dict": ...}) from the shards,
    resharding to however `template`'s tensors are laid out (any world size, or plain tensors)."""
    folder = shard_dir(ckpt, path)
    reader = _SafeReader(folder)
    alone = not (dist.is_available() and dist.is_initialized())
    try:
        with warnings.catch_warnings():
            # One process reading a sharded checkpoint is the intent here, not a mistake.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(
                template,
                storage_reader=reader,
                planner=DefaultLoadPlanner(allow_partial_load=partial),
                no_dist=alone,
            )
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(f"could not read the shards of checkpoint {path} from {folder}: {err}") from err


def full_model_state(ckpt: Mapping[str, Any], path: str | Path) -> dict[str, torch.Tensor]:
    """The whole model state dict from a sharded checkpoint, as plain CPU tensors (a consolidation)."""
    meta = read_metadata(shard_dir(ckpt, path))
    prefix = "state_dict."
    template = {
        key[len(prefix) :]: torch.empty(tuple(info.size), dtype=info.properties.dtype)
        for key, info in meta.state_dict_metadata.items()
        if key.startswith(prefix) and isinstance(info, TensorStorageMetadata)
    }
    box = {"state_dict": template}
    load_into(box, ckpt, path, partial=True)
    return box["state_dict"]


def saved_model_shapes(ckpt: Mapping[str, Any], path: str | Path) -> dict[str, tuple[int, ...]]:
    """Model keys in a sharded checkpoint with their global shapes (for strict-load reports)."""
    meta = read_metadata(shard_dir(ckpt, path))
    prefix = "state_dict."
    return {
        key[len(prefix) :]: tuple(getattr(info, "size", ()))
        for key, info in meta.state_dict_metadata.items()
        if key.startswith(prefix)
    }


def check_optimizer_kinds(optimizers: list[Any], ckpt: Mapping[str, Any], path: str | Path) -> None:
    """Refuse optimizers of another class than the sharded checkpoint's, as a whole state dict's
    restore does: their group settings (the last part of each saved `param_groups` key, whether the
    groups are keyed by index or, flattened, by parameter name) differ both ways."""
    from .optimizer_settings import settings_mismatch

    keys = read_metadata(shard_dir(ckpt, path)).state_dict_metadata
    for i, opt in enumerate(optimizers):
        prefix = f"optimizer_states.{i}.param_groups."
        problem = settings_mismatch(opt, {k.rsplit(".", 1)[1] for k in keys if k.startswith(prefix)})
        if problem:
            raise CheckpointError(
                f"{path} cannot restore optimizer {i} ({type(opt).__name__}): {problem}. Resume with the "
                "optimizer the run was saved with, or start a new fit from the weights only."
            )


class _Refused(pickle.UnpicklingError):
    """A global outside the metadata allowlist: the file could run code (not merely damaged)."""


class _SafeUnpickler(pickle.Unpickler):
    """Builds DCP metadata and nothing else: any other global in the pickle is refused.

    Only classes that do no work when built are allowed (the metadata dataclasses, an enum, dtypes,
    `torch.Size`, paths): nothing whose constructor allocates memory sized by the file's numbers.
    """

    _CLASSES = {
        "torch.distributed.checkpoint.metadata": {
            "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
            "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
        },
        "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    }  # fmt: skip
    _NAMES = {
        ("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
        ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"), ("collections", "OrderedDict"),
        ("builtins", "set"), ("builtins", "frozenset"),
    }  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        if name in self._CLASSES.get(module, ()):
            import importlib

            obj = getattr(importlib.import_module(module), name, None)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        if (module, name) in self._NAMES:
            return super().find_class(module, name)
        if module == "torch" and isinstance(
            getattr(torch, name, None), (torch.dtype, torch.memory_format, torch.layout)
        ):
            return getattr(torch, name)
        raise _Refused(f"global {module}.{name} is not allowed in a checkpoint's metadata")


class _SafeReader(FileSystemReader):
    """DCP's file reader with a metadata unpickler that cannot run code."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        path = Path(self.path) / ".metadata"
        if not path.is_file():
            raise CheckpointError(f"{self.path} has no .metadata: not a complete sharded checkpoint")
        try:
            metadata = _SafeUnpickler(io.BytesIO(path.read_bytes())).load()
        except _Refused as err:
            raise CheckpointError(f"refusing to load {path}: it could run code when loaded ({err})") from err
        except Exception as err:
            raise CheckpointError(
                f"{path} is truncated or corrupt and cannot be read: {type(err).__name__}: {err}"
            ) from err
        _check_metadata(metadata, path)
        if _old_torch() and _has_bytes(metadata):
            raise CheckpointError(
                f"{self.path} holds pickled entries that torch {torch.__version__} would load without "
                "weights_only; load it with torch >= 2.6"
            )
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = getattr(self, "load_id", None)
        return metadata


def _check_metadata(metadata: Any, path: Path) -> None:
    """DCP metadata whose tensors are no larger than the shard files hold and whose data lies in
    files of this folder (DCP joins the names it gives to the folder)."""
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, Mapping):
        raise CheckpointError(f"{path} is corrupt: it does not hold DCP metadata ({type(metadata).__name__})")
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or not _plain_name(name):
            raise CheckpointError(
                f"{path} names the data file {name!r}; only files of its own folder are read"
            )
    room = sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())
    for key, info in metadata.state_dict_metadata.items():
        if isinstance(info, TensorStorageMetadata):
            size = _tensor_bytes(info)
            if size is None or size > room:
                raise CheckpointError(
                    f"{path} is corrupt: it gives {key!r} the size {tuple(info.size)}, "
                    f"more than the {room} bytes of its shard files hold"
                )


def _tensor_bytes(info: TensorStorageMetadata) -> int | None:
    try:
        dims = [int(d) for d in info.size]
        itemsize = info.properties.dtype.itemsize
    except Exception:
        return None
    if any(d < 0 for d in dims):
        return None
    return math.prod(dims) * itemsize


def _old_torch() -> bool:
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) < (2, 6)


def _has_bytes(metadata: Any) -> bool:
    return any(isinstance(v, BytesStorageMetadata) for v in metadata.state_dict_metadata.values())


def model_weights(ckpt: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """The bare model weights of a loaded checkpoint: its own entry, or a sharded one's shards
    consolidated into whole CPU tensors (verified against their digests first)."""
    if not is_sharded(ckpt):
        return clean_state_dict(ckpt["state_dict"])
    problems = verify_shards(ckpt, path)
    if problems:
        raise CheckpointError(f"checkpoint {path} cannot be used: " + "; ".join(problems))
    return full_model_state(ckpt, path)


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The bare model weights of any surge checkpoint (one file, or sharded), verified, on CPU."""
    return model_weights(load_checkpoint(path), path)


def consolidate(path: str | Path, out: str | Path) -> Path:
    """Write a sharded checkpoint's model as one ordinary weights-only checkpoint file at `out`
    (loadable by any surge run, or by `torch.load(weights_only=True)`)."""
    ckpt = load_checkpoint(path)
    state: dict[str, Any] = {k: ckpt[k] for k in ("epoch", "global_step", "hyper_parameters") if k in ckpt}
    state["state_dict"] = model_weights(ckpt, path)
    return save_atomic(state, out)
