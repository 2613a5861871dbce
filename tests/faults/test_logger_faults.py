"""Loggers under faults: a full disk, runs started together, temporaries of killed writers.

A logger that cannot write warns once and training goes on; nothing already written is lost.
"""

from __future__ import annotations

import csv
import multiprocessing
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import fast_trainer, fill_disk, small_filesystem
from surge.loggers import CSVLogger
from surge.rank_zero import SurgeWarning

SRC = Path(__file__).resolve().parents[2] / "src"
STEPS, FLUSH, FILL_AT, NEW_KEY_AT, FREE_AT = 150, 25, 30, 60, 90


class Wide(surge.Module):
    """Logs 10 wide metrics a step (a flush of 25 rows is more than a page), and "late" from step 60."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.lin(x).pow(2).mean()
        for i in range(10):
            self.log(f"metric_with_a_long_name_{i}", loss + i)
        if self.global_step >= NEW_KEY_AT:
            self.log("late", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class FillThenFree(surge.callbacks.Callback):
    """Fills the disk after step FILL_AT and frees it after FREE_AT, recording metrics.csv just before."""

    def __init__(self, filler: Path, metrics: Path | None) -> None:
        self.filler, self.metrics = filler, metrics
        self.while_full: list[dict[str, str]] | None = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == FILL_AT:
            fill_disk(self.filler)
        elif trainer.global_step == FREE_AT:
            if self.metrics is not None:
                self.while_full = read_rows(self.metrics)[1]
            self.filler.unlink()


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return list(reader.fieldnames or []), rows


def test_a_full_disk_while_logging_warns_once_and_loses_no_row(tmp_path):
    with small_filesystem(tmp_path / "disk", "128k") as disk:
        logger = CSVLogger(disk, flush_every=FLUSH)
        filler = FillThenFree(disk / "filler", logger.metrics_path)
        trainer = fast_trainer(max_steps=STEPS, logger=logger, log_every_n_steps=1, callbacks=[filler])
        loader = DataLoader(TensorDataset(torch.randn(STEPS, 4)), batch_size=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(Wide(), loader)
        assert trainer.global_step == STEPS  # the run went on through the full disk
        ours = [w for w in caught if issubclass(w.category, SurgeWarning) and "CSVLogger" in str(w.message)]
        assert len(ours) == 1, [str(w.message) for w in ours]
        assert "No space left" in str(ours[0].message) and "Training continues" in str(ours[0].message)
        # while the disk was full, metrics.csv kept its header and the rows written before the fill
        assert [int(r["step"]) for r in filler.while_full] == list(range(1, FILL_AT // FLUSH * FLUSH + 1))
        header, rows = read_rows(logger.metrics_path)
        rows = [r for r in rows if not r.get("goodput/wall_s")]  # goodput's row at the fit's end
        assert header == sorted(
            header, key=lambda n: (n.startswith("goodput/"), n)
        )  # surge's own columns last
        assert "late" in header and "metric_with_a_long_name_9" in header
        assert [int(r["step"]) for r in rows] == list(range(1, STEPS + 1))  # none lost, none twice
        assert all(None not in r and None not in r.values() for r in rows)  # every row whole
        assert all(r["late"] == "" for r in rows[: NEW_KEY_AT - 1])
        assert all(r["late"] for r in rows[NEW_KEY_AT:])
        # no temporary left (goodput.json: the fit's goodput heartbeat, docs/long_runs.md)
        assert sorted(p.name for p in Path(logger.log_dir).iterdir()) == ["goodput.json", "metrics.csv"]


def test_rows_a_failed_run_could_not_write_are_named_in_a_last_warning(tmp_path):
    with small_filesystem(tmp_path / "disk", "64k") as disk:
        logger = CSVLogger(disk, flush_every=1000)
        logger.log_metrics({"a": 1.0}, step=1)
        logger.save()
        fill_disk(disk / "filler")
        logger.log_metrics({"b": 2.0}, step=2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logger.save()
            logger.finalize("success")
        messages = [str(w.message) for w in caught if issubclass(w.category, SurgeWarning)]
        assert len(messages) == 2 and "could not write 1 metric rows" in messages[1]
        assert read_rows(logger.metrics_path) == (["a", "step"], [{"a": "1.0", "step": "1"}])


def resolve_after(barrier: Any, root: str, cls: str, out: Any) -> None:
    barrier.wait()  # every process resolves at the same moment
    out.put(str(getattr(surge.loggers, cls)(root).log_dir))


@pytest.mark.parametrize("cls", ["CSVLogger", "TensorBoardLogger"])
def test_processes_started_together_get_distinct_versions(tmp_path, cls):
    ctx = multiprocessing.get_context("fork")  # forked after the imports: they start in step
    for trial in range(10):
        root, barrier, out = str(tmp_path / f"trial{trial}"), ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=resolve_after, args=(barrier, root, cls, out)) for _ in range(4)]
        for p in procs:
            p.start()
        dirs = sorted(Path(out.get(timeout=30)).name for _ in procs)
        for p in procs:
            p.join(timeout=30)
        assert [p.exitcode for p in procs] == [0] * 4
        assert dirs == ["version_0", "version_1", "version_2", "version_3"], f"trial {trial}: {dirs}"


def test_temporaries_of_killed_writers_in_old_runs_are_removed(tmp_path):
    base = tmp_path / "surge_logs"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    pid = int(dead.stdout)  # a process that has exited
    old = time.time() - 3600
    stale = [
        base / "version_0" / "checkpoints" / f".last.ckpt.tmp-{pid}-0123abcd",
        base / "version_0" / f".metrics.csv.tmp-{pid}-89abcdef",
    ]
    recent = base / "version_1" / "checkpoints" / f".last.ckpt.tmp-{pid}-deadbeef"  # perhaps another host's
    mine = base / "version_1" / f".metrics.csv.tmp-{os.getpid()}-00000000"  # a live writer's
    for path in [*stale, recent, mine]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # 0 bytes: killed right after opening it
    for path in [*stale, mine]:
        os.utime(path, (old, old))
    logger = CSVLogger(tmp_path)
    assert logger.version == 2
    assert not any(p.exists() for p in stale)
    assert recent.exists() and mine.exists()


def test_a_process_sweeps_a_logs_folder_once(tmp_path):
    """The sweep lists every run directory: a second fit in the same process does not pay it again,
    and the next process removes what a writer that died meanwhile left."""
    base = tmp_path / "surge_logs"
    assert CSVLogger(tmp_path).version == 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    stale = base / "version_0" / f".metrics.csv.tmp-{int(dead.stdout)}-0123abcd"
    stale.touch()
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert CSVLogger(tmp_path).version == 1
    assert stale.exists()  # this process swept the folder already
    code = f"from surge.loggers import CSVLogger; print(CSVLogger({str(tmp_path)!r}).version)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2"]
    assert not stale.exists()


def dead_pid() -> int:
    """The pid of a process that has exited."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(done.stdout)


def stale_temporary(folder: Path, pid: int, prefix: str = ".metrics.csv") -> Path:
    """A temporary a writer `pid` left in `folder` an hour ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}.tmp-{pid}-0123abcd"
    path.touch()
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def refuse_removing(monkeypatch, theirs: Path) -> None:
    """`os.unlink` refuses `theirs` as it refuses another user's file in a sticky shared folder."""
    unlink = os.unlink

    def refuse_theirs(path, *args, **kwargs):
        if os.path.basename(path) == theirs.name:
            raise PermissionError(1, "Operation not permitted", os.fspath(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse_theirs)


def test_odd_version_folders_do_not_stop_a_logger(tmp_path):
    """`str.isdigit` accepts "²", which `int` refuses: such a folder is not a version, as "version_x"."""
    base = tmp_path / "surge_logs"
    for name in ["version_01", "version_\u00b2", "version_-1", "version_", "version_x"]:
        (base / name).mkdir(parents=True)
    assert CSVLogger(tmp_path).version == 2


def test_a_file_named_like_a_version_moves_the_version_on(tmp_path):
    """A plain file `version_0` (a stray download, a note) takes its name: the run goes to version_1
    and the file is kept. Lightning 2.6.6 counts directories only, picks version_0 and fails on
    its first write (FileExistsError)."""
    base = tmp_path / "surge_logs"
    base.mkdir()
    (base / "version_0").write_text("not a run")
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    assert logger.version == 1
    assert (base / "version_1" / "metrics.csv").exists()
    assert (base / "version_0").read_text() == "not a run"


def test_a_temporary_naming_a_pid_no_process_can_have_does_not_stop_a_logger(tmp_path):
    """A pid past a C int (os.kill's OverflowError) is no live writer's: the old temporary goes."""
    base = tmp_path / "surge_logs"
    huge = stale_temporary(base / "version_0", 10**20)
    assert CSVLogger(tmp_path).version == 1
    assert not huge.exists()


@pytest.mark.parametrize("where", ["the logs folder", "a run directory"])
def test_a_temporary_the_sweep_cannot_remove_leaves_the_rest_swept(tmp_path, monkeypatch, where):
    """One file that cannot be removed (another user's, in a sticky shared folder), in the logs folder
    itself or in a run: every run's other temporaries, `checkpoints/` included, are still swept."""
    base = tmp_path / "surge_logs"
    pid = dead_pid()
    theirs = stale_temporary(base if where == "the logs folder" else base / "version_0", pid, ".lease")
    stale = [
        stale_temporary(base / "version_0", pid),
        stale_temporary(base / "version_0" / "checkpoints", pid),
    ]
    refuse_removing(monkeypatch, theirs)
    assert CSVLogger(tmp_path).version == 1
    assert not any(p.exists() for p in stale)
    assert theirs.exists()


def test_a_forked_process_sweeps_the_folder_again(tmp_path):
    """The folders swept are this process's: a forked child (a tuner's trial) is a next process."""
    base = tmp_path / "surge_logs"
    assert CSVLogger(tmp_path).version == 0
    stale = stale_temporary(base / "version_0", dead_pid())
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if CSVLogger(tmp_path).version == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not stale.exists()


def test_a_folder_reached_through_a_symlink_and_dotdot_is_swept(tmp_path):
    """ "link/.." is the link target's parent, not the folder `os.path.abspath` makes of it: the
    folder a process has swept is the one the path names."""
    (tmp_path / "there" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "there" / "sub")
    assert CSVLogger(tmp_path).version == 0  # sweeps tmp_path/surge_logs
    stale = stale_temporary(tmp_path / "there" / "surge_logs" / "version_0", dead_pid())
    assert CSVLogger(tmp_path / "link" / "..").version == 1  # tmp_path/there/surge_logs
    assert not stale.exists()


class Steps(surge.Module):
    """Logs its step's loss as "loss" every step, with hyper-parameters."""

    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.lin(x).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


# tensorboard's writer thread lets its OSError escape the thread; pytest reports that as a warning
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_full_disk_under_tensorboard_warns_once_and_training_goes_on(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard package is an optional extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with small_filesystem(tmp_path / "disk", "128k") as disk:
        # flush_secs=0: every log point hands its scalars to the writer (by default a batch every
        # 30 s), so the writes meet the full disk while it is full
        logger = surge.loggers.TensorBoardLogger(disk, flush_secs=0)
        filler = FillThenFree(disk / "filler", None)
        trainer = fast_trainer(max_steps=STEPS, logger=logger, log_every_n_steps=1, callbacks=[filler])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(Steps(), DataLoader(TensorDataset(torch.randn(STEPS, 4)), batch_size=1))
        assert trainer.global_step == STEPS
        ours = [w for w in caught if issubclass(w.category, SurgeWarning) and "TensorBoard" in str(w.message)]
        assert len(ours) == 1, [str(w.message) for w in ours]
        assert "No space left" in str(ours[0].message)
        files = list(Path(logger.log_dir).glob("events.out.tfevents.*"))
        assert len(files) >= 2 and all(p.stat().st_size > 0 for p in files)  # a new file after the failure
        events = EventAccumulator(str(logger.log_dir))
        events.Reload()
        steps = [e.step for e in events.Scalars("loss")]
        assert len(steps) == len(set(steps))  # none twice
        assert set(range(1, FILL_AT + 1)) <= set(steps)  # before the fill
        assert set(range(FREE_AT, STEPS + 1)) <= set(steps)  # after it
        assert len(set(range(1, STEPS + 1)) - set(steps)) <= 11  # at most what tensorboard's queue held


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_tensorboard_keeps_what_a_full_disk_refused_and_writes_it_later(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard package is an optional extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with small_filesystem(tmp_path / "disk", "64k") as disk:
        logger = surge.loggers.TensorBoardLogger(disk)
        fill_disk(disk / "filler")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logger.log_hyperparams({"lr": 0.5})
            logger.log_metrics({"loss": 1.0, "epoch": 0}, step=1)
            logger.save()
            (disk / "filler").unlink()
            logger.log_metrics({"loss": 2.0, "epoch": 0}, step=2)
            logger.finalize("success")
        assert len([w for w in caught if issubclass(w.category, SurgeWarning)]) == 1
        assert all(p.stat().st_size > 0 for p in Path(logger.log_dir).iterdir())  # no empty event file left
        events = EventAccumulator(str(logger.log_dir))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 1.0), (2, 2.0)]
        assert "_hparams_/experiment" in events.PluginTagToContent("hparams")
