"""Who writes a checkpoint, and when: at once (the default) or in the background (`async_checkpoint=True`).

Both writers run the same steps in the same order: the file (`save_atomic`: temporary file, fsync,
digest record, atomic rename, directory fsync), then what must follow a durable file (the `last`
link, top-k deletions). The background writer first snapshots the state off the device, so the
training steps that follow cannot change what is written, and at most one write is pending.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import load_checkpoint, save_atomic

Write = Callable[[dict[str, Any], Path], Any]


class CheckpointWriter:
    """Writes at once, in the caller's thread. `write` writes one file (`save_atomic`; a wrapper
    around it can, e.g., time the writes). `load` and `remove` read and delete what it wrote
    (surge's verified read; the file and its shards)."""

    asynchronous = False
    links = True  # a copy of a written file may be a hard link (False: written again through `write`)

    def __init__(self, write: Write = save_atomic) -> None:
        self.write = write

    def load(self, path: str | Path) -> dict[str, Any]:
        """The checkpoint at `path`, its digest verified."""
        return load_checkpoint(path)

    def remove(self, path: str | Path) -> None:
        """Delete the checkpoint at `path` (with its shards if it has any)."""
        from .shard_files import remove_checkpoint

        remove_checkpoint(path)

    def save(self, state: dict[str, Any], path: str | Path, write: Write | None = None) -> None:
        """Write `state` to `path` with `write` (default: this writer's); durable once it returns."""
        (write or self.write)(state, Path(path))

    def then(self, action: Callable[[], None]) -> None:
        """Run `action` once the last write is durable (dropped if that write failed)."""
        action()

    def check(self) -> None:
        """Raise the error of a write that failed in the background (a plain attribute read)."""

    def wait(self) -> None:
        """Wait for the pending write and what follows it; raise its error."""


class AsyncCheckpointWriter(CheckpointWriter):
    """Snapshots in the caller's thread, writes in one background thread.

    One thread, not a process: `torch.save`, the file writes, fsync and blake2b all release the GIL
    while they work on large buffers, so the training thread keeps running; a process would have to
    receive the whole snapshot again (a second copy) and could not share pinned memory cheaply.
    """

    asynchronous = True

    def __init__(self, write: Write = save_atomic) -> None:
        super().__init__(write)
        self._thread: threading.Thread | None = None
        self._jobs: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._running = False
        self._error: BaseException | None = None
        self._pinned = PinnedBuffers()

    def save(self, state: dict[str, Any], path: str | Path, write: Write | None = None) -> None:
        self.wait()  # at most one pending write; its buffers are free again afterwards
        snapshot = snapshot_state(state, self._pinned)
        target, write = Path(path), write or self.write
        self._jobs = [lambda: write(snapshot, target)]
        self._running = True
        self._thread = threading.Thread(target=self._work, name="surge-checkpoint-writer", daemon=False)
        self._thread.start()

    def then(self, action: Callable[[], None]) -> None:
        with self._lock:
            if self._running:
                self._jobs.append(action)
                return
        if self._error is None:  # the write already finished well: its file is durable
            action()

    def check(self) -> None:
        if self._error is not None:
            self._raise()

    def wait(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        self.check()

    @property
    def pending(self) -> bool:
        """Whether a write (or what follows it) is still running."""
        return self._running

    def _raise(self) -> None:
        err, self._error = self._error, None
        assert err is not None
        raise err

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._running = False
                    return
                job = self._jobs.pop(0)
            try:
                job()
            except BaseException as err:  # raised in the training thread at its next check
                with self._lock:
                    self._jobs.clear()  # nothing that follows a failed write (no deletion) runs
                    self._error, self._running = err, False
                return


class PinnedBuffers:
    """Pinned host buffers for CUDA tensors, kept from one snapshot to the next (pinning is slow)."""

    def __init__(self) -> None:
        self._free: dict[tuple[Any, ...], list[Tensor]] = {}
        self._used: list[tuple[tuple[Any, ...], Tensor]] = []

    @property
    def in_use(self) -> bool:
        return bool(self._used)

    def release(self) -> None:
        for key, buf in self._used:
            self._free.setdefault(key, []).append(buf)
        self._used.clear()

    def take(self, like: Tensor) -> Tensor:
        key = (tuple(like.shape), like.stride(), like.dtype)
        free = self._free.get(key)
        buf = free.pop() if free else torch.empty_like(like, device="cpu", pin_memory=True)
        self._used.append((key, buf))
        return buf


def snapshot_state(state: Any, pinned: PinnedBuffers | None = None) -> Any:
    """A copy of `state` that later training cannot change: every tensor copied to the CPU (CUDA
    tensors into pinned buffers with non-blocking copies and one synchronisation at the end; CPU
    tensors cloned, since training updates them in place), every container rebuilt and other
    values deep-copied. A tensor appearing twice is copied once (tied weights stay tied)."""
    pinned = pinned if pinned is not None else PinnedBuffers()
    pinned.release()
    copies: dict[int, Tensor] = {}
    out = _copy(state, copies, pinned)
    if pinned.in_use:
        torch.cuda.synchronize()  # the one sync: the non-blocking copies have landed
    return out


def _copy(obj: Any, copies: dict[int, Tensor], pinned: PinnedBuffers) -> Any:
    if isinstance(obj, Tensor):
        if id(obj) not in copies:
            copies[id(obj)] = _copy_tensor(obj, pinned)
        return copies[id(obj)]
    if type(obj) is dict:
        return {k: _copy(v, copies, pinned) for k, v in obj.items()}
    if isinstance(obj, dict) and isinstance(obj, Mapping):  # OrderedDict: its type and `_metadata` kept
        out = copy.copy(obj)
        for key in out:
            out[key] = _copy(obj[key], copies, pinned)
        return out
    if type(obj) is list:
        return [_copy(v, copies, pinned) for v in obj]
    if type(obj) is tuple:
        return tuple(_copy(v, copies, pinned) for v in obj)
    return copy.deepcopy(obj)


def _copy_tensor(t: Tensor, pinned: PinnedBuffers) -> Tensor:
    if type(t).__name__ == "DTensor":  # a rank's shard (FSDP): its local tensor copied, its layout kept
        from torch.distributed.tensor import DTensor

        assert isinstance(t, DTensor)
        local = _copy_tensor(t.to_local(), pinned)
        return DTensor.from_local(
            local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()
        )
    source = t.detach()
    if source.device.type == "cuda":
        out = pinned.take(source)
        out.copy_(source, non_blocking=True)
    elif source.device.type == "cpu":
        out = source.clone()  # strides kept where dense
    else:
        out = source.to("cpu")  # e.g. mps: a blocking copy
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=t.requires_grad)
    return out.requires_grad_(t.requires_grad) if t.requires_grad else out
