"""surge's optional records and caches never kill a run, never follow a planted link, and trust
nothing read back from a checkpoint or a run folder (issue: findings 6, 7, 9, 11):

- compile=: an unwritable cache folder (read-only or missing home) costs a compile, said once; it
  no longer kills the fit at its first checkpoint (creating the signing key was unguarded);
- every file surge writes in a run folder (the goodput heartbeat, the compiled artifacts, the key,
  the hang dumps) is a new temporary renamed over its name: a link planted under the temporary's
  old fixed name, or the name itself, no longer makes surge overwrite a file elsewhere;
- a checkpoint's goodput entry is checked like the rest of the checkpoint (`CheckpointError` naming
  the key), and the heartbeat path it names is read only when it is a regular file of bounded size
  (a FIFO hung the resume, /dev/zero exhausted memory);
- artifacts that served none of a run's graphs are not reported as reused; no async checkpoint
  time is booked without async checkpointing; `surge slurm` refuses a newline in an #SBATCH value.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

import surge.speed.compile_cache as cc
from helpers import TinyModel, fast_trainer, make_loaders
from surge.errors import CheckpointError, MisconfigurationError
from surge.launch.sbatch import SbatchJob
from surge.profiler.goodput import GoodputLedger, read_heartbeat
from surge.profiler.goodput_watch import Heartbeat
from surge.speed.compiling import CompileSpec
from surge.strategies.hang_dump import write_dump


@pytest.fixture
def compiled_graphs(monkeypatch):
    """A process that compiled graphs and whose torch hands out artifacts (no real compile)."""
    monkeypatch.setattr(cc, "graphs_compiled", lambda: 3)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", None), raising=False)
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda payload: None, raising=False)


def victim(tmp_path):
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("precious")
    return path


# -- finding 6: an unwritable cache folder costs a compile, not the run ------------------------
def test_an_unwritable_cache_folder_is_said_once_and_never_raises(
    tmp_path, monkeypatch, compiled_graphs, caplog
):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("SURGE_CACHE_DIR", str(blocked / "cache"))  # no folder can be made under a file
    ckpt = tmp_path / "run" / "last.ckpt"
    ckpt.parent.mkdir()
    cache = cc.CompileCache(CompileSpec("forward"))
    with caplog.at_level("INFO"):
        assert cache.save_beside(ckpt, is_global_zero=True) is None  # before: NotADirectoryError
        monkeypatch.setattr(cc, "graphs_compiled", lambda: 4)
        assert cache.save_beside(ckpt, is_global_zero=True) is None
    said = [r.message for r in caplog.records if "could not be saved" in r.message]
    assert len(said) == 1 and "a resumed run compiles again" in said[0]
    (ckpt.parent / cc.ARTIFACTS).write_bytes(b"\0" * 64)
    assert cache.load_beside(ckpt) is False  # the key cannot be made: nothing is loaded, nothing raised


# -- finding 9: no link is followed ---------------------------------------------------------
def test_links_planted_in_a_run_folder_are_replaced_never_written_through(
    tmp_path, monkeypatch, compiled_graphs
):
    target, run = victim(tmp_path), tmp_path / "run"
    run.mkdir()
    pid = os.getpid()
    # the fixed temporary names of before, and the names themselves, planted as links to the victim
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SURGE_CACHE_DIR", str(home))
    planted = [
        run / f".goodput.json.{pid}.tmp",
        run / f".{cc.ARTIFACTS}.{pid}.tmp",
        home / f".compile-cache.key.{pid}.tmp",
        run / "hang" / "rank0.txt",
        run / "hang" / "rank0.flight.json",
    ]
    (run / "hang").mkdir()
    for link in planted:
        link.symlink_to(target)
    Heartbeat(run / "goodput.json", GoodputLedger())._write("running")
    assert cc.CompileCache(CompileSpec("forward")).save_beside(run / "last.ckpt", is_global_zero=True)
    write_dump(run / "hang", rank=0, world_size=2, why="a test")
    assert target.read_text() == "precious"
    assert json.loads((run / "goodput.json").read_text())["status"] == "running"
    assert (run / "hang" / "rank0.txt").is_file() and not (run / "hang" / "rank0.txt").is_symlink()
    assert len((home / "compile-cache.key").read_bytes()) == 32


# -- finding 7: nothing from a checkpoint trusted ---------------------------------------------
def entry(**changes):
    good = {"version": 1, "job": "j", "run": "r", "runs": 1, "seconds": {"train": 1.0},
            "saved_at": 1.7e9, "heartbeat": "", "run_compile_s": 0.0}  # fmt: skip
    return {"surge": {"goodput": {**good, **changes}}}


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"seconds": {"train": 1e300}}, "seconds"),
        ({"seconds": {"train": float("nan")}}, "seconds"),
        ({"seconds": ["train", 1.0]}, "seconds"),
        ({"job": None}, "job"),
        ({"runs": "2"}, "runs"),
        ({"saved_at": float("inf")}, "saved_at"),
        ({"heartbeat": 7}, "heartbeat"),
        ({"run_compile_s": -1.0}, "run_compile_s"),
    ],
)
def test_a_malformed_goodput_entry_is_a_checkpoint_error_naming_the_key(changes, key):
    with pytest.raises(CheckpointError, match=rf"checkpoint x.ckpt: its surge\.goodput\.{key} = "):
        GoodputLedger().restore_from(entry(**changes), "x.ckpt")


def test_a_missing_key_is_named_too_and_a_good_entry_still_resumes():
    saved = entry()
    del saved["surge"]["goodput"]["job"]
    with pytest.raises(CheckpointError, match=r"surge\.goodput\.job = '<missing>'"):
        GoodputLedger().restore_from(saved, "x.ckpt")
    ledger = GoodputLedger()
    ledger.start()
    ledger.restore_from(entry(), "x.ckpt")
    assert ledger.runs == 2 and ledger.job == "j"


def test_a_heartbeat_path_naming_a_fifo_or_a_device_is_no_heartbeat(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    keep_open = os.open(fifo, os.O_RDWR)  # a writer that never writes: a plain read waits forever
    results: list[object] = []
    reader = threading.Thread(target=lambda: results.append(read_heartbeat(str(fifo))), daemon=True)
    reader.start()
    reader.join(60)  # a bound on a deadlock, not a race: the fixed read returns at once
    finished = not reader.is_alive()
    os.close(keep_open)  # (lets a blocked read end)
    assert finished and results == [None]
    assert read_heartbeat("/dev/zero") is None  # before: read until memory ran out
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"time": 1.0, "pad": "x" * (1 << 17)}))
    assert read_heartbeat(str(big)) is None
    for bad in ({"time": float("inf")}, {"time": "soon"}, ["time"]):
        (tmp_path / "hb.json").write_text(json.dumps(bad))
        assert read_heartbeat(str(tmp_path / "hb.json")) is None


# -- finding 11 ------------------------------------------------------------------------------
def test_artifacts_that_served_no_graph_are_not_reported_as_reused(tmp_path, monkeypatch, compiled_graphs):
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "home"))
    ckpt = tmp_path / "run" / "last.ckpt"
    ckpt.parent.mkdir()
    (ckpt.parent / cc.ARTIFACTS).write_bytes(cc.signed(b"another model's artifacts"))
    ledger = GoodputLedger()
    ledger.start()
    assert cc.CompileCache(CompileSpec("forward")).load_beside(ckpt, ledger)
    notes = ledger.report().notes  # no graph was served from them (no cache hit since the load)
    assert not any("with the compiled artifacts saved beside" in n for n in notes), notes
    assert any("served none of this run's graphs" in n for n in notes), notes


def test_no_async_checkpoint_time_without_async_checkpointing(tmp_path):
    trainer = fast_trainer(max_epochs=1, enable_checkpointing=True, default_root_dir=tmp_path)
    trainer.fit(TinyModel(), *make_loaders())
    assert trainer.goodput is not None and trainer.goodput.seconds["checkpoint_async"] == 0.0
    assert trainer.goodput.seconds["checkpoint"] > 0.0


@pytest.mark.parametrize("arg", ["job_name", "partition", "output"])
@pytest.mark.parametrize("value", ["x\nrm -rf ~", "a b", 'a"b', "x\r"])
def test_slurm_refuses_a_value_that_would_break_its_sbatch_line(arg, value):
    flag = "--" + arg.replace("_", "-")
    with pytest.raises(MisconfigurationError, match=rf"^{flag}=.* is not valid: letters, digits"):
        SbatchJob(script="train.py", **{arg: value})
    script = SbatchJob(script="my\ntrain.py").render()  # the default name comes from the script's
    assert "#SBATCH --job-name=surge-my_train\n" in script
