"""Lightning's checkpoint IO (`lightning.pytorch.plugins.io`) on surge's checkpoint writers.

`TorchCheckpointIO` is surge's writer (temporary file, fsync, digest record, atomic rename; reads
verify the digest); `AsyncCheckpointIO` is surge's background writer. A `CheckpointIO` subclass of
your own is called as Lightning calls it: its `save_checkpoint(checkpoint, path)` writes each
checkpoint (in the background under `AsyncCheckpointIO(yours)`), its `load_checkpoint(path)` reads
one to resume, its `remove_checkpoint(path)` deletes one top-k drops. What it writes is its own:
surge adds no digest and no atomic rename to it (a store of yours keeps its own guarantees).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from ...arguments.plugins import Plugins
from ...checkpoint import load_checkpoint, save_atomic
from ...checkpoint.writer import AsyncCheckpointWriter, CheckpointWriter
from ...errors import MisconfigurationError

KIND = "CheckpointIO"


class CheckpointIO(ABC):
    """Lightning's base: subclass it to write checkpoints somewhere else (another store, a format)."""

    plugin_kind = KIND

    @abstractmethod
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Write `checkpoint` to `path`."""

    @abstractmethod
    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read the checkpoint at `path`."""

    @abstractmethod
    def remove_checkpoint(self, path: Any) -> None:
        """Delete the checkpoint at `path`."""

    def teardown(self) -> None:  # noqa: B027 - optional, as Lightning's
        """Release what the plugin holds."""

    def surge_plugin(self) -> Plugins:
        return Plugins(checkpoint_writer=UserCheckpointWriter(self), kinds=(KIND,))


class TorchCheckpointIO(CheckpointIO):
    """`torch.save` files, written and read by surge's own writer (atomic, digest verified)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(
                "`Trainer.save_checkpoint(..., storage_options=...)` with `storage_options` arg is not supported "
                f"for `{type(self).__name__}`. Please implement your custom `CheckpointIO` to define how you'd "
                "like to use `storage_options`."
            )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_atomic(checkpoint, path)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if not Path(path).exists():
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return load_checkpoint(path)

    def remove_checkpoint(self, path: Any) -> None:
        CheckpointWriter().remove(path)

    def surge_plugin(self) -> Plugins:
        own = type(self).save_checkpoint is TorchCheckpointIO.save_checkpoint
        writer = CheckpointWriter() if own and _plain(self) else UserCheckpointWriter(self)
        return Plugins(checkpoint_writer=writer, kinds=(KIND,))


class AsyncCheckpointIO(CheckpointIO):
    """Writes in the background: surge's `AsyncCheckpointWriter` (a snapshot taken at once, one
    pending write); `checkpoint_io` (default TorchCheckpointIO) does the writing."""

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
            raise MisconfigurationError(
                f"AsyncCheckpointIO(checkpoint_io={checkpoint_io!r}): pass a CheckpointIO (or None: TorchCheckpointIO)."
            )
        self.checkpoint_io = checkpoint_io
        self._writer: AsyncUserCheckpointWriter | None = None

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Called directly: a snapshot now (later in-place changes do not reach the file), written in
        the background by `checkpoint_io`; `teardown()` waits for it, as Lightning's."""
        io = self.checkpoint_io or TorchCheckpointIO()
        if self._writer is None:
            self._writer = AsyncUserCheckpointWriter(io)
        self._writer.save(
            checkpoint, path, write=lambda state, target: io.save_checkpoint(state, target, storage_options)
        )

    def teardown(self) -> None:
        """Wait for the background write (its error raised here)."""
        if self._writer is not None:
            self._writer.wait()

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return (self.checkpoint_io or TorchCheckpointIO()).load_checkpoint(path, map_location, weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        (self.checkpoint_io or TorchCheckpointIO()).remove_checkpoint(path)

    def surge_plugin(self) -> Plugins:
        inner = self.checkpoint_io
        if inner is None or (type(inner) is TorchCheckpointIO):
            return Plugins(checkpoint_writer=AsyncCheckpointWriter(), kinds=(KIND,))
        return Plugins(checkpoint_writer=AsyncUserCheckpointWriter(inner), kinds=(KIND,))


class XLACheckpointIO(CheckpointIO):
    """Importable; refused when built."""

    __abstractmethods__: frozenset[str] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(
            "XLACheckpointIO is not supported by surge: surge has no TPU/XLA support; use TorchCheckpointIO."
        )


def _plain(io: CheckpointIO) -> bool:
    cls = type(io)
    return all(
        getattr(cls, m) is getattr(TorchCheckpointIO, m) for m in ("load_checkpoint", "remove_checkpoint")
    )


class _CallsPlugin:
    """A writer whose every file operation is a `CheckpointIO`'s (a copy too: written again)."""

    links = False

    def __init__(self, io: CheckpointIO, **kwargs: Any) -> None:
        super().__init__(write=lambda state, path: io.save_checkpoint(state, path), **kwargs)  # type: ignore[call-arg]
        self.io = io

    def load(self, path: str | Path) -> dict[str, Any]:
        return self.io.load_checkpoint(path)

    def remove(self, path: str | Path) -> None:
        self.io.remove_checkpoint(path)


class UserCheckpointWriter(_CallsPlugin, CheckpointWriter):
    """Writes at once through a `CheckpointIO`."""


class AsyncUserCheckpointWriter(_CallsPlugin, AsyncCheckpointWriter):
    """Snapshots at once, writes in the background through a `CheckpointIO`."""


__all__ = ["AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO", "XLACheckpointIO"]
