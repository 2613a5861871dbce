"""`SpikeGuard` on two gloo processes: `python spike_guard_script.py ROOT OUT`.

A spike on rank 0 only (rank 1's losses are normal): both ranks agree at the check and roll back
together, and the run equals the one that never saw either rank's batches 12..15. A NaN on rank 1
only under `on_nonfinite="rollback"`, likewise. A checkpoint written between the spike and the
check resumes exactly. Rank zero writes {case: differences} and the rollback counts to OUT.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: spike_workload

import spike_workload as w  # noqa: E402
from surge.callbacks import SpikeGuard  # noqa: E402


def main(root: Path, out: Path) -> None:
    report, counts = {}, {}
    clean = w.samples(2, {})
    guard = SpikeGuard(threshold=6, window=20)
    ckpt = root / "saved.ckpt"
    spiked = w.samples(2, {13: 30.0}, rank=0)
    a, ta = w.fit(root / "spiked", spiked, 2, callbacks=[guard, w.SaveAfter(ckpt, 14)])
    b, tb = w.fit(root / "reference", w.without(clean, 2, 12, 16), 2)
    report["spike_on_rank_0"], counts["spike_on_rank_0"] = w.differences(a, ta, b, tb), guard.rollbacks

    resumed_guard = SpikeGuard(threshold=6, window=20)
    r, tr = w.fit(root / "resumed", spiked, 2, callbacks=[resumed_guard], ckpt=ckpt)
    report["resumed"], counts["resumed"] = w.differences(a, ta, r, tr), resumed_guard.rollbacks

    n, tn = w.fit(root / "nan", w.samples(2, {5: math.nan}, rank=1), 2, on_nonfinite="rollback")
    c, tc = w.fit(root / "reference_nan", w.without(clean, 2, 4, 8), 2)
    (nan_guard,) = [cb for cb in tn.callbacks if isinstance(cb, SpikeGuard)]
    report["nan_on_rank_1"], counts["nan_on_rank_1"] = w.differences(n, tn, c, tc), nan_guard.rollbacks
    if ta.is_global_zero:
        torch.save({"report": report, "rollbacks": counts, "steps": ta.global_step}, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
