"""The no-edit Lightning mode: scripts in tests/lightning_scripts/, written against Lightning's API,
run unmodified by `surge run` (and `python -m surge.lightning`) in a subprocess; the expected
values are what Lightning's documented semantics give. Plus the compatibility namespace itself."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import script_server
import surge
import surge.lightning.demos
from surge.errors import MisconfigurationError

SRC = Path(__file__).resolve().parents[1] / "src"
SCRIPTS = Path(__file__).parent / "lightning_scripts"
PRELOAD = ("torch", "surge", "surge.lightning")  # imported once by the server that forks each run


def surge_run(cwd: Path, script: str, *args: str, module: tuple[str, ...] = ("surge", "run")) -> str:
    """Run a script of lightning_scripts/ through the mode; returns its output (stdout + stderr)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    env.pop("PL_GLOBAL_SEED", None)
    argv = ["-m", *module, str(SCRIPTS / script), *args]
    proc = script_server.run(sys.executable, argv, cwd=cwd, env=env, preload=PRELOAD, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("see docs/lightning.md") == 1  # the deliberate differences, said once
    return out


def result(out: str, tag: str = "") -> dict[str, str]:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"RESULT {tag}".rstrip()))
    return dict(re.findall(r"(\w+)=(\S+)", line))


@pytest.fixture
def mode():
    """The Lightning finder installed in this process, removed afterwards."""
    from surge.lightning import mode as m

    m.install()
    yield m
    m.uninstall()


# -- scripts run unmodified --------------------------------------------------------------------
def test_a_bug_report_script_runs_unmodified(tmp_path):
    out = surge_run(tmp_path, "boring_bug_report.py")
    # limit_train_batches=1, max_epochs=1: one optimizer step; test() returns the logged test_loss.
    assert result(out, "custom") == {"global_step": "1", "epochs": "1", "test_keys": "['test_loss']"}
    # Lightning's BoringModel + BoringDataModule: 64 samples, batch size 1, 2 epochs -> 128 steps;
    # StepLR(step_size=1, gamma=0.1) stepped at each epoch end from lr 0.1 -> 0.001.
    assert result(out, "demo") == {"global_step": "128", "lr": "0.001"}
    assert list((tmp_path / "lightning_logs" / "version_0" / "checkpoints").glob("*.ckpt"))


def test_callbacks_loggers_and_seeding_script(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    out = surge_run(first, "callbacks_and_loggers.py", "7")
    got = result(out)
    # val_loss 1.0, 0.5, 0.6, 0.7: EarlyStopping(patience=2) stops after epoch 3 -> 4 epochs of 4 batches.
    assert (got["epochs"], got["global_step"], got["best"]) == ("4", "16", "0.500")
    run = first / "logs" / "regression" / "version_0"
    assert got["log_dir"] == "logs/regression/version_0"
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["epoch=1-step=8.ckpt"]
    rows = list(csvrows(run / "metrics.csv"))
    assert [float(r["lr-SGD"]) for r in rows if r["lr-SGD"]] == [0.05, 0.025, 0.0125, 0.00625]
    # Lightning's step for what training logs: the batches stepped before the one logging (real
    # Lightning 2.6.6 writes these rows; LearningRateMonitor's rows carry no epoch).
    assert [int(r["step"]) for r in rows if r["train_loss"]] == [1, 3, 5, 7, 9, 11, 13, 15]
    assert [(r["epoch"], int(r["step"])) for r in rows if r["lr-SGD"]] == [
        ("", 0),
        ("", 4),
        ("", 8),
        ("", 12),
    ]
    assert yaml.safe_load((run / "hparams.yaml").read_text()) == {"lr": 0.05}
    # seed_everything(7) makes the run repeat exactly.
    assert result(surge_run(second, "callbacks_and_loggers.py", "7"))["weight_sum"] == got["weight_sum"]


def csvrows(path: Path):
    import csv

    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def test_lightning_cli_run_false_autoencoder(tmp_path):
    out = surge_run(tmp_path, "autoencoder_cli.py", "--trainer.max_epochs=2")
    # 256 training samples in batches of 32: 8 steps an epoch; predict over 64 samples: 2 batches.
    assert result(out) == {"global_step": "16", "epochs": "2", "predictions": "2x(32,"}
    run = tmp_path / "lightning_logs" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["seed_everything"] == 1234 and config["trainer"]["max_epochs"] == 2
    assert "ckpt_path" not in config  # run=False: no subcommand, no --ckpt_path
    # The callback from trainer_defaults wrote an image to the default (TensorBoard) logger each epoch.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"images": 0}).Reload()
    assert [e.step for e in events.Images("images")] == [8, 16]


def test_lightning_cli_fit_subcommand_through_python_m(tmp_path):
    out = surge_run(
        tmp_path, "classifier_cli.py", "fit", "--trainer.max_epochs=2", "--data.batch_size=25",
        module=("surge.lightning",),
    )  # fmt: skip
    assert "BEFORE_FIT num_classes=3" in out  # linked from data.num_classes by add_arguments_to_parser
    got = result(out)
    assert (got["global_step"], got["epochs"]) == ("4", "2")  # 50 samples / 25, 2 epochs
    config = yaml.safe_load((tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert config["trainer"]["enable_progress_bar"] is False  # from trainer_defaults
    assert isinstance(config["seed_everything"], int)  # seed_everything_default=True: chosen, recorded


def test_a_missing_script_is_refused(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "surge", "run", "nope.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "script='nope.py' is not a file" in proc.stderr


# -- the namespace -------------------------------------------------------------------------------
def test_lightning_names_are_surge_objects(mode):
    import lightning as L
    import lightning.pytorch as pl
    import pytorch_lightning
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.callbacks.early_stopping import EarlyStopping
    from lightning.pytorch.utilities import apply_to_collection, rank_zero_only
    from lightning.pytorch.utilities.types import STEP_OUTPUT  # noqa: F401

    assert L.LightningModule is pl.LightningModule is pytorch_lightning.LightningModule is surge.Module
    assert L.LightningDataModule is surge.DataModule and L.Trainer is surge.Trainer
    assert EarlyStopping is surge.callbacks.EarlyStopping
    assert isinstance(TQDMProgressBar(), surge.callbacks.ProgressBar)
    assert rank_zero_only.rank == 0
    assert apply_to_collection({"a": [1, 2]}, int, lambda x: x * 10) == {"a": [10, 20]}
    assert L.pytorch is pl
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger

    # surge's own classes, so `isinstance(trainer.logger, TensorBoardLogger)` holds for the default.
    assert isinstance(L.Trainer(logger=True).logger, TensorBoardLogger)
    assert issubclass(CSVLogger, surge.loggers.CSVLogger)  # with Lightning's constructor arguments
    assert list(inspect.signature(CSVLogger).parameters) == [
        "save_dir", "name", "version", "prefix", "flush_logs_every_n_steps"
    ]  # fmt: skip
    assert MLFlowLogger is surge.loggers.MLFlowLogger and WandbLogger is surge.loggers.WandbLogger
    with pytest.raises(MisconfigurationError, match="prefix"):
        CSVLogger("logs", prefix="train")


@pytest.mark.parametrize(
    "statement, use, named",
    [
        (
            "from lightning.pytorch.loggers import CometLogger as x",
            "x()",
            "lightning.pytorch.loggers.CometLogger",
        ),
        ("from lightning import Fabric as x", "x()", "lightning.fabric.Fabric"),
        (
            "import lightning.fabric.strategies as m",
            "m.DDPStrategy()",
            "lightning.fabric.strategies.DDPStrategy",
        ),
        ("import pytorch_lightning.loops as m", "m._FitLoop()", "lightning.pytorch.loops._FitLoop"),
        # A subpackage by `from`, or through an alias, is the same stand-in module.
        ("from pytorch_lightning import loops as m", "m._Loop()", "lightning.pytorch.loops._Loop"),
        (
            "import lightning as L; m = L.pytorch.serve",
            "m.ServableModule()",
            "lightning.pytorch.serve.ServableModule",
        ),
        (
            "from lightning_fabric import Fabric as x",
            "x()",
            "lightning.fabric.Fabric",
        ),  # the standalone package
        (
            "from lightning.pytorch.utilities.model_helpers import get_torchvision_model as x",
            "x('resnet18')",
            "get_torchvision_model",
        ),
    ],
)
def test_names_surge_lacks_import_and_are_refused_by_name_when_used(mode, statement, use, named):
    from surge.lightning.refuse import LightningNameError

    scope: dict = {}
    exec(statement, scope)  # Lightning 2.6.6 has the name: it imports
    with pytest.raises(LightningNameError, match=re.escape(named)) as err:
        exec(use, scope)
    assert isinstance(err.value, ImportError) and "docs/lightning.md" in str(err.value)


def test_small_names_projects_import(mode):
    """Names the census of public projects (tests/oracle/census.py) found imported."""
    import logging
    import warnings

    import pytorch_lightning as pl
    from lightning.pytorch.cli import LRSchedulerTypeTuple, instantiate_class
    from lightning.pytorch.utilities import FLOAT32_EPSILON, disable_possible_user_warnings
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    assert pl._logger is logging.getLogger("lightning.pytorch")
    assert torch.finfo(torch.float32).eps == FLOAT32_EPSILON
    assert MisconfigurationException is MisconfigurationError
    opt = instantiate_class(
        [torch.nn.Parameter(torch.zeros(1))], {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.5}}
    )
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["lr"] == 0.5
    assert issubclass(torch.optim.lr_scheduler.StepLR, LRSchedulerTypeTuple)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings()
        warnings.warn("likely a mistake", pl.utilities.warnings.PossibleUserWarning, stacklevel=1)
    assert not caught


def test_without_the_mode_nothing_is_mapped():
    import surge.lightning  # noqa: F401

    assert importlib.util.find_spec("lightning") is None  # Lightning is not installed here
    assert not any(type(f).__name__ == "LightningFinder" for f in sys.meta_path)


def test_in_the_mode_lightning_is_importable_but_not_installed(mode):
    from lightning_utilities.core.imports import RequirementCache, package_available

    for name in [n for n in sys.modules if n.split(".")[0] in ("lightning", "pytorch_lightning")]:
        del sys.modules[name]
    package_available.cache_clear()
    # A probe (what libraries gating on Lightning ask) finds nothing to import Lightning internals from...
    assert importlib.util.find_spec("lightning") is None
    assert importlib.util.find_spec("pytorch_lightning") is None
    assert not RequirementCache("lightning") and not RequirementCache("pytorch_lightning")
    assert "lightning" not in sys.modules  # the probe imported nothing
    # ...while the script's imports get surge's objects.
    assert importlib.import_module("lightning.pytorch").Trainer is surge.Trainer
    import pytorch_lightning

    assert pytorch_lightning.LightningModule is surge.Module


def test_the_mode_marks_lightning_semantics(mode):
    from surge.config import semantics

    assert semantics.Semantics.current() is semantics.LIGHTNING
    mode.uninstall()
    assert semantics.Semantics.current() is semantics.SURGE


def test_ranks_the_launcher_starts_run_in_the_mode(mode, monkeypatch):
    from surge.launch.subprocess_launcher import _command

    monkeypatch.setattr(sys, "argv", ["train.py", "--x", "1"])
    assert _command() == [sys.executable, "-m", "surge.lightning", os.path.abspath("train.py"), "--x", "1"]


def test_seed_everything_has_lightnings_semantics(monkeypatch):
    from surge.lightning import seed_everything
    from surge.seed import last_seeding

    monkeypatch.setenv("PL_GLOBAL_SEED", "123")
    assert seed_everything() == 123  # no seed: the environment's
    assert last_seeding().workers is False  # Lightning's default: workers=False
    a = torch.rand(3)
    seed_everything(123, workers=True)
    assert torch.equal(a, torch.rand(3)) and last_seeding().workers is True
    seed_everything(5)
    assert os.environ["PL_GLOBAL_SEED"] == "5" and os.environ["PL_SEED_WORKERS"] == "0"


def test_default_logger_without_tensorboard_is_csv(monkeypatch, tmp_path):
    from surge.loggers import CSVLogger, default

    monkeypatch.setattr(default, "tensorboard_available", lambda: False)
    assert [type(lg) for lg in surge.Trainer(logger=True).loggers] == [CSVLogger]


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"save_config_kwargs": {"multifile": True}}, "save_config_kwargs"),
        ({"parser_kwargs": {"parser_mode": "omegaconf"}}, "parser_kwargs"),
        ({"seed_everything_default": "1"}, "seed_everything_default"),
        ({"trainer_class": dict}, "trainer_class"),
    ],
)
def test_lightning_cli_refuses_what_it_cannot_honour(kwargs, named):
    from surge.lightning.cli import LightningCLI

    with pytest.raises(MisconfigurationError, match=named):
        LightningCLI(surge.lightning.demos.BoringModel, args=[], run=False, **kwargs)


def test_generated_wikitext_is_fixed_and_leaves_the_global_stream_alone():
    from surge.lightning.demos import Transformer, WikiText2

    state = torch.get_rng_state()
    random_state = random.getstate()
    data = WikiText2(block_size=8, num_tokens=400, vocab_size=50)
    assert torch.equal(torch.get_rng_state(), state) and random.getstate() == random_state
    inputs, target = data[3]
    assert torch.equal(inputs[1:], target[:-1]) and len(data) == 400 // 8 - 1
    assert torch.equal(WikiText2(block_size=8, num_tokens=400, vocab_size=50)[3][0], inputs)
    out = Transformer(vocab_size=50, ninp=8, nhead=2, nhid=16, nlayers=1)(inputs[None], target[None])
    assert out.shape == (8, 50) and torch.allclose(out.exp().sum(-1), torch.ones(8))


def test_a_probe_under_an_imported_lightning_package_finds_it_without_a_second_copy(mode):
    """`find_spec("lightning.pytorch.callbacks.progress")` after `import lightning.pytorch` finds it, as
    under Lightning, and leaves no copy of surge's files under other Lightning names in `sys.modules`."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("lightning", "pytorch_lightning")]:
        del sys.modules[name]
    import lightning.pytorch

    assert importlib.util.find_spec("lightning.pytorch.callbacks.progress") is not None
    assert importlib.util.find_spec("lightning.pytorch.loggers.wandb") is not None
    assert sys.modules["lightning.pytorch.callbacks"] is lightning.pytorch.callbacks
    assert "lightning.callbacks" not in sys.modules and "lightning.pytorch._csv_logger" not in sys.modules
