"""The loaders of tests/faults/test_resume_loaders.py on two gloo processes: `python resume_loaders_script.py ROOT OUT`.

For each kind of loader: the uninterrupted run, a run stopped inside an epoch (max_steps) and
saved after fit() returned, and its resume with the caller reseeded; rank zero writes
{kind: largest weight difference} to OUT.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))  # tests/faults/: test_resume_loaders

import test_resume_loaders as loaders  # noqa: E402


def main(root: Path, out: Path) -> None:
    loaders._WORKERS = "forkserver"
    # what the workers unpickle, imported once by the forkserver: otherwise each worker of each epoch
    # imports torch anew (1.4 s of CPU; Python 3.11's forkserver does not preload the main module)
    multiprocessing.set_forkserver_preload(["torch", "surge", "test_resume_loaders"])
    report = {}
    ddp = {"accelerator": "cpu", "devices": 2}
    for kind in loaders.KINDS:
        full, _ = loaders._fit(root / kind / "full", kind, seed=1, max_epochs=3, **ddp)
        _, first = loaders._fit(root / kind / "first", kind, seed=1, max_steps=5, **ddp)
        ckpt = root / kind / "stopped.ckpt"
        first.save_checkpoint(ckpt)
        resumed, t = loaders._fit(root / kind / "resumed", kind, seed=1234, ckpt=ckpt, max_epochs=3, **ddp)
        diffs = [(p - q).abs().max().item() for p, q in zip(full.parameters(), resumed.parameters())]
        same = all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters()))
        report[kind] = 0.0 if same else max(diffs)
    if t.is_global_zero:
        torch.save(report, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
