"""Exact rollbacks on two gloo processes: `python rollback_script.py ROOT OUT`.

A bad batch on rank 1 only (a NaN loss, or a finite loss with a NaN gradient) at a window's last
batch, an epoch's last batch and the fit's last batch, with an epoch StepLR, SWA and an epoch
ReduceLROnPlateau (and an EMA callback): both ranks agree at the judgment, roll back together, and equal the run
that never saw either rank's skipped batches. Rank zero writes {case: differences} to OUT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: rollback_workload

import rollback_workload as w  # noqa: E402

# a window's last batch (NaN gradient), an epoch's last (SWA, EMA), the fit's last (ReduceLROnPlateau)
CASES = [("step", "grad", 0, 3), ("swa", "nan", 0, 5), ("plateau", "nan", 1, 5)]


def main(root: Path, out: Path) -> None:
    report, zero = {}, False
    for sched, kind, epoch, j in CASES:
        name = f"{sched}-{kind}-{epoch}-{j}"
        a, ta = w.bad_run(root / name, sched, kind, epoch, j, world=2, rank=1)
        b, tb = w.reference(root / f"{name}-ref", sched, epoch, j, world=2)
        (guard,) = [cb for cb in ta.callbacks if type(cb).__name__ == "SpikeGuard"]
        report[name] = (guard.rollbacks, w.differences(w.state(a, ta), w.state(b, tb)))
        zero = ta.is_global_zero
    if zero:
        torch.save(report, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
