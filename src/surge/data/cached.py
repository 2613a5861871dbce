"""`surge.data.cache`: run an expensive dataset once, then read its samples from memory-mapped files.

Layout of a cache directory: one `<field>.npy` per field of the sample (a tensor, or the items of
a tuple/list/dict of tensors, numbers or numpy arrays of fixed shape), stacked over the samples,
and `manifest.json` (length, structure, dtype and shape per field, fingerprint). The directory is
built beside the target under a temporary name and renamed into place only when complete, so a
killed build never leaves a directory that opens as a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..checkpoint import process_alive
from ..errors import CheckpointError, MisconfigurationError, bad_value
from ..launch.host import cpu_count
from ..rank_zero import global_rank, info

MANIFEST = "manifest.json"
FORMAT = 1


class CacheMismatchError(CheckpointError):
    """A cache on disk was built from a different dataset (and `rebuild=False` forbids rebuilding)."""


def cache(
    dataset: Dataset,
    path: str | os.PathLike,
    num_workers: int | None = None,
    progress: bool = True,
    rebuild: bool | str = "auto",
    key: str = "",
    verify: bool = False,
) -> CachedDataset:
    """The samples of `dataset`, computed once and stored under `path`; reads cost a memory copy.

    The cache matches the dataset when the fingerprint agrees: the dataset's class (module and
    qualname), its length and `key` (put anything that changes the samples here, e.g. a
    preprocessing version). That check never calls `__getitem__`; `verify=True` also recomputes
    three samples (first, middle, last) and compares their bytes, dtypes and shapes. On a mismatch,
    `rebuild="auto"` rebuilds, `rebuild=False` raises `CacheMismatchError`, `rebuild=True` always
    rebuilds. The build runs `__getitem__` once per index in `num_workers` DataLoader workers
    (default: the CPUs available) with a progress bar on rank zero.
    """
    if rebuild not in ("auto", True, False):
        raise bad_value("rebuild", rebuild, '"auto", True or False')
    path = Path(path)
    fingerprint = _fingerprint(dataset, key)
    if rebuild is not True and (path / MANIFEST).exists():
        problem = _mismatch(dataset, path, fingerprint, verify)
        if problem is None:
            return CachedDataset(path)
        if rebuild is False:
            raise CacheMismatchError(
                f"the cache at {path} does not match the dataset: {problem}; delete it or pass rebuild='auto'."
            )
        info(f"surge.data.cache: rebuilding {path} ({problem})")
    _build(dataset, path, fingerprint, num_workers, progress)
    return CachedDataset(path)


class CachedDataset(Dataset):
    """Samples read from a cache directory; the arrays are opened lazily in each process (workers too)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.manifest = json.loads((self.path / MANIFEST).read_text())
        self._arrays: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.manifest["length"]

    def __getitem__(self, index: int) -> Any:
        if self._arrays is None:
            self._arrays = {
                f["name"]: np.load(self.path / f["file"], mmap_mode="r") for f in self.manifest["fields"]
            }
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for a cache of {len(self)} samples")
        values = {f["name"]: _to_tensor(self._arrays[f["name"]][index], f) for f in self.manifest["fields"]}
        kind = self.manifest["kind"]
        if kind == "tensor":
            return values["0"]
        if kind == "dict":
            return values
        items = [values[str(i)] for i in range(len(values))]
        return tuple(items) if kind == "tuple" else items

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}  # workers open their own maps


# -- samples as fields -------------------------------------------------------------------------
def _flatten(sample: Any) -> tuple[str, dict[str, torch.Tensor]]:
    """(kind, {field name: tensor}) of one sample."""
    if isinstance(sample, dict):
        return "dict", {str(k): _as_tensor(v, k) for k, v in sample.items()}
    if isinstance(sample, tuple | list):
        kind = "tuple" if isinstance(sample, tuple) else "list"
        return kind, {str(i): _as_tensor(v, i) for i, v in enumerate(sample)}
    return "tensor", {"0": _as_tensor(sample, 0)}


def _as_tensor(value: Any, name: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray | np.generic | int | float | bool):
        return torch.as_tensor(value)
    raise MisconfigurationError(
        f"surge.data.cache stores tensors, numpy arrays and numbers; field {name!r} is a {type(value).__name__}."
    )


def _flat_sample(sample: Any) -> tuple[str, dict[str, torch.Tensor]]:
    return _flatten(sample)  # runs in the workers: they send tensors, not arbitrary objects


def _to_tensor(row: np.ndarray, field: dict[str, Any]) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(row))  # one copy: from the page cache into a writable tensor
    if field["dtype"] == "torch.bfloat16":
        tensor = tensor.view(torch.bfloat16)
    return tensor


def _numpy_view(t: torch.Tensor) -> np.ndarray:
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


# -- building ----------------------------------------------------------------------------------
def _build(dataset: Dataset, path: Path, fingerprint: str, num_workers: int | None, progress: bool) -> None:
    n = len(dataset)  # type: ignore[arg-type]
    if n == 0:
        raise MisconfigurationError(f"surge.data.cache: the dataset for {path} is empty.")
    workers = cpu_count() if num_workers is None else num_workers
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        loader = DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=_flat_sample)
        manifest = _write_fields(loader, tmp, n, progress and global_rank() == 0, path)
        manifest.update(format=FORMAT, length=n, fingerprint=fingerprint)
        _write_manifest(tmp, manifest)
        _swap_in(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_fields(loader: DataLoader, tmp: Path, n: int, progress: bool, path: Path) -> dict[str, Any]:
    from tqdm.auto import tqdm

    arrays: dict[str, np.memmap] = {}
    fields: list[dict[str, Any]] = []
    kind = None
    bar = tqdm(total=n, desc=f"caching {path.name}", disable=not progress, leave=False)
    for index, (sample_kind, values) in enumerate(loader):
        if kind is None:
            kind = sample_kind
            for name, t in values.items():
                file = f"{len(fields)}.npy"
                fields.append({"name": name, "file": file, "dtype": str(t.dtype), "shape": list(t.shape)})
                view = _numpy_view(t)
                arrays[name] = np.lib.format.open_memmap(
                    tmp / file, mode="w+", dtype=view.dtype, shape=(n, *view.shape)
                )
        _check_same(index, sample_kind, values, kind, fields)
        for name, t in values.items():
            arrays[name][index] = _numpy_view(t)
        bar.update()
    bar.close()
    for array in arrays.values():
        array.flush()
    return {"kind": kind, "fields": fields}


def _check_same(
    index: int, kind: str, values: dict[str, torch.Tensor], first_kind: str, fields: list
) -> None:
    expected = {f["name"]: (f["dtype"], f["shape"]) for f in fields}
    got = {name: (str(t.dtype), list(t.shape)) for name, t in values.items()}
    if kind != first_kind or got != expected:
        raise MisconfigurationError(
            f"surge.data.cache needs samples of one fixed structure, dtype and shape; sample {index} has "
            f"{got} ({kind}) where sample 0 had {expected} ({first_kind})."
        )


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    for file in folder.iterdir():
        with open(file, "rb+") as f:
            os.fsync(f.fileno())
    target = folder / MANIFEST
    with open(target, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename the finished directory into place; an old cache is moved aside first, then deleted."""
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        path.rename(old)
    os.rename(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale(path: Path) -> None:
    """Temporary directories left by killed builds (their process is gone)."""
    for stale in path.parent.glob(f".{path.name}.*-*"):
        parts = stale.name.rsplit("-", 2)
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if pid is not None and process_alive(pid):
            continue  # another process is building right now
        shutil.rmtree(stale, ignore_errors=True)


# -- matching ----------------------------------------------------------------------------------
def _fingerprint(dataset: Dataset, key: str) -> str:
    cls = type(dataset)
    text = f"{cls.__module__}.{cls.__qualname__}|{len(dataset)}|{key}"  # type: ignore[arg-type]
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sample_indices(n: int) -> list[int]:
    return sorted({0, n // 2, n - 1})


def _digest_of(samples: list[Any]) -> str:
    h = hashlib.sha256()
    for sample in samples:
        kind, values = _flatten(sample)
        h.update(kind.encode())
        for name, t in values.items():
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
            h.update(_numpy_view(t.contiguous()).tobytes())
    return h.hexdigest()[:16]


def _mismatch(dataset: Dataset, path: Path, fingerprint: str, verify: bool) -> str | None:
    """What differs between the cache at `path` and `dataset`, or None."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        return f"its manifest cannot be read ({err})"
    if manifest.get("format") != FORMAT:
        return f"format {manifest.get('format')} (this surge writes {FORMAT})"
    if manifest["length"] != len(dataset):  # type: ignore[arg-type]
        return f"length {manifest['length']} vs the dataset's {len(dataset)}"  # type: ignore[arg-type]
    if manifest["fingerprint"] != fingerprint:
        return "the fingerprint differs (another dataset class or key)"
    if verify:
        cached = CachedDataset(path)
        indices = _sample_indices(len(cached))
        if _digest_of([dataset[i] for i in indices]) != _digest_of([cached[i] for i in indices]):
            return "recomputed samples differ from the stored ones (values, dtypes or shapes)"
    return None
