"""Restarts without recompiling: with `compile=...`, torch's compiled artifacts (its cache
artifact API, torch >= 2.7) are written beside the checkpoints and loaded by a resumed run before
its first compiled step, so that run's compilation is served from them instead of redone.

Dynamo still traces the Python code in the resumed run (that is not cached); what is saved is
the expensive part: the generated and built kernels (inductor's FX graph cache, AOTAutograd's
cache). On an older torch nothing is refused: nothing is saved, and the log says so once.

The artifacts hold generated code that torch runs, so loading them is trusting their writer: a
checkpoint must not be able to run code. They are written with an HMAC-SHA256 under a key only
this user can read (`~/.cache/surge/compile-cache.key`, made on first use), and a resumed run loads
only a file whose tag matches: artifacts from another user or machine, tampered, truncated or
corrupt ones are left alone with a note, and the run compiles as a cold one would.

A cache is a speed-up: any I/O error on the key or the artifacts (a read-only or missing home, a
full disk) is said once and costs a compile, never the run. Every file is written without following
a link and read only when it is a regular file of bounded size (`safe_files.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..rank_zero import info
from ..safe_files import read_bounded, write_replacing
from .compiling import CompileSpec, graphs_compiled

if TYPE_CHECKING:
    from ..profiler.goodput import GoodputLedger

ARTIFACTS = "compile-cache.bin"  # beside the checkpoint files
TAG = 32  # bytes of HMAC-SHA256 before the artifacts


MAX_ARTIFACTS = 4 << 30  # bytes: a larger file beside a checkpoint is not read


def signing_key() -> bytes:
    """This user's key for the artifacts' tags (created, readable by the owner only, on first use);
    `OSError` when it can be neither read nor made."""
    home = Path(os.environ.get("SURGE_CACHE_DIR") or Path.home() / ".cache" / "surge")
    path = home / "compile-cache.key"
    try:
        key = read_bounded(path, 64)
    except FileNotFoundError:
        home.mkdir(parents=True, exist_ok=True)
        write_replacing(path, secrets.token_bytes(32), mode=0o600)  # two processes at once: one key wins
        key = read_bounded(path, 64)
    if len(key) != 32:
        raise OSError(f"{path} is not a key surge made (32 bytes); delete it to make a new one")
    return key


def signed(payload: bytes) -> bytes:
    return hmac.new(signing_key(), payload, hashlib.sha256).digest() + payload


def verified(data: bytes) -> bytes | None:
    """The artifacts, if `data`'s tag is this user's; else None."""
    tag, payload = data[:TAG], data[TAG:]
    expected = hmac.new(signing_key(), payload, hashlib.sha256).digest()
    return payload if len(tag) == TAG and hmac.compare_digest(tag, expected) else None


def cache_hits() -> int:
    """Graphs served from torch's caches in this process so far (inductor's FX graphs, AOTAutograd's)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"]) + int(
        counters["aot_autograd"]["autograd_cache_hit"]
    )


class CompileCache:
    """Saves torch's compile artifacts beside each checkpoint written after new graphs were
    compiled (rank zero), and loads them from beside the checkpoint a fit resumes from."""

    def __init__(self, spec: CompileSpec | None) -> None:
        self.active = spec is not None
        self.loaded_from: Path | None = None
        self._saved_graphs = -1  # graphs compiled in this process when the artifacts were last written
        self._said = False
        self._failed = False  # an I/O error was said (once)
        self._hits_at_load = 0

    def _api(self) -> bool:
        if hasattr(torch.compiler, "save_cache_artifacts"):
            return True
        if not self._said:
            self._said = True
            info(
                f"compile=: torch {torch.__version__} has no torch.compiler.save_cache_artifacts (2.7+): "
                "the compiled artifacts are not saved, a resumed run compiles again"
            )
        return False

    def save_beside(self, checkpoint: str | Path, is_global_zero: bool) -> Path | None:
        """After a checkpoint write: the artifacts into its folder, when graphs were compiled since
        the last write (written atomically: a resumed run reads them whole or not at all)."""
        if not (self.active and is_global_zero and self._api()):
            return None
        graphs = graphs_compiled()
        if graphs == 0 or graphs == self._saved_graphs:
            return None
        target = Path(checkpoint).parent / ARTIFACTS
        try:
            saved = torch.compiler.save_cache_artifacts()
            if saved is None:
                return None
            write_replacing(target, signed(saved[0]))
        except Exception as err:  # noqa: BLE001 - a cache that cannot be written costs a compile, not the run
            self._note(
                f"the compiled artifacts could not be saved beside {target} ({err}); a resumed run compiles again"
            )
            return None
        self._saved_graphs = graphs
        return target

    def load_beside(self, checkpoint: str | Path | None, ledger: GoodputLedger | None = None) -> bool:
        """Before the resumed fit's first step: the artifacts beside `checkpoint` (None: not resuming),
        if any; `ledger` is told, to report the compile time saved (or that they served nothing)."""
        if checkpoint is None or not self.active:
            return False
        source = Path(checkpoint).parent / ARTIFACTS
        if not (os.path.lexists(source) and self._api()):
            return False
        try:
            payload = verified(read_bounded(source, MAX_ARTIFACTS))
        except OSError as err:
            self._note(f"not loading {source} ({err}); this run compiles afresh")
            return False
        if payload is None:
            info(
                f"compile=: not loading {source}: it was not written by this user on this machine (or "
                "it was changed since), and compiled artifacts run code; this run compiles afresh"
            )
            return False
        try:
            torch.compiler.load_cache_artifacts(payload)
        except Exception as err:  # noqa: BLE001 - a cache that fails to load costs a compile, not the run
            info(f"compile=: the artifacts in {source} did not load ({err}); this run compiles afresh")
            return False
        self.loaded_from, self._hits_at_load = source, cache_hits()
        info(
            f"compile=: read the compiled artifacts saved beside the checkpoint ({source}) into torch's "
            "caches; the goodput table says whether they served this run's graphs"
        )
        if ledger is not None:
            ledger.compiled_from(source, self.served)
        return True

    def served(self) -> int:
        """Graphs this run took from the loaded artifacts (0: they were another model's, or other settings')."""
        return cache_hits() - self._hits_at_load

    def _note(self, text: str) -> None:
        if not self._failed:
            self._failed = True
            info(f"compile=: {text}")
