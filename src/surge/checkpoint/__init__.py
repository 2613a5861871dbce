"""Checkpoint files: written atomically, loaded without running code, verified by a checksum.

A checkpoint is an ordinary `torch.save` file (so `torch.load(path, weights_only=True)` reads it)
whose dict carries `"surge"` (the format version), plus one zip record that torch ignores: the
digest of the whole dict. Either mark makes a file a surge checkpoint that must verify.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import time
import uuid
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import Tensor

from ..errors import CheckpointError

# Model-weight helpers live in `model_state`; these names stay importable from here too.

FORMAT_VERSION = 2
# Where a checkpoint's digest lives: a zip record of its own beside torch's `data.pkl`, holding the
# digest of the whole loaded dict ("surge" included). The pickle's "surge" key and this record each
# mark a surge file, so damage that hides one still leaves the other, and the load refuses.
_DIGEST_RECORD = ".data/surge_digest"
_DIGEST_PREFIX = "blake2b-160:"
_DIGEST_MAX = 64  # bytes: a record any larger is damaged (and never read into memory)
_DIGEST_RE = re.compile(rb"^blake2b-160:([0-9a-f]{40})$")
_TMP_RE = re.compile(r"^\..+\.tmp-(\d+)-[0-9a-f]{8}$")


__all__ = ["is_surge_checkpoint", "load_checkpoint", "save_atomic"]  # the public API


def content_digest(obj: Any, version: int = FORMAT_VERSION) -> str:
    """A digest of every tensor's bytes and every plain value, in a fixed order.

    Version 1 (the digest older checkpoints carry) leaves out tensors' type, `requires_grad`,
    strides and storage offset.
    """
    h = hashlib.blake2b(digest_size=20)
    _feed(h, obj, version)
    return h.hexdigest()


_PLAIN = (int, float, str, bool, type(None))  # fed as their repr: the common leaves, told apart first


def _feed(h: Any, obj: Any, version: int) -> None:
    kind = type(obj)
    if kind in _PLAIN:  # (the same bytes as the last branch, without the checks before it)
        h.update(repr(obj).encode())
    elif isinstance(obj, Tensor):
        _feed_tensor(h, obj, version)
    elif kind is dict or isinstance(obj, Mapping):
        h.update(b"{")
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _feed(h, obj[key], version)
        h.update(b"}")
    elif isinstance(obj, list | tuple):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for item in obj:
            _feed(h, item, version)
        h.update(b"]")
    elif isinstance(obj, set | frozenset) and version >= 2:
        h.update(f"{type(obj).__name__}{sorted(map(repr, obj))}".encode())  # repr order is per process
    else:
        h.update(repr(obj).encode())


def _feed_tensor(h: Any, obj: Tensor, version: int) -> None:
    """A tensor's dtype, shape (and with version 2 its type, `requires_grad`, strides and storage
    offset), then its values' bytes in row-major order, read in place where they are contiguous."""
    t = obj.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    extra = ""
    if version >= 2:  # how it was stored too, not only its values
        extra = f"{type(obj).__name__}{obj.requires_grad}{obj.stride()}{obj.storage_offset()}"
    h.update(f"T{t.dtype}{tuple(t.shape)}{extra}".encode())
    if t.numel():
        flat = t.reshape(-1)
        if flat.stride(-1) != 1:  # one element with any stride is "contiguous"
            flat = flat.clone(memory_format=torch.contiguous_format)
        h.update(flat.view(torch.uint8).numpy())  # (the buffer itself: no copy of a large tensor)


def save_atomic(state: dict[str, Any], path: str | Path) -> Path:
    """Write `state` to `path` so that a crash leaves either the old file or the new one, never half.

    The temporary file lives beside the target (same filesystem, so `os.replace` is atomic).
    The digest of the whole state goes into a zip record of its own (see `_DIGEST_RECORD`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = dict(state)
    meta = {k: v for k, v in state.get("surge", {}).items() if k != "digest"}
    state["surge"] = {**meta, "format_version": FORMAT_VERSION}
    record = f"{_DIGEST_PREFIX}{content_digest(state)}".encode()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w+b") as f:
            torch.save(state, f)
            f.flush()
            _append_record(f, record)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        cause = _os_error(err)
        if cause is not None:
            raise CheckpointError(
                f"could not write checkpoint {path}: {cause}; the previous checkpoint is intact"
            ) from err
        raise
    return path


def _append_record(f: Any, record: bytes) -> None:
    """Add the digest record to the zip torch.save just wrote (torch ignores records it does not know)."""
    f.seek(0)
    with zipfile.ZipFile(f, "a") as archive:
        folder = archive.namelist()[0].split("/", 1)[0]
        archive.writestr(f"{folder}/{_DIGEST_RECORD}", record)


def _os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`: torch's zip writer reports a full disk as a RuntimeError raised
    while it handles the OSError, so the disk's own error is in the chain, not on top."""
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, OSError):
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def link_atomic(source: Path, target: Path, symbolic: bool = False) -> None:
    """Make `target` a committed copy of `source` (a hard link where possible, no extra I/O), or with
    `symbolic` a relative symlink to it (Lightning's `save_last="link"`), replacing `target` at once."""
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        try:
            if symbolic:
                os.symlink(os.path.relpath(source, target.parent), tmp)
            else:
                os.link(source, tmp)
        except OSError:
            import shutil

            shutil.copyfile(source, tmp)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temporaries(directory: str | Path, older_than: float = 0.0) -> list[Path]:
    """Delete temporary files that a killed writer left behind (its process no longer exists).

    `older_than` (seconds) also spares files modified more recently: a writer on another host
    sharing the filesystem has a pid this host cannot see.
    """
    return sweep_folder(directory, older_than)[0]


def sweep_folder(directory: str | Path, older_than: float = 0.0) -> tuple[list[Path], list[Path]]:
    """`remove_stale_temporaries(directory, older_than)`, and the folder's subdirectories, from one
    listing (its entries' own types: no stat per entry). A folder that is not there has neither."""
    try:
        with os.scandir(directory) as entries:
            listing = list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    removed: list[Path] = []
    subdirectories: list[Path] = []
    now = time.time()
    for entry in listing:
        match = _TMP_RE.match(entry.name)
        if match is not None:
            if _remove_if_stale(entry, int(match.group(1)), now - older_than if older_than else None):
                removed.append(Path(entry.path))
        elif is_directory(entry):
            subdirectories.append(Path(entry.path))
    return removed, subdirectories


def is_directory(entry: os.DirEntry[str]) -> bool:
    """Whether a listing's entry is a directory (through a symlink); False for one that cannot be
    told (a symlink loop): a sweep passes it over rather than stop."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _remove_if_stale(entry: os.DirEntry[str], pid: int, untouched_since: float | None) -> bool:
    """Delete a temporary whose writer is dead (and, with a time, untouched since it); True if it was."""
    if process_alive(pid):
        return False
    try:
        if not entry.is_file() or (untouched_since is not None and entry.stat().st_mtime > untouched_since):
            return False
        os.unlink(entry.path)
    except OSError:  # gone meanwhile, or not ours to remove (another user's): left as it is
        return False
    return True


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (this one included): a writer whose temporaries must be left alone."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (a pid past a C int: no process has it)
        return False
    except PermissionError:
        return True
    return True


def load_checkpoint(path: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """Read a checkpoint safely: `weights_only=True` (no code runs), on CPU, checksum verified.

    A plain `torch.save` dict (no surge marks at all, e.g. foreign weights) loads unverified; a
    file with either of surge's marks must carry a valid digest. Any damage is a CheckpointError.
    """
    path = Path(path)
    _check_readable(path)
    record = _digest_record(path)
    state = _torch_load(path)
    if verify:
        _verify(path, state, record)
    return state


def is_surge_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a checkpoint file surge wrote (its marks are there; the digest is not checked)."""
    path = Path(path)
    try:
        _check_readable(path)  # never a torch.load while TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set
        if _digest_record(path) is not None:
            return True
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return False
    return isinstance(state, dict) and _legacy_meta(state.get("surge"))


def _check_readable(path: Path) -> None:
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes): a write was interrupted; use an older one"
        )
    if os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") not in ("", "0"):
        raise CheckpointError(
            f"refusing to load {path}: TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set, which would let a checkpoint "
            "run code; unset it (surge always loads with weights_only=True)"
        )


def _digest_record(path: Path) -> bytes | None:
    """The digest record's bytes, None when the zip has none; an unreadable zip is a CheckpointError."""
    try:
        if not zipfile.is_zipfile(path):
            raise CheckpointError(
                f"refusing to load {path}: it is not in torch.save's format, so it is corrupt or another kind "
                f"of file, such as a plain pickle, which could run code ({path.stat().st_size} bytes)"
            )
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith(f"/{_DIGEST_RECORD}")]
            if len(names) > 1:
                raise CheckpointError(f"checkpoint {path} is corrupt: it has {len(names)} digest records")
            if names and archive.getinfo(names[0]).file_size > _DIGEST_MAX:
                raise CheckpointError(f"checkpoint {path} is corrupt: its digest record is damaged")
            return archive.read(names[0]) if names else None
    except CheckpointError:
        raise
    except Exception as err:
        raise _corrupt(path, err) from err


def _torch_load(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        name = _refused_global(err)
        if name is None:
            raise _corrupt(path, err) from err
        raise CheckpointError(
            f"refusing to load {path}: it names the global {name}, and objects other than tensors and plain "
            "containers could run code when loaded"
        ) from err
    except Exception as err:
        raise _corrupt(path, err) from err
    if not isinstance(state, dict):
        raise CheckpointError(
            f"checkpoint {path} holds a {type(state).__name__}, not a surge checkpoint dict"
        )
    return state


def _verify(path: Path, state: dict[str, Any], record: bytes | None) -> None:
    """Check the digest of a surge file; a file with a surge mark but no valid digest is refused."""
    meta = state.get("surge")
    try:
        if record is not None:
            match = _DIGEST_RE.match(record)
            if match is None:
                raise CheckpointError(f"checkpoint {path} is corrupt: its digest record is damaged")
            expected, actual = match.group(1).decode(), content_digest(state)
        elif _legacy_meta(meta):
            expected = meta["digest"]
            actual = content_digest({k: v for k, v in state.items() if k != "surge"}, version=1)
        elif "surge" in state or _looks_like_meta(state):
            raise CheckpointError(
                f"checkpoint {path} is corrupt: it is a surge checkpoint whose digest record is missing or "
                "damaged, so its checksum cannot be verified"
            )
        else:
            return  # a plain torch.save dict written without surge (e.g. foreign weights)
    except CheckpointError:
        raise
    except Exception as err:  # a damaged tensor (e.g. an impossible stride) fails while hashing
        raise _corrupt(path, err) from err
    if actual != expected:
        raise CheckpointError(
            f"checkpoint {path} failed its checksum: its content changed after it was written (corruption)"
        )


def _legacy_meta(meta: Any) -> TypeGuard[Mapping[str, Any]]:
    """The "surge" entry of a format-1 file, whose digest (of everything else) lives in the pickle."""
    return (
        isinstance(meta, Mapping) and meta.get("format_version") == 1 and isinstance(meta.get("digest"), str)
    )


def _looks_like_meta(state: dict[str, Any]) -> bool:
    """A surge entry under a damaged key name (format 1 kept the digest only there)."""
    return any(isinstance(v, Mapping) and ("digest" in v or "format_version" in v) for v in state.values())


def _corrupt(path: Path, err: BaseException) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} is truncated or corrupt and cannot be read: {type(err).__name__}: "
        f"{_without_advice(str(err))}"
    )


def _refused_global(err: Exception) -> str | None:
    """The global torch's safe unpickler refused (e.g. `posix.system`), if that is why it failed."""
    match = re.search(r"GLOBAL:? ([\w.]+)", str(err))
    return match.group(1) if match else None


def _without_advice(text: str) -> str:
    """torch's error text without its advice to load with weights_only=False (surge never does)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and "weights_only" not in line]
    return " ".join(lines)[:300]
