"""A lease on a checkpoint folder: one live run holds it, and it lapses by itself when that run is
gone, on whatever machine it ran.

The holder writes its machine (host name and boot), its pid, a refresh count and the time, and the
process's ticker thread (`ticker.py`) rewrites the file every `REFRESH_S` (nothing per training step). Another run that
finds the file judges it:

- its own process (a fit after a fit): taken;
- a process of this machine (same host name and boot) that is gone: stale at once;
- a process of this machine that lives and refreshed within `TTL_S`: live, refused at once;
- refreshed more than `TTL_S` ago (by this machine's clock): stale at once;
- otherwise (another machine, a restarted pod, a requeue on another node): watched for up to
  `TTL_S` on this process's own clock: a refresh seen means live (refused), none means the holder is
  gone (its lease is taken). A run killed -9 anywhere is thus taken over within `TTL_S`, with no
  person deleting anything; two live runs are still refused.

Staleness by the holder's time assumes the machines' clocks agree to well within `TTL_S`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..rank_zero import info, warn
from ..safe_files import read_bounded, write_replacing
from .ticker import TICKER, Job

REFRESH_S = 5.0  # how often a holder rewrites its lease
TTL_S = 30.0  # a lease not refreshed for this long belongs to a run that is gone
_MAX_BYTES = 4096


def machine() -> tuple[str, str]:
    """This machine as a lease names it: its host name and its boot (a reboot or another node with the
    same host name, a pod restarted elsewhere, is another machine)."""
    return socket.gethostname(), _boot()


@functools.cache
def _boot() -> str:
    """This boot's id, read once: it cannot change while the process lives."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Holder:
    """What a lease file says: who holds it, and its latest refresh."""

    host: str
    boot: str
    pid: int
    count: int
    renewed: float  # Unix time of the latest refresh

    def __str__(self) -> str:
        return f"{self.host} {self.pid}"

    def to_bytes(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        """The holder, or None for a file that is not a lease (stale: taken over)."""
        try:
            raw = json.loads(data)
            holder = cls(
                str(raw["host"]), str(raw["boot"]), int(raw["pid"]), int(raw["count"]), float(raw["renewed"])
            )
        except (ValueError, TypeError, KeyError):
            return None
        return holder if math.isfinite(holder.renewed) else None


class LeaseHeld(Exception):  # noqa: N818 - a state, not a failure of the lease's own
    """Another live run holds the lease."""

    def __init__(self, holder: Holder) -> None:
        super().__init__(str(holder))
        self.holder = holder


class RunLease:
    """The lease file `path`, taken with `acquire` and kept fresh until `release` (or exit).

    `clock`/`sleep` (this process's monotonic time), `wall` (Unix time) and `me` (the machine) are
    injectable, so a test decides what a watch sees without racing a real clock."""

    def __init__(
        self,
        path: Path,
        ttl: float | None = None,
        refresh: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        wall: Callable[[], float] = time.time,
        me: tuple[str, str] | None = None,
    ) -> None:
        self.path = path
        self.ttl = TTL_S if ttl is None else ttl
        self.refresh = REFRESH_S if refresh is None else refresh
        self._clock, self._wall = clock, wall
        self._sleep = sleep if sleep is not None else lambda seconds: wait(seconds)
        self.host, self.boot = me if me is not None else machine()
        self.pid = os.getpid()
        self._count = 0
        self._held = False
        self._refreshing: Job | None = None  # `renew` every `refresh` seconds while held
        self._said = False
        self._budget: float | None = None
        self._watching: tuple[Holder, float] | None = None  # the lease being watched, since when

    # -- taking and giving back ----------------------------------------------------------------
    def acquire(self, budget: float | None = None) -> bool:
        """Take the lease (True), or raise `LeaseHeld` naming the live run that holds it (`OSError`
        when the file cannot be made). With a `budget` (seconds), a watch of another machine's lease
        that has not concluded by then returns False: call again to go on watching (distributed
        ranks meanwhile agree to wait, each within their collectives' timeout)."""
        self.release()  # taken again (a fit after a fit): one refresh at a time
        self._budget = budget
        for _ in range(8):  # a stale lease is removed, then made again exclusively (a racing run wins once)
            if self._create():
                self._held = True
                atexit.register(self.release)
                self._start()
                return True
            holder = self.read()
            verdict = "gone" if holder is None and not self.path.exists() else self._judge(holder)
            if verdict == "pending":
                return False
            if verdict == "live":
                assert holder is not None
                raise LeaseHeld(holder)
            if verdict == "stale":
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
        raise OSError(f"could not take the lease {self.path}: it changed hands repeatedly")

    def release(self) -> None:
        """Give the lease back (a no-op when not held)."""
        if not self._held:
            return
        self._held = False
        atexit.unregister(self.release)
        if self._refreshing is not None:
            self._refreshing.cancel()  # (a refresh under way finishes first: none follows)
            self._refreshing = None
        holder = self.read()
        if holder is not None and self._mine(holder):
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def read(self) -> Holder | None:
        """The lease's holder as the file says (None: no file, or not a lease)."""
        try:
            return Holder.parse(read_bounded(self.path, _MAX_BYTES))
        except OSError:
            return None

    # -- judging another's lease ---------------------------------------------------------------
    def _judge(self, holder: Holder | None) -> str:
        """'stale' (take it over), 'live' (refuse) or 'again' (it changed: look again)."""
        if holder is None:
            return "stale"  # unreadable: not a lease surge wrote (a lease is replaced whole)
        if self._mine(holder):
            return "stale"  # this process's own: a fit after a fit
        age = self._wall() - holder.renewed
        if (holder.host, holder.boot) == (self.host, self.boot):
            if not _alive(holder.pid):
                return "stale"
            if age < self.ttl:
                return "live"
        if age > self.ttl:
            return "stale"
        return self._watch(holder)

    def _watch(self, first: Holder) -> str:
        """Watch another machine's fresh lease for up to `ttl` in all (over several `acquire` calls
        when each has a budget): refreshed means live; 'pending' when this call's budget ran out."""
        if self._watching is not None and _same(self._watching[0], first):
            if self._watching[0].count != first.count:  # refreshed between two calls
                self._watching = None
                return "live"
        else:
            info(
                f"the checkpoint folder's lease {str(self.path)!r} is held by process {first} (another "
                f"machine); waiting up to {self.ttl:g} s for it to be refreshed (a live run) or to lapse"
            )
            self._watching = (first, self._clock())
        first, start = self._watching
        end = self._clock() + (self._budget if self._budget is not None else math.inf)
        while (left := self.ttl - (self._clock() - start)) > 0:
            if self._clock() >= end:
                return "pending"
            self._sleep(min(self.refresh, left, end - self._clock()))
            now = self.read()
            if now is None or not _same(now, first):
                self._watching = None
                return "again"  # given back, or taken by another run meanwhile
            if now.count != first.count:
                self._watching = None
                return "live"
        self._watching = None
        return "stale"

    def _mine(self, holder: Holder) -> bool:
        return (holder.host, holder.boot, holder.pid) == (self.host, self.boot, self.pid)

    # -- holding -----------------------------------------------------------------------------
    def _create(self) -> bool:
        """Make the lease file, whole, only where none exists (False: one does): written to a
        temporary, then hard-linked to its name, which fails if the name is taken (a reader never
        sees a half-written lease)."""
        # (a name checkpoint.remove_stale_temporaries knows: one a killed process left is cleaned)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(self._record())
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: created exclusively, then written
            return self._create_in_place()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return True

    def _create_in_place(self) -> bool:
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(self._record())
        return True

    def _record(self) -> bytes:
        self._count += 1
        return Holder(self.host, self.boot, self.pid, self._count, self._wall()).to_bytes()

    def _start(self) -> None:
        self._refreshing = TICKER.every(self.refresh, self.renew)

    def renew(self) -> bool:
        """Refresh the lease now (the ticker thread's work); False, said once, when it is no longer
        this run's or cannot be written."""
        holder = self.read()
        if holder is not None and not self._mine(holder):
            self._say(
                f"it was taken over by process {holder} (this run went {self.ttl:g} s without refreshing it)"
            )
            return False
        try:
            write_replacing(self.path, self._record())
        except OSError as err:
            self._say(f"it cannot be refreshed ({err})")
            return False
        return True

    def _say(self, why: str) -> None:
        if not self._said:
            self._said = True
            warn(f"this run's lease on its checkpoint folder ({str(self.path)!r}) is lost: {why}.")


def _same(a: Holder, b: Holder) -> bool:
    return (a.host, a.boot, a.pid) == (b.host, b.boot, b.pid)


def wait(seconds: float) -> None:
    """A watch's pause between two looks at a lease."""
    time.sleep(seconds)


def _alive(pid: int) -> bool:
    """Whether process `pid` of this machine exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    except OSError:
        return False
    return True
