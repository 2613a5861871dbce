"""kill -9 while a checkpoint is being written: the previous checkpoint always survives intact.

20 trials in all, split between a writer with and without DataLoader workers, killed by pid or
(as a job runner does) with its whole process group.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from preempt_script import group_processes

import script_server
from surge.checkpoint import load_checkpoint, remove_stale_temporaries, save_atomic

SRC = Path(__file__).resolve().parents[2] / "src"
PRELOAD = [
    "torch",
    "surge",
]  # each writer is forked from a process that imported them (tests/harness/script_server.py)


def _start(tmp_path: Path, code: str, *args: str) -> script_server.Started:
    """`python -c CODE ARGS` in a session of its own, to be killed (by pid or with its group)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return script_server.start(sys.executable, ["-c", code, *args], cwd=tmp_path, env=env, preload=PRELOAD)


WRITER = """
import sys, torch
from torch.utils.data import DataLoader
from surge.checkpoint import save_atomic
from surge.launch.signals import WorkerSignals
path, workers = sys.argv[1], int(sys.argv[2])
loader = DataLoader(range(64), batch_size=8, num_workers=workers, persistent_workers=workers > 0,
                    worker_init_fn=WorkerSignals(None) if workers else None)  # as the loader's preparation does
i = 1
while True:
    for _ in loader:
        save_atomic({"i": i, "w": torch.full((2_000_000,), float(i))}, path)  # 8 MB a file
        i += 1
"""


def _wait_for_a_write(target: Path, proc: script_server.Started, timeout: float = 60) -> None:
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
    seen, groups = set(), []
    for _ in range(5):
        proc = _start(tmp_path, WRITER, str(target), str(workers))
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
    # Killed with the group, workers die at once; orphaned by a kill of the pid alone, they end the
    # moment their parent is gone (surge's parent watch, tests/faults/test_orphaned_workers.py).
    _wait_until_gone(groups, timeout=0.5 if to_group else 5)


ASYNC_WRITER = """
import sys, time, torch
from pathlib import Path
from surge.checkpoint import link_atomic
from surge.checkpoint.writer import AsyncCheckpointWriter
folder, writer, w = Path(sys.argv[1]), AsyncCheckpointWriter(), torch.zeros(1_000_000)
i = int(sys.argv[2])  # one past the last committed
while True:
    w.fill_(float(i))
    writer.save({"i": i, "w": w}, folder / f"step={i}.ckpt")  # as ModelCheckpoint: write, link last, delete
    writer.then(lambda i=i: link_atomic(folder / f"step={i}.ckpt", folder / "last.ckpt"))
    writer.then(lambda i=i: (folder / f"step={i - 1}.ckpt").unlink(missing_ok=True))
    while writer.pending:
        w.add_(0.5)  # training changes the weights in place while the snapshot is written
        time.sleep(0.001)
    i += 1
"""


@pytest.mark.parametrize("to_group", [False, True])
def test_kill_9_during_async_saves_leaves_the_previous_checkpoint_whole(tmp_path, to_group):
    for name in ("step=0.ckpt", "last.ckpt"):
        save_atomic({"i": 0, "w": torch.zeros(1_000_000)}, tmp_path / name)
    rng = random.Random(20 + to_group)
    seen, start = set(), 1
    for _ in range(3):
        proc = _start(tmp_path, ASYNC_WRITER, str(tmp_path), str(start))
        _wait_for_a_write(tmp_path / "last.ckpt", proc)
        time.sleep(rng.uniform(0.0, 0.4))
        (os.killpg if to_group else os.kill)(proc.pid, signal.SIGKILL)
        proc.wait()
        last = load_checkpoint(tmp_path / "last.ckpt")  # verified: a snapshot, not the moving weights
        assert torch.equal(last["w"], torch.full((1_000_000,), float(last["i"])))
        assert (tmp_path / f"step={last['i']}.ckpt").is_file()  # deleted only after a newer last
        for path in tmp_path.glob("step=*.ckpt"):
            state = load_checkpoint(path)
            assert path.name == f"step={state['i']}.ckpt" and state["w"][0] == state["i"]
        remove_stale_temporaries(tmp_path)
        assert all(not p.name.startswith(".") for p in tmp_path.iterdir())
        seen.add(last["i"])
        start = max(int(p.stem.split("=")[1]) for p in tmp_path.glob("step=*.ckpt")) + 1
    assert len(seen) > 1


FIT = """
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
import surge
class Net(surge.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(256, 2048)
    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).square().mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
surge.seed_everything(0)
ckpt = surge.callbacks.ModelCheckpoint(dirpath=sys.argv[1], every_n_train_steps=1, save_top_k=2, save_last=True)
trainer = surge.Trainer(max_steps=int(sys.argv[2]), accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[ckpt], async_checkpoint=True)
data = DataLoader(TensorDataset(torch.randn(64, 256)), batch_size=8)
trainer.fit(Net(), data, ckpt_path=sys.argv[3] if len(sys.argv) > 3 else None)
print("global_step", trainer.global_step)
"""


def test_kill_9_during_an_async_fit_resumes_from_the_last_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    proc = _start(tmp_path, FIT, str(folder), "100000")
    deadline = time.monotonic() + 60
    while not (folder / "last.ckpt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the fit never saved"
        time.sleep(0.01)
    _wait_for_a_write(folder / "last.ckpt", proc)
    time.sleep(random.Random(7).uniform(0.0, 0.3))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    step = load_checkpoint(folder / "last.ckpt")["global_step"]
    done = _start(tmp_path, FIT, str(folder), str(step + 3), "last")
    assert done.wait(timeout=120) == 0, done.stderr
    assert f"global_step {step + 3}" in done.stdout
