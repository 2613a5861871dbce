"""A DataLoader worker never outlives its trainer, whenever the trainer is killed.

torch's workers check their parent by comparing `os.getppid()` with the value read once the
worker's init ran; a trainer killed while its workers were still starting (a slow `worker_init_fn`,
a loaded machine) is recorded as pid 1 and never missed, and those workers used to wait forever.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from preempt_script import group_processes

import script_server

SRC = Path(__file__).resolve().parents[2] / "src"
FIT = """
import os, sys, time, torch
from pathlib import Path
from torch.utils.data import DataLoader, TensorDataset
import surge

def slow_start(worker_id):
    Path(sys.argv[1], str(os.getpid())).touch()  # the test kills the trainer now
    time.sleep(5)

class Net(surge.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).square().mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
    def train_dataloader(self):
        data = TensorDataset(torch.randn(64, 4))
        return DataLoader(data, batch_size=8, num_workers=2, worker_init_fn=slow_start,
                          multiprocessing_context=sys.argv[2])

if __name__ == "__main__":
    surge.Trainer(max_epochs=1, logger=False, enable_checkpointing=False).fit(Net())
"""


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_workers_of_a_trainer_killed_while_they_start_end_with_it(tmp_path, start_method):
    script, started = tmp_path / "fit.py", tmp_path / "started"
    script.write_text(FIT)
    started.mkdir()
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    trainer = script_server.start(sys.executable, [str(script), str(started), start_method], cwd=tmp_path,
                                  env=env, preload=["torch", "surge"])  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list(started.iterdir())) < 2:  # both workers are inside their init
        assert trainer.poll() is None and time.monotonic() < deadline, trainer.stderr
        time.sleep(0.02)
    os.kill(trainer.pid, signal.SIGKILL)  # the trainer alone, as an OOM killer does
    trainer.wait()
    workers = [int(p.name) for p in started.iterdir()]
    # They end with the trainer, still inside their 5 s init; torch's own check would come after it
    # (and, with fork, never: it reads the parent once the init is over, pid 1 by then).
    deadline = time.monotonic() + 3
    while alive := [w for w in workers if str(w) in _pids(group_processes(trainer.pid))]:
        if time.monotonic() > deadline:
            for w in alive:
                os.kill(w, signal.SIGKILL)
            pytest.fail(f"workers {alive} outlived their trainer")
        time.sleep(0.1)


def _pids(processes: list[str]) -> set[str]:
    return {line.split()[0] for line in processes}
