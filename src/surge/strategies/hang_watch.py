"""Each rank's heartbeat in the job's store, so a hang can name the rank that stopped.

A daemon thread writes, about once a second, where this rank is: the last collective torch
numbered (its flight recorder counts every one, DDP's gradient allreduce too), the last of surge's
own collectives, and the main thread's current function. The training loop pays nothing for it:
surge's collectives set two attributes, nothing is written to the store from the main thread.

When a rank's collective times out, it asks every rank (a key in the store) to dump its stacks; the
live ranks' heartbeat threads do, even when their main thread is stuck in Python code. A rank whose
heartbeat has stopped too (SIGSTOP, a frozen host, a process holding the GIL in native code) writes
nothing; the rank that timed out says so. See `hang_report.py` for how the ranks are compared.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import torch.distributed as dist

from .hang_dump import main_frame, torch_position, where, write_dump

INTERVAL_S = 1.0  # between heartbeats
STORE_TIMEOUT_S = 2.0  # a store that does not answer in this long counts as gone (its host stopped)


_running: HangWatch | None = None  # one heartbeat per process: a later Trainer's replaces an earlier's


def group_store_address(addr: str, port: int) -> tuple[str, int]:
    """Where the live process group's store listens: a group started by an earlier Trainer in this
    process lives on, and this Trainer's environment may name another port (the default 29500).
    (`addr`, `port`) when the group's store is not a TCPStore."""
    store: Any = dist.distributed_c10d._get_default_store()
    while store is not None and not isinstance(store, dist.TCPStore):
        store = getattr(store, "underlying_store", None)
    return (store.host, store.port) if store is not None else (addr, port)


class HangWatch:
    """This rank's heartbeat thread and position; `dump_all` when a collective timed out."""

    def __init__(self, rank: int, world_size: int, addr: str, port: int, directory: Path | None) -> None:
        self.rank, self.world_size, self.directory = rank, world_size, directory
        self.addr, self.port = addr, port
        self.seq, self.collective, self.in_flight = 0, "", False  # surge's own collectives, main thread only
        self.dumped: Path | None = None
        self.dump_error: str | None = None  # why this rank's stacks could not be written
        self._stop = threading.Event()
        self._prefix = f"surge/hang/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self._beats = 0
        self._seen: tuple[int, float] = (0, 0.0)  # surge's collective in flight at a beat, and since when
        self._lock = threading.Lock()  # the main thread and the heartbeat may both be asked to dump
        self._thread: threading.Thread | None = None

    def dump_into(self, directory: Path | None) -> None:
        """Where this rank's stacks go when a hang is reported (the run directory's hang/)."""
        self.directory = directory

    # -- the main thread's side (surge's collectives) ----------------------------------------
    def enter(self, name: str) -> None:
        """The main thread enters one of surge's collectives (left by `leave` only when it returns)."""
        self.seq += 1
        self.collective, self.in_flight = name, True

    def leave(self) -> None:
        self.in_flight = False

    # -- the heartbeat thread ---------------------------------------------------------------
    def start(self) -> None:
        global _running
        if _running is not None:
            _running.stop()
        _running = self
        self._thread = threading.Thread(target=self._run, name="surge-heartbeat", daemon=True)
        self._thread.start()
        # Ended before the interpreter is: a daemon thread still inside a store call at shutdown
        # can abort the process as it comes back.
        atexit.register(self.stop)

    def stop(self) -> None:
        global _running
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # Every store call of the thread ends within its timeout; a loaded machine can stretch a
            # connect's retries past one timeout, and a daemon thread still inside one when the
            # interpreter finalizes aborts the process ("terminate called"): wait for it to return.
            self._thread.join(4 * STORE_TIMEOUT_S + 2)
        self._thread = None
        atexit.unregister(self.stop)
        if _running is self:
            _running = None

    def connect(self) -> dist.Store:
        """A client of the job's store (a connection of its own, with a short timeout)."""
        store = dist.TCPStore(
            self.addr, self.port, is_master=False, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S),
        )  # fmt: skip
        return dist.PrefixStore(self._prefix, store)

    def _run(self) -> None:
        if self._stop.is_set():
            return
        try:
            store = self.connect()
        except Exception:  # noqa: BLE001 - no store to beat into: hangs are reported without peers' help
            return
        while not self._stop.is_set():
            try:
                store.set(f"beat/{self.rank}", json.dumps(self.beat()))
                if self.dumped is None and store.check(["request"]):
                    why = store.get("request").decode()
                    self.dump(f"asked by {why}")
                    store.set(f"dumped/{self.rank}", str(self.dumped))
            except Exception:  # noqa: BLE001 - the store went away (the job is ending): stop beating
                return
            self._stop.wait(INTERVAL_S)

    def waited_s(self) -> float:
        """How long surge's collective now in flight has waited, as the heartbeat saw it (to within a
        beat; 0 when none is in flight)."""
        seq, since = self._seen
        return time.monotonic() - since if self.in_flight and seq == self.seq else 0.0

    def beat(self) -> dict[str, Any]:
        if self.in_flight and self._seen[0] != self.seq:
            self._seen = (self.seq, time.monotonic())
        self._beats += 1
        inner, user = where(main_frame())
        return {
            "n": self._beats, "t": time.time(), "pid": os.getpid(), "torch": torch_position(),
            "surge": [self.seq, self.collective, self.in_flight], "where": inner, "user": user,
        }  # fmt: skip

    def dump(self, why: str, waited: TracebackType | None = None) -> Path | None:
        """Write this rank's stacks once (the first reason wins); None without a run directory."""
        with self._lock:
            if self.dumped is None and self.directory is not None and self.dump_error is None:
                try:
                    self.dumped = write_dump(self.directory, self.rank, self.world_size, why, waited)
                except OSError as err:  # a record, never the run's end: said in the hang's note
                    self.dump_error = str(err)
            return self.dumped
