"""Mistakes a new user makes, each driven here: the message names the problem and the fix, and
nothing ends silently (surge's own API; the Lightning mode's messages are Lightning's:
tests/oracle/test_fit_notices.py)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import script_server
import surge
from helpers import TinyModel, fast_trainer, make_dataset, make_loaders, params_of, same_params
from surge.errors import CheckpointError, MisconfigurationError, SurgeTypeError
from surge.launch.host import cpu_count
from surge.loops.step_checks import explain_fetch_error
from surge.precision import MixedPrecision
from surge.speed import cpu_threads
from surge.speed.cpu_threads import ThreadUse
from surge.stage_cli.error_report import errors_shown_briefly

SRC = Path(__file__).resolve().parents[1] / "src"


def _messages(record) -> list[str]:
    return [str(w.message) for w in record]


# -- nothing silent ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fix"),
    [
        ({"max_epochs": 0}, "pass max_epochs >= 1"),
        ({"max_steps": 0}, "pass max_steps >= 1"),
        ({"limit_train_batches": 0}, "pass limit_train_batches > 0"),
    ],
)
def test_a_fit_that_trains_nothing_says_why_and_the_fix(args, fix):
    model = TinyModel()
    with pytest.warns(UserWarning, match="fit\\(\\) trained nothing") as record:
        fast_trainer(**args).fit(model, make_loaders()[0])
    (said,) = [m for m in _messages(record) if "trained nothing" in m]
    name = next(iter(args))
    assert f"{name}=0" in said and fix in said


def test_a_fit_that_trains_says_nothing_about_it(recwarn):
    fast_trainer(max_epochs=1).fit(TinyModel(), make_loaders()[0])
    assert not [m for m in _messages(recwarn) if "trained nothing" in m]


def test_a_training_step_that_never_returns_its_loss_is_said_at_the_fit_end():
    class Forgets(TinyModel):
        def training_step(self, batch, batch_idx):
            super().training_step(batch, batch_idx)  # no `return`

    model = Forgets()
    before = params_of(model)
    with pytest.warns(UserWarning) as record:
        fast_trainer(max_epochs=2).fit(model, make_loaders()[0])
    (said,) = [m for m in _messages(record) if "trained nothing" in m]
    assert "returned None on all 8 batches" in said and "Return the loss from training_step" in said
    assert same_params(before, params_of(model))  # what the message says: nothing trained


def test_fp16_on_the_cpu_is_bf16_with_a_warning_naming_the_plugin_that_keeps_fp16():
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU") as record:
        trainer = surge.Trainer(precision="16-mixed", accelerator="cpu", logger=False)
    assert trainer.precision == "bf16-mixed"
    assert 'MixedPrecision(torch.float16, "cpu")' in " ".join(_messages(record))
    kept = surge.Trainer(precision=MixedPrecision(torch.float16, "cpu"), accelerator="cpu", logger=False)
    assert kept.precision == "16-mixed" and kept.precision_plugin.scaler is not None


@pytest.mark.parametrize(
    ("use", "threads"),
    [
        (ThreadUse(threads=2, processes=1, cpus=2, load=2.6), 1),  # another job keeps a CPU busy
        (ThreadUse(threads=2, processes=2, cpus=2, load=0.5), 1),  # devices=2: two ranks, 2 threads each
        (ThreadUse(threads=16, processes=1, cpus=16, load=9.0), 8),  # half the CPUs taken
    ],
)
def test_oversubscribed_threads_are_said_with_the_setting_that_fixes_them(use, threads):
    advice = use.advice()
    assert advice is not None and f"{use.threads} intra-op threads" in advice
    assert f"torch.set_num_threads({threads})" in advice and f"OMP_NUM_THREADS={threads}" in advice


@pytest.mark.parametrize(
    "use",
    [
        ThreadUse(threads=2, processes=1, cpus=2, load=0.3),  # a quiet machine
        ThreadUse(threads=2, processes=1, cpus=2, load=1.2),  # this fit's own load
        ThreadUse(threads=1, processes=1, cpus=2, load=8.0),  # one thread: nothing to set
    ],
)
def test_threads_that_fit_the_free_cpus_are_not_warned_about(use):
    assert use.advice() is None


def test_a_fit_checks_its_threads_once_a_process(monkeypatch):
    monkeypatch.setattr(cpu_threads, "_checked", False)
    monkeypatch.setattr(cpu_threads, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    with pytest.warns(UserWarning, match=r"torch.set_num_threads\(1\)"):
        fast_trainer(max_steps=1).fit(TinyModel(), make_loaders()[0])
    with pytest.warns(UserWarning) as again:  # (a warning of its own keeps pytest.warns satisfied)
        fast_trainer(max_steps=1).fit(TinyModel(), make_loaders()[0])
        surge.rank_zero.warn("the second fit ended")
    assert not [m for m in _messages(again) if "intra-op threads" in m]


# -- errors that name the fix -----------------------------------------------------------------
def test_a_misspelled_trainer_argument_names_the_one_meant():
    with pytest.raises(
        SurgeTypeError, match=r"unexpected keyword argument 'max_epoch' \(did you mean 'max_epochs'\?\)"
    ):
        surge.Trainer(max_epoch=3)
    with pytest.raises(TypeError) as far:  # nothing close: Python's message alone
        surge.Trainer(colour="red")
    assert "did you mean" not in str(far.value)


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("trainer:\n  max_epoch: 1\n", "(did you mean 'trainer.max_epochs'?)"),
        ("trainr:\n  max_epochs: 1\n", "(did you mean 'trainer.max_epochs'?)"),
        (  # inside a class_path's init_args: said first, not left inside jsonargparse's Union text
            "trainer:\n  callbacks:\n    - class_path: surge.callbacks.EarlyStopping\n      init_args:\n"
            "        monitr: val_loss\n",
            "error: trainer.callbacks: surge.callbacks.EarlyStopping takes no init_args key 'monitr' "
            "(did you mean 'monitor'?)",
        ),
    ],
)
def test_a_misspelled_config_key_names_the_one_meant(tmp_path, capsys, config, said):
    pytest.importorskip("jsonargparse")
    from surge.config.cli import run_cli

    path = tmp_path / "run.yaml"
    path.write_text(f"model:\n  class_path: helpers.TinyModel\n{config}")
    assert run_cli(["fit", "--config", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_surge_errors_at_the_command_line_are_one_message_without_surges_frames(capsys, monkeypatch):
    monkeypatch.delenv("SURGE_TRACEBACK", raising=False)
    assert errors_shown_briefly(lambda: surge.Trainer(max_epoch=3)) == 1
    err = capsys.readouterr().err
    assert "did you mean 'max_epochs'" in err and "SURGE_TRACEBACK=1 shows the full traceback" in err
    assert __file__ in err  # the user's frame stays
    assert str(SRC / "surge") not in err  # surge's are gone
    monkeypatch.setenv("SURGE_TRACEBACK", "1")
    with pytest.raises(SurgeTypeError):  # the full traceback: the error as it was
        errors_shown_briefly(lambda: surge.Trainer(max_epoch=3))
    assert errors_shown_briefly(lambda: 0) == 0


def test_surge_run_shows_the_scripts_line_and_the_message(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import lightning.pytorch as pl\npl.Trainer(max_epoch=3)\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    env.pop("SURGE_TRACEBACK", None)
    proc = script_server.run(
        sys.executable, ["-m", "surge", "run", str(script)], cwd=tmp_path, env=env,
        preload=["torch", "surge", "surge.lightning"], timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert 'train.py", line 2' in proc.stderr and "(did you mean 'max_epochs'?)" in proc.stderr
    assert "SURGE_TRACEBACK=1" in proc.stderr and str(SRC / "surge") not in proc.stderr


def test_devices_2_from_python_c_says_there_is_no_script_and_the_fix(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["-c"])
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    trainer = fast_trainer(devices=2)  # (pytest-xdist's workers run as `python -c` too: built, not started)
    with pytest.raises(MisconfigurationError) as refused:
        trainer.fit(TinyModel(), make_loaders()[0])
    assert not trainer.strategy.launcher.children  # refused before any process started
    said = str(refused.value)
    assert "`python -c`" in said and "no script file" in said
    assert "python train.py" in said and "strategy='ddp_fork'" in said


def test_a_fit_reached_while_a_spawned_process_imports_the_script_names_the_guard(monkeypatch):
    """What each spawned worker (or rank) of an unguarded script says, instead of multiprocessing's
    bootstrapping error (a worker is a process that imports the script while it starts)."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(MisconfigurationError) as refused:
        fast_trainer().fit(TinyModel(), make_loaders()[0])
    assert "while a new process (a DataLoader worker or a spawned rank) imported the script" in str(
        refused.value
    )
    assert '`if __name__ == "__main__":`' in str(refused.value)


UNGUARDED = """
import torch
{call}
if __name__ == "__main__":
    {call}
"""


@pytest.mark.parametrize(("line", "named"), [(3, True), (5, False)])
def test_a_worker_that_died_in_an_unguarded_script_is_explained_by_the_guard(
    tmp_path, monkeypatch, line, named
):
    """The parent's closing note: the guard and the script's line that runs at its top level (not
    num_workers=0); a script whose fit is under the guard keeps the usual note."""
    script = tmp_path / "train.py"
    call = "explain(err, 0, 0, loader)" if named else "pass"
    guarded = "pass" if named else "explain(err, 0, 0, loader)"
    script.write_text(UNGUARDED.replace("{call}", call, 1).replace("{call}", guarded, 1))
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    loader = DataLoader(make_dataset(8), batch_size=4, num_workers=1, multiprocessing_context="spawn")
    err = RuntimeError("DataLoader worker (pid(s) 123) exited unexpectedly")
    namespace = {"__name__": "__main__", "explain": explain_fetch_error, "err": err, "loader": loader}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    (note,) = err.__notes__
    if named:
        assert f"{script}:{line} runs at the script's top level" in note and "with 'spawn'" in note
        assert '`if __name__ == "__main__":`' in note and "num_workers=0" not in note
    else:
        assert "__main__" not in note and "with num_workers=0 surge also names the sample's index" in note


def test_more_workers_than_cpus_is_warned_once_not_for_each_copy_and_iterator(recwarn):
    workers = cpu_count() + 1
    loader = DataLoader(make_dataset(16), batch_size=8, num_workers=workers)  # torch warns here
    fast_trainer(max_epochs=2).fit(TinyModel(), loader)
    said = [m for m in _messages(recwarn) if f"will create {workers} worker processes" in m]
    assert len(said) == 1


# -- checkpoints ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("saved")
    fast_trainer(max_epochs=2, enable_checkpointing=True, default_root_dir=root).fit(
        TinyModel(), make_loaders()[0]
    )
    (path,) = (root / "checkpoints").glob("*.ckpt")
    return path


def test_a_missing_checkpoint_lists_the_ones_nearby(saved):
    wrong = saved.parent / "epoch=5.ckpt"
    with pytest.raises(MisconfigurationError) as missing:
        fast_trainer(max_epochs=3, default_root_dir=saved.parents[1]).fit(
            TinyModel(), make_loaders()[0], ckpt_path=wrong
        )
    said = str(missing.value)
    assert "no such file" in said and f"(did you mean '{saved}'?)" in said
    assert f"Checkpoints nearby, newest first:\n  {saved}" in said and 'ckpt_path="last"' in said


def test_an_unreadable_checkpoint_names_ckpt_path_auto_and_the_newest_good_one(saved):
    broken = saved.parent / "broken.ckpt"
    broken.write_bytes(saved.read_bytes()[:1000])
    try:
        with pytest.raises(CheckpointError) as unreadable:
            fast_trainer(max_epochs=3, default_root_dir=saved.parents[1]).fit(
                TinyModel(), make_loaders()[0], ckpt_path=broken
            )
    finally:
        broken.unlink()
    said = str(unreadable.value)
    assert str(broken) in said and 'ckpt_path="auto" resumes from the newest checkpoint that reads' in said
    assert f"the newest here is {saved}" in said


def test_weights_that_do_not_fit_show_the_checkpoints_hyperparameters_next_to_the_models(saved):
    with pytest.raises(CheckpointError) as mismatch:
        fast_trainer(max_epochs=3).fit(TinyModel(hidden=16), make_loaders()[0], ckpt_path=saved)
    said = str(mismatch.value)
    assert "shape mismatches" in said and "hidden: checkpoint 8, model 16" in said
    assert "TinyModel.load_from_checkpoint(path)" in said
