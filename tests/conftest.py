"""Fixtures shared by the test files; helpers live in helpers.py (`from helpers import ...`)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "harness"))  # the test machinery: harness/README.md
# The sources beside these tests, whatever checkout an editable install points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import deadlines  # noqa: E402 - a failed deadline names the machine's load (a plugin of its own)
from cpu_durations import (  # noqa: E402, F401 - hooks: --cpu-durations
    pytest_addoption,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_terminal_summary,
)
from helpers import fast_trainer, make_loaders, make_model  # noqa: E402
from parallel import (  # noqa: E402, F401 - hooks and fixtures of the parallel run: see parallel.py
    _share_the_cores,
    configure_workers,
    pytest_collection_modifyitems,
    pytest_runtest_teardown,
    pytest_xdist_auto_num_workers,
)
from script_server import share_servers, unshare_servers  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(deadlines, "surge-deadlines")  # beside cpu_durations' report hook
    configure_workers(config)
    share_servers()  # the runs' servers of this session, shared by its workers: see script_server.py


def pytest_unconfigure(config: pytest.Config) -> None:
    unshare_servers()


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path, monkeypatch):
    """Every test runs in its own tmp_path, so default run directories (surge_logs/...) land there,
    with surge's own folder of its own."""
    monkeypatch.chdir(tmp_path)
    # surge's own folder (run records, locks: config/run_records.py) per test, beside its tmp_path
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path.with_name(tmp_path.name + "-surge")))
    torch.manual_seed(0)
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # A process group left behind in this worker makes later tests distributed (SyncBatchNorm
        # then asks for a GPU): end it here, and name the test that left it.
        torch.distributed.destroy_process_group()
        warnings.warn(
            f"{request_name(tmp_path)} left a torch.distributed process group initialized", stacklevel=1
        )


def request_name(tmp_path: Path) -> str:
    return tmp_path.name  # pytest names a test's tmp_path after the test


@pytest.fixture
def tiny_model():
    """Factory: `tiny_model(hidden=8, lr=0.1, scripted_val_loss=None, scheduler=None)`."""
    return make_model


@pytest.fixture
def loaders():
    """Factory: `loaders(n_train=32, n_val=16, batch_size=8)` -> (train_loader, val_loader)."""
    return make_loaders


@pytest.fixture
def trainer_factory():
    """Factory: `fast_trainer(**overrides)`."""
    return fast_trainer


@pytest.fixture
def host_reads(monkeypatch):
    """Counts `Tensor.item()` and `.tolist()` calls (reads of the device by the host) made outside
    torch's DataLoader, which draws its seeds and permutations on CPU tensors once per epoch."""
    import sys

    import torch

    counts = {"item": 0, "tolist": 0}
    real_item, real_tolist = torch.Tensor.item, torch.Tensor.tolist

    def ours() -> bool:
        return not sys._getframe(2).f_globals.get("__name__", "").startswith("torch.utils.data")

    def item(self):
        counts["item"] += ours()
        return real_item(self)

    def tolist(self):
        counts["tolist"] += ours()
        return real_tolist(self)

    monkeypatch.setattr(torch.Tensor, "item", item)
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    return counts
