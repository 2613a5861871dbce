"""Which Trainer of the script a process stands at, so that ranks at different ones fail fast.

`Trainer(devices=N)` starts ranks 1..N-1 by running the script again from its start (torchrun and
SLURM start every rank that way too). A script that builds another Trainer first (a quick check, a
tuning run) then has its ranks at different Trainers: their collectives pair up wrongly and the run
hangs, or worse, trains on. Each rank names the user's line that built its Trainer and how many
Trainers that line built before; the ranks compare the names once, when a Trainer joins the group.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import FrameType

from ..errors import MisconfigurationError

_SURGE = str(Path(__file__).parents[1])  # the surge package, as its code objects name their files
_built: Counter[tuple[str, int]] = Counter()


def trainer_call_site() -> str:
    """`file:line (Trainer #k built there)` of the first frame outside surge: the user's Trainer.

    Called once per Trainer, at its construction (not in any loop)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SURGE):
        frame = frame.f_back
    if frame is None:
        return "?"
    where = (frame.f_code.co_filename, frame.f_lineno)
    _built[where] += 1
    return f"{where[0]}:{where[1]} (Trainer #{_built[where]} built on that line)"


def check_same_trainer(sites: list[str]) -> None:
    """Every rank's Trainer call site (index = rank) must be the same; else name them all."""
    if len(set(sites)) <= 1:
        return
    lines = "\n".join(f"  rank {rank}: {site}" for rank, site in enumerate(sites))
    raise MisconfigurationError(
        "the ranks are at different Trainers of the script:\n"
        f"{lines}\n"
        "Every rank runs the script from its start (Trainer(devices=N) starts ranks 1..N-1 by running it "
        "again, as torchrun and SLURM do), so each must reach the same Trainer calls in the same order. Put "
        "the multi-process Trainer first, or keep other runs out of the ranks (e.g. under "
        "`if __name__ == '__main__'` in a separate script, or after the multi-process fit)."
    )
