"""Two runs given the same checkpoint directory: a fit started while another live run holds it is
refused before any training (before: both wrote, and resumed from, one `last.ckpt`); a lock left by
a process that is gone is taken over; the directory is given back when the fit ends. In surge's own
API the lock (a lease, `surge.config.run_lease`) lives in the directory itself, `.surge-run.lock`,
while the fit runs: every machine that writes the directory sees it; after the fit the directory
holds only checkpoints. (The Lightning mode keeps it out of Lightning's folders:
tests/oracle/test_run_folders.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import Callback, ModelCheckpoint
from surge.config.run_lease import Holder, machine
from surge.config.run_records import LOCK_IN_DIRECTORY, lock_file
from surge.errors import MisconfigurationError

SRC = Path(__file__).resolve().parents[2] / "src"
HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import Callback, ModelCheckpoint

class Wait(Callback):
    def on_train_start(self, trainer, module):
        Path(sys.argv[2]).write_text("training")
        while Path(sys.argv[2]).read_text() != "go":
            time.sleep(0.05)

cb = ModelCheckpoint(dirpath=sys.argv[1], save_last=True)
fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb, Wait()]).fit(TinyModel(), *make_loaders())
"""


class Listing(Callback):
    """The directory's files and whether its lock is held, while training."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.seen = directory, []

    def on_train_epoch_end(self, trainer, module):
        self.seen.append(
            (sorted(p.name for p in self.directory.iterdir()), lock_file(self.directory, True).exists())
        )


def fit_into(directory: Path) -> tuple[TinyModel, list[int], Listing]:
    batches: list[int] = []

    class Counting(TinyModel):
        def on_train_batch_start(self, batch, batch_idx):
            batches.append(batch_idx)

    model = Counting()
    cb, listing = ModelCheckpoint(dirpath=directory, save_last=True), Listing(Path(directory))
    fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb, listing]).fit(model, *make_loaders())
    return model, batches, listing


def test_a_directory_a_live_run_holds_is_refused_before_training(tmp_path):
    directory, flag = tmp_path / "ckpts", tmp_path / "flag"
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tests)])}
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), str(flag), str(tests)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (flag.exists() and flag.read_text() == "training"):
            assert other.poll() is None and time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        with pytest.raises(MisconfigurationError, match=rf"another run .*process \S+ {other.pid}"):
            fit_into(directory)
        assert not (directory / "last.ckpt").exists()  # nothing of this run was written
        flag.write_text("go")
        assert other.wait(timeout=120) == 0
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert sorted(p.name for p in directory.iterdir()) == [
        "epoch=0-step=4.ckpt",
        "last.ckpt",
    ]  # lock given back
    _, batches, listing = fit_into(directory)  # free again: the next run goes ahead
    assert batches == [0, 1, 2, 3]
    assert listing.seen == [([LOCK_IN_DIRECTORY, "epoch=0-step=4.ckpt", "last.ckpt"], True)]  # held, in it
    assert not lock_file(directory, True).exists()


def test_a_lock_of_a_process_that_is_gone_is_taken_over(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    directory = tmp_path / "ckpts"
    directory.mkdir()
    host, boot = machine()
    lock_file(directory, True).write_bytes(Holder(host, boot, gone.pid, 1, time.time()).to_bytes())
    _, batches, _ = fit_into(directory)
    assert batches == [0, 1, 2, 3]
    assert not lock_file(directory, True).exists()


def test_fits_one_after_another_in_one_process_share_the_directory(tmp_path):
    fit_into(tmp_path)
    fit_into(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "epoch=0-step=4-v1.ckpt",
        "epoch=0-step=4.ckpt",
        "last-v1.ckpt",
        "last.ckpt",
    ]
