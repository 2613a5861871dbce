"""What a rank writes when a job hangs: every thread's Python stack and torch's flight recorder.

Read by a person after the fact, so plain text: `<dir>/rank{r}.txt`, with the flight recorder's
full trace beside it (`rank{r}.flight.json`) when the backend keeps one; written without following
a link planted under either name (`safe_files.write_replacing`).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import torch

from ..safe_files import write_replacing


@functools.cache
def _library() -> tuple[str, ...]:
    """The folders of Python's, torch's and surge's own code (not the user's), resolved once, when a
    hang is first written (sysconfig's paths take a module import and a scan to compute)."""
    import sysconfig

    return tuple(
        str(Path(p).resolve())
        for p in {
            sysconfig.get_paths()["stdlib"],
            os.path.dirname(torch.__file__),
            os.path.dirname(os.path.dirname(__file__)),
        }
    )


def torch_position() -> dict[str, int] | None:
    """The default process group's last enqueued and completed collective, as numbered by torch's
    flight recorder (every collective counts, DDP's gradient allreduce too); None without one."""
    raw = _flight_recorder(collectives=False)
    if raw is None:
        return None
    try:
        status = json.loads(raw)["pg_status"]["0"]
        return {
            "enqueued": int(status["last_enqueued_collective"]),
            "completed": int(status["last_completed_collective"]),
        }
    except (KeyError, ValueError, TypeError):
        return None


def overdue_collective(now_ns: int | None = None) -> bool | None:
    """Whether the default process group's latest collective has waited its own timeout (torch's
    flight recorder: when it was made, and its timeout); None without a recorder to tell."""
    raw = _flight_recorder(collectives=True)
    if raw is None:
        return None
    try:
        entries = [e for e in json.loads(raw).get("entries", []) if str(e.get("pg_id", 0)) == "0"]
        if not entries:
            return False
        latest = max(entries, key=lambda e: int(e["collective_seq_id"]))
        waited_ns = (time.time_ns() if now_ns is None else now_ns) - int(latest["time_created_ns"])
        return waited_ns >= int(latest["timeout_ms"]) * 1_000_000
    except (KeyError, ValueError, TypeError, AttributeError):
        return None


def _flight_recorder(collectives: bool) -> str | None:
    """torch's flight recorder as JSON (a private torch API, so: None whenever it is missing or fails)."""
    from torch.distributed import is_initialized

    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json", None)  # torch >= 2.6 or so
    if dump is None or not is_initialized():
        return None
    try:
        raw = dump(collectives, False)
    except Exception:  # noqa: BLE001 - a backend without a recorder, or one that is shutting down
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def where(frame: FrameType | None) -> tuple[str, str]:
    """(innermost frame, innermost frame of the user's own code) as 'function (file:line)'."""
    inner = user = ""
    while frame is not None:
        text = f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"
        inner = inner or text
        name = frame.f_code.co_filename  # "<string>", "<frozen ...>": generated code, not the user's
        if not user and not name.startswith("<") and not str(Path(name).resolve()).startswith(_library()):
            user = text
        if inner and user:
            break
        frame = frame.f_back
    return inner, user


def main_frame() -> FrameType | None:
    """The main thread's current frame (read from another thread)."""
    return sys._current_frames().get(threading.main_thread().ident or -1)


def write_dump(
    directory: Path, rank: int, world_size: int, why: str, waited: TracebackType | None = None
) -> Path:
    """Write this rank's stacks (and flight recorder) to `directory`; returns the text file.

    `waited`: the traceback of the collective that timed out, when this rank is the one that waited
    (its main thread has left that call by now, so its current stack would not show it)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        f"surge hang dump: rank {rank} of {world_size}, pid {os.getpid()} on {socket.gethostname()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"why: {why}",
        "",
    ]
    if waited is not None:
        lines += [
            "== where the main thread waited (the collective that timed out) ==",
            *_lines(traceback.format_tb(waited)),
            "",
        ]
    lines.append("== Python stacks of every thread ==")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident() and waited is None:
            continue  # the dumping thread itself (the heartbeat): its stack is this function
        lines += [f"Thread {names.get(ident, '?')} ({ident}):", *_lines(traceback.format_stack(frame)), ""]
    lines += _recorder_lines(directory, rank)
    return write_replacing(directory / f"rank{rank}.txt", ("\n".join(lines) + "\n").encode())


def _lines(formatted: list[str]) -> list[str]:
    return [line for chunk in formatted for line in chunk.rstrip("\n").split("\n")]


def _recorder_lines(directory: Path, rank: int) -> list[str]:
    from torch.distributed import get_backend, is_initialized

    backend = get_backend() if is_initialized() else "none"
    raw = _flight_recorder(collectives=True)
    if raw is None:
        return [
            f"== flight recorder: none ({backend} backend; this torch keeps no flight recorder for it, or "
            "it is off: TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE) =="
        ]
    write_replacing(directory / f"rank{rank}.flight.json", raw.encode())
    trace: dict[str, Any] = json.loads(raw)
    out = [
        f"== flight recorder ({backend}): the last collectives of this rank (all: rank{rank}.flight.json) =="
    ]
    out += [f"process group {pg}: {status}" for pg, status in trace.get("pg_status", {}).items()]
    for entry in trace.get("entries", [])[-12:]:
        out.append(
            f"#{entry.get('collective_seq_id')} {entry.get('profiling_name')} sizes={entry.get('input_sizes')} "
            f"state={entry.get('state')} retired={entry.get('retired')}"
        )
    return out
