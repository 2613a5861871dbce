"""The resume-point property on two gloo processes: `python resume_points_script.py MODE ROOT OUT`.

MODE "points": the reference run writes a checkpoint at every kind of save point, then each one is
resumed in the same job; rank zero writes {save point: differences} and the reference to OUT.
MODE "sigterm": the run gets SIGTERM inside epoch 1 and exits 143 with its checkpoint.
MODE "resume": resume ROOT's SIGTERM checkpoint and write its differences from OUT's reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: resume_points

import resume_points as rp  # noqa: E402

BATCHES = 7  # per rank: 42 samples in batches of 6


def main(mode: str, root: Path, out: Path) -> None:
    if mode == "sigterm":
        rp.fit(root / "signalled", 2, seed=11, callbacks=[rp.SaveAt(root, sigterm_at=(1, 4))])
        raise AssertionError("SIGTERM did not stop the run")
    model, trainer = rp.uninterrupted(root, 2, BATCHES)
    if mode == "resume":
        (ckpt,) = (root / "signalled").rglob("last.ckpt")
        points = {"sigterm": ckpt}
    else:
        points = {**rp.checkpoints(root), "after_fit": rp.after_fit(root, 2)}
    report = {}
    for name, ckpt in points.items():
        resumed, t = rp.resume(root / f"resumed-{name.replace(':', '_')}", 2, ckpt)
        report[name] = rp.differences(model, trainer, resumed, t) + rp.log_problems(trainer, t, ckpt)
    if trainer.is_global_zero:
        torch.save({"report": report, "steps": trainer.global_step}, out)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
