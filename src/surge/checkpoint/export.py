"""Portable weights: a checkpoint's bare model weights as a `.safetensors` file (no pickle, no surge).

The file loads anywhere with `safetensors.torch.load_file(path)` and then
`plain_module.load_state_dict(weights, strict=True)`: keys carry no `module.`/`_orig_mod.`
wrapper prefixes, every tensor is contiguous and owns its memory (tied weights are written once
per name), and nothing but tensors is stored.

`module="model"` exports one submodule: its keys without the `model.` prefix, as that submodule's
own `state_dict()` names them, so a Hugging Face model kept as `self.model` loads with
`from_pretrained` (the file saved as `model.safetensors` beside its `config.json`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import CheckpointError, SurgeTypeError, bad_value, install_hint
from . import load_checkpoint
from .model_state import bare_state_dict, clean_state_dict
from .shard_files import is_sharded

Source = str | os.PathLike | Mapping[str, Any] | torch.nn.Module


def export_safetensors(ckpt_or_state: Source, path: str | os.PathLike, module: str | None = None) -> Path:
    """Write the bare model weights of `ckpt_or_state` to `path` (a `.safetensors` file).

    `ckpt_or_state` is a surge checkpoint file (read with the safe, checksum-verified loader), a
    loaded checkpoint dict (its `"state_dict"` is used), a plain state dict, or a module.
    `module`: the dotted name of one submodule (e.g. `"model"` or `"model.bert"`) to export alone,
    its keys named as its own `state_dict()` names them. Returns the path written.
    """
    save_file = _safetensors_save_file()
    path = Path(path)
    if isinstance(ckpt_or_state, str | os.PathLike) and _same_file(Path(ckpt_or_state), path):
        raise bad_value(
            "export_safetensors(path) (--to)",
            str(path),
            f"a file other than the checkpoint {ckpt_or_state} itself, which writing there would destroy",
        )
    tensors = portable_tensors(submodule_weights(weights_of(ckpt_or_state), module))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` resolve to one file (links and hard links included)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def weights_of(source: Source) -> dict[str, Any]:
    """The model state dict inside `source`, with wrapper prefixes removed."""
    if isinstance(source, torch.nn.Module):
        return bare_state_dict(source)
    if isinstance(source, str | os.PathLike):
        ckpt = load_checkpoint(source)
        if not is_sharded(ckpt) and not isinstance(ckpt.get("state_dict"), Mapping):
            raise CheckpointError(f"checkpoint {source} has no 'state_dict' (model weights) to export")
        from .sharded import model_weights

        return model_weights(ckpt, Path(source))  # FSDP: the shards consolidated, verified first
    if isinstance(source, Mapping):
        inner = source.get("state_dict")
        return clean_state_dict(inner if isinstance(inner, Mapping) else source)
    raise SurgeTypeError(
        f"export_safetensors(ckpt_or_state={type(source).__name__}) is not valid: pass a checkpoint "
        "path, a checkpoint dict, a state dict or an nn.Module."
    )


def submodule_weights(state: Mapping[str, Any], module: str | None) -> Mapping[str, Any]:
    """The entries of `state` under the submodule `module`, without its prefix (all of them: None)."""
    if module is None:
        return state
    name = module.strip(".")
    prefix = name + "."
    inner = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
    if not name or not inner:
        roots = sorted({key.split(".")[0] for key in state if "." in key})
        raise bad_value(
            "module (surge export --module)",
            module,
            f"the dotted name of a submodule that holds weights, e.g. one of {roots}",
        )
    return inner


def portable_tensors(state: Mapping[str, Any]) -> dict[str, Tensor]:
    """CPU, contiguous, detached tensors, none sharing memory with another (safetensors refuses that)."""
    others = sorted(k for k, v in state.items() if not isinstance(v, Tensor))
    if others:
        raise SurgeTypeError(
            f"the state dict holds values that are not tensors ({others}); safetensors stores tensors only."
        )
    out: dict[str, Tensor] = {}
    seen: set[tuple[torch.device, int]] = set()
    for key, value in state.items():
        t = value.detach().cpu().contiguous()
        storage = (t.device, t.untyped_storage().data_ptr())
        whole = t.storage_offset() == 0 and t.nbytes == t.untyped_storage().nbytes()
        if storage in seen or not whole:
            t = t.clone()  # a tied weight or a view of a larger buffer: give it memory of its own
        seen.add((t.device, t.untyped_storage().data_ptr()))
        out[key] = t
    return out


def _safetensors_save_file() -> Any:
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise ImportError(
            f"exporting to safetensors needs the safetensors package: {install_hint('export')}"
        ) from None
    return save_file
