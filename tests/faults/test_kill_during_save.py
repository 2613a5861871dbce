"""kill -9 while a checkpoint is being written: the previous checkpoint always survives intact.

20 trials in all, split between a writer with and without DataLoader workers, killed by pid or
(as a job runner does) with its whole process group.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from preempt_script import group_processes

from surge.checkpoint import load_checkpoint, remove_stale_temporaries, save_atomic

SRC = Path(__file__).resolve().parents[2] / "src"
WRITER = """
import sys, torch
from torch.utils.data import DataLoader
from surge.checkpoint import save_atomic
from surge.signals import guard_workers
path, workers = sys.argv[1], int(sys.argv[2])
loader = DataLoader(range(64), batch_size=8, num_workers=workers, persistent_workers=workers > 0)
guard_workers(loader)  # as the Trainer prepares it
i = 1
while True:
    for _ in loader:
        save_atomic({"i": i, "w": torch.full((2_000_000,), float(i))}, path)  # 8 MB a file
        i += 1
"""


def _wait_for_a_write(target: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    before, deadline = target.stat().st_ino, time.monotonic() + timeout
    while target.stat().st_ino == before:  # each save renames a new file over the target
        assert proc.poll() is None and time.monotonic() < deadline, "the writer never wrote"
        time.sleep(0.01)


def _wait_until_gone(groups: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while left := [p for g in groups for p in group_processes(g)]:
        assert time.monotonic() < deadline, f"processes left behind: {left}"
        time.sleep(0.1)


@pytest.mark.parametrize(("workers", "to_group"), [(0, False), (0, True), (2, False), (2, True)])
def test_kill_9_at_random_moments_never_leaves_a_torn_checkpoint(tmp_path, workers, to_group):
    target = tmp_path / "last.ckpt"
    save_atomic({"i": 0, "w": torch.zeros(2_000_000)}, target)
    rng = random.Random(workers + 10 * to_group)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    seen, groups = set(), []
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(workers)], env=env,
                                start_new_session=True)  # fmt: skip
        groups.append(proc.pid)
        _wait_for_a_write(target, proc)  # past the imports (however loaded the machine)
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere inside a later write
        (os.killpg if to_group else os.kill)(proc.pid, signal.SIGKILL)
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
    # Killed with the group, workers die at once; orphaned by a kill of the pid alone, they notice
    # their parent is gone (torch checks every 5 s) and end by themselves.
    _wait_until_gone(groups, timeout=0.5 if to_group else 15)
