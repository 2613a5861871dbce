"""The stateful loaders of tests/test_stateful_data.py on two gloo processes: `python stateful_data_script.py ROOT`.

Resumed at the save point `DDP_POINTS` names for each kind; each rank writes {kind: {save point: differences}} (its own samples, the shared weights) to ROOT/report{rank}.pt.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: test_stateful_data

import test_stateful_data as sd  # noqa: E402


def main(root: Path) -> None:
    sd.WORKERS = "forkserver"  # forking a rank can deadlock while a previous loader's feeder thread exits
    # imported once by the forkserver, not by each worker of each epoch (resume_loaders_script.py)
    multiprocessing.set_forkserver_preload(["torch", "surge", "test_stateful_data"])
    report = {kind: sd.resume_problems(root / kind, kind, 2, sd.DDP_POINTS[kind]) for kind in sd.DDP_KINDS}
    torch.save(
        report, root / f"report{os.environ.get('RANK', '0')}.pt"
    )  # surge's launcher sets RANK on rank 1


if __name__ == "__main__":
    main(Path(sys.argv[1]))
