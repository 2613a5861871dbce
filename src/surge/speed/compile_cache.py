"""Restarts without recompiling: with `compile=...`, torch's compiled artifacts (its cache
artifact API, torch >= 2.7) are written beside the checkpoints and loaded by a resumed run before
its first compiled step, so that run's compilation is served from them instead of redone.

Dynamo still traces the Python code in the resumed run (that is not cached); what is saved is
the expensive part: the generated and built kernels (inductor's FX graph cache, AOTAutograd's
cache). On an older torch nothing is refused: nothing is saved, and the log says so once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..rank_zero import info
from .compiling import CompileSpec, graphs_compiled

if TYPE_CHECKING:
    from ..profiler.goodput import GoodputLedger

ARTIFACTS = "compile-cache.bin"  # beside the checkpoint files


class CompileCache:
    """Saves torch's compile artifacts beside each checkpoint written after new graphs were
    compiled (rank zero), and loads them from beside the checkpoint a fit resumes from."""

    def __init__(self, spec: CompileSpec | None) -> None:
        self.active = spec is not None
        self.loaded_from: Path | None = None
        self._saved_graphs = -1  # graphs compiled in this process when the artifacts were last written
        self._said = False

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
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return None
        target = Path(checkpoint).parent / ARTIFACTS
        tmp = target.with_name(f".{ARTIFACTS}.{os.getpid()}.tmp")
        tmp.write_bytes(saved[0])
        os.replace(tmp, target)
        self._saved_graphs = graphs
        return target

    def load_beside(self, checkpoint: str | Path | None, ledger: GoodputLedger | None = None) -> bool:
        """Before the resumed fit's first step: the artifacts beside `checkpoint` (None: not resuming),
        if any; `ledger` is told, to report the compile time saved."""
        if checkpoint is None or not self.active:
            return False
        source = Path(checkpoint).parent / ARTIFACTS
        if not (source.is_file() and self._api()):
            return False
        torch.compiler.load_cache_artifacts(source.read_bytes())
        self.loaded_from = source
        info(f"compile=: loaded the compiled artifacts saved beside the checkpoint ({source})")
        if ledger is not None:
            ledger.compiled_from(source)
        return True
