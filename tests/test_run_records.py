"""Where surge's own files of a run live (src/surge/config/run_records.py): the goodput heartbeat in
the run's log folder in surge's own API with a logger, else in surge's folder for the run directory;
the claim on a checkpoint folder always there. Never in a checkpoint folder, never in the working
directory; a resume still reads the previous run's heartbeat."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import ModelCheckpoint
from surge.config.run_records import HEARTBEAT_FILE, folder_of, lock_file, surge_home
from surge.loggers import CSVLogger


def files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_with_a_logger_the_heartbeat_is_in_the_log_folder_and_the_checkpoints_alone(tmp_path):
    logger = CSVLogger(tmp_path / "logs")
    trainer = fast_trainer(logger=logger, enable_checkpointing=True, log_every_n_steps=1)
    trainer.fit(TinyModel(), *make_loaders())
    run = Path(trainer.log_dir)
    assert files(run) == ["checkpoints/epoch=0-step=4.ckpt", HEARTBEAT_FILE, "hparams.yaml", "metrics.csv"]
    assert json.loads((run / HEARTBEAT_FILE).read_text())["status"] == "finished"
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]  # nothing in the working directory


def test_without_a_logger_the_heartbeat_is_in_surges_folder_and_a_resume_reads_it(tmp_path):
    ckpts = tmp_path / "ckpts"
    first = fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=ckpts)])
    first.fit(TinyModel(), *make_loaders())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpts"] and files(ckpts) == ["epoch=0-step=4.ckpt"]
    heartbeat = folder_of(tmp_path) / HEARTBEAT_FILE  # keyed by the run directory (default_root_dir)
    assert heartbeat.is_file() and surge_home() in heartbeat.parents
    saved = torch.load(ckpts / "epoch=0-step=4.ckpt", weights_only=True)["surge"]["goodput"]
    assert saved["heartbeat"] == str(heartbeat.resolve())
    second = fast_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=ckpts)])
    second.fit(TinyModel(), *make_loaders(), ckpt_path=str(ckpts / "epoch=0-step=4.ckpt"))
    goodput = second.goodput
    assert goodput is not None and goodput.runs == 2
    assert not any("no heartbeat" in note for note in goodput.notes)  # it found the first run's


def test_surges_folder_is_one_per_directory_whatever_path_names_it(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    os.chdir(tmp_path)
    assert folder_of("a") == folder_of(tmp_path / "a") == folder_of(tmp_path / "link")
    assert folder_of("a") != folder_of("b") and lock_file("a").parent == folder_of("a")
    assert folder_of("a").name.startswith("a-")  # readable: the directory's name, then the key
    assert surge_home() == Path(os.environ["SURGE_CACHE_DIR"])


def test_a_home_that_cannot_be_written_moves_surges_folders_to_the_temporary_folder(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")  # SURGE_CACHE_DIR under a file: no folder can be made there
    monkeypatch.setenv("SURGE_CACHE_DIR", str(blocked / "cache"))
    (tmp_path / "ckpts").mkdir()
    with pytest.warns(UserWarning, match="SURGE_CACHE_DIR") as said:  # never silently: said once
        folder = folder_of(tmp_path / "ckpts")
        folder_of(tmp_path / "ckpts")
    assert len([w for w in said if "SURGE_CACHE_DIR" in str(w.message)]) == 1
    try:
        assert folder.is_dir() and blocked not in folder.parents and folder.name.startswith("ckpts-")
    finally:
        folder.rmdir()  # this test's only trace in the machine's temporary folder
