"""kill -9 while a checkpoint is being written: the previous checkpoint always survives intact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from surge.checkpoint import load_checkpoint, remove_stale_temporaries, save_atomic

SRC = Path(__file__).resolve().parents[2] / "src"
WRITER = """
import sys, torch
from surge.checkpoint import save_atomic
path = sys.argv[1]
i = 1
while True:
    save_atomic({"i": i, "w": torch.full((2_000_000,), float(i))}, path)  # 8 MB a file
    i += 1
"""


def test_kill_9_at_random_moments_never_leaves_a_torn_checkpoint(tmp_path):
    target = tmp_path / "last.ckpt"
    save_atomic({"i": 0, "w": torch.zeros(2_000_000)}, target)
    rng = random.Random(0)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    seen = set()
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=env)
        time.sleep(rng.uniform(0.6, 1.6))  # past the imports, somewhere inside a write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        state = load_checkpoint(target)  # verified: digest and weights_only
        assert torch.equal(state["w"], torch.full((2_000_000,), float(state["i"])))
        seen.add(state["i"])
        leftovers = [p for p in tmp_path.iterdir() if p.name != "last.ckpt"]
        assert all(
            p.name.startswith(".last.ckpt.tmp-") for p in leftovers
        )  # beside the target, not in $TMPDIR
        remove_stale_temporaries(tmp_path)
        assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert len(seen) > 1  # the writer really was replacing the file between kills
