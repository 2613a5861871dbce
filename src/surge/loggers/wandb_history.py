"""What a W&B run already holds, read from the transaction logs (`run-<id>.wandb`) its earlier
processes left under the `wandb/` folder: a resume must not write those rows again.

The file is a LevelDB-style log: a 7-byte header (`:W&B`, magic 0xBEE1, version), then 32 KiB blocks
of chunks (`<crc32, length, type>` + data; type 1 whole, 2 first, 3 middle, 4 last) that join into
`wandb_internal_pb2.Record` messages. A log cut short by a killed process is read up to its last
whole record.
"""

from __future__ import annotations

import glob
import json
import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_KEY = "trainer/global_step"
_BLOCK = 32 * 1024
_HEADER = struct.Struct("<4sHB")
_CHUNK = struct.Struct("<IHB")


@dataclass
class Held:
    """The latest `trainer/global_step` logged for each metric, and the next free W&B row (`_step`)."""

    upto: dict[str, int] = field(default_factory=dict)
    next_row: int = 0
    segments: int = 0


def records(path: Path) -> Iterator[Any]:
    """The `Record` messages of one transaction log, in order."""
    data = path.read_bytes()
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[:2] != (b":W&B", 0xBEE1):
        return
    yield from _records(data, _HEADER.size)


def _records(data: bytes, pos: int, base: int = 0) -> Iterator[Any]:
    """The records whose chunks start at or after `pos` (a block's start, or the header's end) of
    `data`, the file's bytes from offset `base` on (a block's start)."""
    from wandb.proto import wandb_internal_pb2 as pb

    parts: bytes | None = None  # None: the chunk before `pos` may have begun a record; skip to a new one
    while pos + _CHUNK.size <= len(data):
        left = _BLOCK - (base + pos) % _BLOCK
        if left < _CHUNK.size:  # a block's tail too short for a chunk is padding
            pos += left
            continue
        _, length, kind = _CHUNK.unpack_from(data, pos)
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if kind == 0 or len(chunk) < length:
            return
        pos += _CHUNK.size + length
        parts = chunk if kind in (1, 2) else None if parts is None else parts + chunk
        if kind in (1, 4) and parts is not None:
            record = pb.Record()  # type: ignore[attr-defined]
            record.ParseFromString(parts)
            yield record


def finished(path: Path) -> bool:
    """Whether the log ends with the run's exit record (wandb writes it after `finish()` returns);
    only its last two blocks are read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            base = max(0, (size // _BLOCK - 1) * _BLOCK)
            f.seek(base)
            data = f.read()
    except OSError:
        return False
    last = deque(_records(data, _HEADER.size if base == 0 else 0, base), maxlen=1)
    return bool(last) and last[0].WhichOneof("record_type") == "exit"


def history_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The history rows of one transaction log, each as `{name: value}` (W&B's own keys included)."""
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            yield {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }


def segments(wandb_dir: str | Path, run_id: str) -> list[Path]:
    """The transaction logs of run `run_id` under `wandb_dir` (one per process that logged to it),
    oldest first: `[offline-]run-<time>-<id>[-<n>]/run-<id>.wandb` (wandb adds `-<n>` when a folder
    of the same second exists)."""
    found: dict[Path, tuple[str, int]] = {}
    safe = glob.escape(run_id)
    for path in Path(wandb_dir).glob(f"*run-*-{safe}*/run-{safe}.wandb"):
        stamp, _, rest = path.parent.name.removeprefix("offline-").removeprefix("run-").partition("-")
        suffix = rest[len(run_id) :]
        if rest.startswith(run_id) and (suffix == "" or (suffix[:1] == "-" and suffix[1:].isdigit())):
            found[path.resolve()] = (stamp, int(suffix[1:] or 0))
    return sorted(found, key=found.__getitem__)


def held(wandb_dir: Path, run_id: str, skip: Path | None = None) -> Held:
    """What the earlier processes of run `run_id` logged (`skip`: this process's own log)."""
    out = Held()
    for path in segments(wandb_dir, run_id):
        if skip is not None and path == skip.resolve():
            continue
        out.segments += 1
        for row in history_rows(path):
            out.next_row = max(out.next_row, int(row.get("_step", -1)) + 1)
            step = row.get(STEP_KEY)
            if step is None:
                continue
            for key in row:
                if not key.startswith("_") and key != STEP_KEY:
                    out.upto[key] = max(out.upto.get(key, -1), int(step))
    return out
