"""Start methods without starting processes: the names, the refusals, and the pickling error."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.errors import MisconfigurationError
from surge.launch import multiprocessing_launcher as mpl
from surge.launch.pickling import unpicklable
from surge.strategies import DDPStrategy

CPU2 = {"accelerator": "cpu", "devices": 2, "enable_progress_bar": False, "logger": False}


@pytest.mark.parametrize(
    ("name", "start", "unused"),
    [("ddp", "popen", False), ("ddp_spawn", "spawn", False), ("ddp_fork", "fork", False),
     ("ddp_notebook", "fork", False), ("ddp_spawn_find_unused_parameters_true", "spawn", True),
     ("ddp_notebook_find_unused_parameters_false", "fork", False), ("ddp_find_unused_parameters_false", "popen", False),
     ("ddp_fork_find_unused_parameters_true", "fork", True)],
)  # fmt: skip
def test_lightnings_ddp_names_preset_start_method_and_unused_parameters(name, start, unused):
    trainer = surge.Trainer(strategy=name, **CPU2)
    strategy = trainer.strategy
    assert isinstance(strategy, DDPStrategy) and strategy.start_method == start
    assert strategy.ddp_kwargs["find_unused_parameters"] is unused
    launcher = strategy.launcher
    assert type(launcher).__name__ == (
        "SubprocessLauncher" if start == "popen" else "MultiprocessingLauncher"
    )


def test_an_unknown_or_unavailable_start_method_is_refused_by_name(monkeypatch):
    with pytest.raises(MisconfigurationError, match=r"DDPStrategy\(start_method\)=.*'thread'"):
        DDPStrategy(start_method="thread")
    monkeypatch.setattr(mpl.mp, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(MisconfigurationError, match="a start method this platform has: spawn"):
        DDPStrategy(start_method="fork")


def test_in_an_interactive_session_auto_forks_and_popen_or_spawn_is_refused(monkeypatch):
    monkeypatch.setattr(mpl.sys, "ps1", ">>> ", raising=False)
    assert surge.Trainer(**CPU2).strategy.start_method == "fork"  # strategy="auto", as Lightning
    for name in ("ddp", "ddp_spawn"):
        with pytest.raises(MisconfigurationError, match="strategy='ddp_notebook'"):
            surge.Trainer(strategy=name, **CPU2)


def test_fork_is_refused_once_cuda_is_initialised_in_the_main_process(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    launcher = mpl.MultiprocessingLauncher(2, "fork")
    with pytest.raises(MisconfigurationError, match="CUDA is already initialised.*ddp_spawn"):
        launcher.launch(None, "fit")  # type: ignore[arg-type]
    assert launcher.procs == []  # refused before any process started


class Locked(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.guard = threading.Lock()

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_what_does_not_pickle_under_spawn_is_named_before_any_process_starts():
    trainer = surge.Trainer(strategy="ddp_spawn", max_epochs=1, **CPU2)
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    with pytest.raises(MisconfigurationError) as err:
        trainer.fit(Locked(), loader)
    message = str(err.value)
    assert "start_method='spawn'" in message and "model.guard does not pickle" in message
    assert "_thread.lock" in message and "strategy='ddp_fork'" in message
    assert trainer.strategy.launcher.procs == []


def test_unpicklable_names_the_deepest_failing_path():
    assert unpicklable({"a": [1, 2]}, "x") is None
    path, err = unpicklable({"a": [1, lambda: 0]}, "x")
    assert path == "x['a'][1]" and isinstance(err, Exception)


def test_a_second_fit_is_refused_with_the_fix():
    trainer = surge.Trainer(strategy="ddp_fork", max_epochs=1, **CPU2)
    trainer._launched_fit = True  # as after a first fit()
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    with pytest.raises(NotImplementedError, match=r"create a new Trainer and pass fit\(ckpt_path=...\)"):
        trainer.fit(Locked(), loader)


def test_under_torchrun_every_start_method_joins_the_processes_there(monkeypatch):
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
    }.items():
        monkeypatch.setenv(name, value)
    strategy = surge.Trainer(strategy="ddp_spawn", **CPU2).strategy
    assert strategy.launcher is None and strategy.stage_launcher is None and strategy.global_rank == 1


def test_the_ranks_meet_on_the_environments_master_port_when_it_gives_one(monkeypatch):
    """As Lightning's launchers: `MASTER_PORT` set by the user (or a test's port reservation) is the
    port the ranks meet on; without it, a free one."""
    from surge.launch.subprocess_launcher import free_port

    monkeypatch.setenv("MASTER_PORT", "23456")
    assert free_port() == 23456
    monkeypatch.delenv("MASTER_PORT")
    assert 0 < free_port() < 65536
