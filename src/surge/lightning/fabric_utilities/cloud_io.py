"""`lightning.fabric.utilities.cloud_io`: files by path or URL through fsspec; `_load` and
`_atomic_save`, which scripts import as `pl_load`/`pl_save`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

import torch


def get_filesystem(path: str | Path, **kwargs: Any) -> Any:
    """The fsspec filesystem that serves `path` (local, `s3://`, `memory://`, ...)."""
    from fsspec.core import url_to_fs  # type: ignore[import-untyped]

    return url_to_fs(str(path), **kwargs)[0]


def _load(path_or_url: IO | str | Path, map_location: Any = None, weights_only: bool | None = None) -> Any:
    """`torch.load` from a file object, an `http(s)` URL (`weights_only` defaults to False there)
    or any path fsspec opens; `weights_only=None` is torch's default."""
    if not isinstance(path_or_url, str | Path):
        return torch.load(path_or_url, map_location=map_location, weights_only=weights_only)
    if str(path_or_url).startswith("http"):
        return torch.hub.load_state_dict_from_url(
            str(path_or_url), map_location=map_location, weights_only=bool(weights_only)
        )
    with get_filesystem(path_or_url).open(path_or_url, "rb") as f:
        return torch.load(f, map_location=map_location, weights_only=weights_only)


def _atomic_save(checkpoint: Any, filepath: str | Path) -> None:
    """`torch.save` into memory, then written in one fsspec transaction (no half-written file)."""
    from fsspec.core import url_to_fs

    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    fs, path = url_to_fs(str(filepath))
    with fs.transaction, fs.open(path, "wb") as f:
        f.write(buffer.getvalue())


__all__ = ["get_filesystem"]
