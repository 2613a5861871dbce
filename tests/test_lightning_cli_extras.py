"""LightningCLI's `add_lightning_class_args`, `--optimizer`/`--lr_scheduler`
(`auto_configure_optimizers`) and `--ckpt_path` hyper-parameters as `--model.*` defaults
(`load_from_checkpoint_support`), run in-process with `args=[...]` on real fits and checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import torch
from torch import nn

import surge
from surge.callbacks import Callback
from surge.errors import MisconfigurationError
from surge.lightning.cli import LightningCLI
from surge.lightning.demos import BoringDataModule

QUIET = {
    "max_epochs": 1, "limit_train_batches": 4, "limit_val_batches": 2, "enable_progress_bar": False,
    "logger": False, "enable_checkpointing": False, "enable_model_summary": False,
}  # fmt: skip


class Net(surge.Module):
    """A 32 -> hidden -> 2 net that logs `train_loss` and a constant `flat` each epoch, and has no
    configure_optimizers."""

    def __init__(self, hidden: int = 4, scale: float = 1.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        loss = (self.net(batch) * self.hparams.scale - 1).pow(2).mean()
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("flat", 1.0, on_step=False, on_epoch=True)  # never improves
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", (self.net(batch) - 1).pow(2).mean())


class OwnOptimizer(Net):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1.0)


class Counter(Callback):
    """Records the training batches it saw, every `every`-th."""

    def __init__(self, every: int = 1, tag: str = "none") -> None:
        self.every, self.tag, self.seen = every, tag, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx % self.every == 0:
            self.seen.append(batch_idx)


class CounterCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        parser.add_lightning_class_args(Counter, "counter")


def build(model=Net, *args, cli=LightningCLI, **kwargs):
    kwargs.setdefault("trainer_defaults", QUIET)
    kwargs.setdefault("save_config_callback", None)
    return cli(model, BoringDataModule, args=list(args), run=False, **kwargs)


def fit(cli):
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli.trainer


# -- add_lightning_class_args -----------------------------------------------------------------
def test_a_callback_class_added_to_the_parser_is_configured_and_runs():
    cli = build(Net, "--counter.every=2", "--counter.tag=mine", "--optimizer=SGD", cli=CounterCLI)
    trainer = fit(cli)
    (counter,) = [cb for cb in trainer.callbacks if isinstance(cb, Counter)]
    assert (counter.every, counter.tag, counter.seen) == (2, "mine", [0, 2])
    assert cli.config.counter.every == 2  # in the config (and so in the saved config.yaml)


def test_callbacks_keep_lightnings_order_parsed_then_keyed_then_trainer_defaults():
    class Extra(Callback):
        pass

    cli = build(
        Net, "--counter.every=3", "--trainer.callbacks+=surge.callbacks.LearningRateMonitor",
        cli=CounterCLI, trainer_defaults={**QUIET, "callbacks": [Extra()]},
    )  # fmt: skip
    names = [type(cb).__name__ for cb in cli.trainer.callbacks]
    assert names.index("LearningRateMonitor") < names.index("Counter") < names.index("Extra")


def test_a_module_class_and_a_subclass_mode_callback_are_added_too():
    class TwoCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(Net, "teacher")
            parser.add_lightning_class_args(Callback, "extra", subclass_mode=True, required=False)

    cli = build(
        Net, "--teacher.hidden=7", "--extra=surge.callbacks.LearningRateMonitor",
        "--extra.logging_interval=step", cli=TwoCLI,
    )  # fmt: skip
    assert isinstance(cli.config_init.teacher, Net) and cli.config_init.teacher.hparams.hidden == 7
    (monitor,) = [cb for cb in cli.trainer.callbacks if type(cb).__name__ == "LearningRateMonitor"]
    assert monitor.logging_interval == "step"


def test_add_lightning_class_args_refuses_other_classes():
    class BadCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(torch.optim.SGD, "sgd")

    with pytest.raises(MisconfigurationError, match=r"add_lightning_class_args\(lightning_class\).*SGD"):
        build(Net, cli=BadCLI)


# -- --optimizer / --lr_scheduler ------------------------------------------------------------------
def test_optimizer_and_scheduler_from_the_command_line_become_configure_optimizers():
    cli = build(
        Net, "--optimizer=Adam", "--optimizer.lr=0.01", "--lr_scheduler=StepLR",
        "--lr_scheduler.step_size=1", "--lr_scheduler.gamma=0.5", "--trainer.max_epochs=2",
    )  # fmt: skip
    trainer = fit(cli)
    (optimizer,) = trainer.optimizers
    assert type(optimizer) is torch.optim.Adam
    assert optimizer.param_groups[0]["initial_lr"] == 0.01
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0025)  # stepped once per epoch, twice
    assert trainer.global_step == 8


def test_reduce_lr_on_plateau_by_class_path_steps_on_its_monitor():
    cli = build(
        Net, "--optimizer=torch.optim.SGD", "--optimizer.lr=0.5", "--lr_scheduler=ReduceLROnPlateau",
        "--lr_scheduler.monitor=flat", "--lr_scheduler.patience=0",
        "--lr_scheduler.factor=0.1", "--trainer.max_epochs=3",
    )  # fmt: skip
    returned = cli.model.configure_optimizers()
    assert returned["lr_scheduler"]["monitor"] == "flat"
    trainer = fit(cli)
    # `flat` does not improve after the first epoch, so the rate drops at the end of each later one.
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5 * 0.1**2)


def test_the_modules_own_configure_optimizers_is_overridden_with_a_warning():
    with pytest.warns(UserWarning, match="OwnOptimizer.configure_optimizers` will be overridden"):
        cli = build(OwnOptimizer, "--optimizer=Adam", "--optimizer.lr=0.03")
    assert type(cli.model.configure_optimizers()) is torch.optim.Adam
    untouched = build(OwnOptimizer)  # no --optimizer: the module's own stays
    assert type(untouched.model.configure_optimizers()) is torch.optim.SGD


def test_a_scheduler_without_an_optimizer_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        build(OwnOptimizer, "--lr_scheduler=StepLR", "--lr_scheduler.step_size=1")
    assert done.value.code == 2
    assert (
        "--lr_scheduler=torch.optim.lr_scheduler.StepLR was given without --optimizer"
        in capsys.readouterr().err
    )


def test_add_optimizer_args_with_one_class_configures_it_without_a_class_path():
    class FixedCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_optimizer_args(torch.optim.Adam)
            parser.add_lr_scheduler_args(torch.optim.lr_scheduler.ExponentialLR)

    cli = build(Net, "--optimizer.lr=0.02", "--lr_scheduler.gamma=0.5", cli=FixedCLI)
    optimizers, schedulers = cli.model.configure_optimizers()
    assert type(optimizers[0]) is torch.optim.Adam and optimizers[0].param_groups[0]["lr"] == 0.02
    assert type(schedulers[0]) is torch.optim.lr_scheduler.ExponentialLR and schedulers[0].gamma == 0.5


def test_auto_configure_optimizers_false_adds_no_flags(capsys):
    with pytest.raises(SystemExit) as done:
        build(Net, "--optimizer=Adam", auto_configure_optimizers=False)
    assert done.value.code == 2 and "optimizer" in capsys.readouterr().err


# -- --ckpt_path hyper-parameters -----------------------------------------------------------------
@pytest.fixture
def checkpoint(tmp_path):
    """A checkpoint of Net(hidden=6, scale=0.5) after one short fit."""
    trainer = surge.Trainer(**{**QUIET, "default_root_dir": str(tmp_path)})
    model = Net(hidden=6, scale=0.5)
    model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.1)
    trainer.fit(model, datamodule=BoringDataModule())
    path = tmp_path / "net.ckpt"
    trainer.save_checkpoint(path)
    return str(path)


def run(command, *args, **kwargs):
    kwargs.setdefault("trainer_defaults", QUIET)
    kwargs.setdefault("save_config_callback", None)
    return LightningCLI(Net, BoringDataModule, args=[command, *args], **kwargs)


def test_checkpoint_hparams_are_the_model_defaults_and_the_command_line_wins(checkpoint):
    cli = run("validate", f"--ckpt_path={checkpoint}")
    built_by = {"_instantiator": "lightning.pytorch.cli.instantiate_module"}  # as Lightning's CLI records it
    assert dict(cli.model.hparams) == {"hidden": 6, "scale": 0.5, **built_by}  # a default Net would not load
    assert cli.config.model.hidden == 6
    overridden = run("validate", f"--ckpt_path={checkpoint}", "--model.scale=2.0")
    assert dict(overridden.model.hparams) == {"hidden": 6, "scale": 2.0, **built_by}


def test_fit_resumes_with_the_checkpoints_hparams(checkpoint):
    cli = run(
        "fit", f"--ckpt_path={checkpoint}", "--trainer.max_epochs=2", "--optimizer=SGD", "--optimizer.lr=0.1"
    )
    assert cli.model.hparams.hidden == 6 and cli.trainer.global_step == 8  # 4 restored + 4 new


def test_without_load_from_checkpoint_support_the_hparams_are_not_read(checkpoint, capsys):
    with pytest.raises(SystemExit) as done:  # a default Net (hidden=4) cannot take the weights
        run("validate", f"--ckpt_path={checkpoint}", load_from_checkpoint_support=False)
    assert done.value.code == 1 and "net.0.weight" in capsys.readouterr().err


def test_hparams_that_do_not_fit_the_model_are_refused(tmp_path, checkpoint, capsys):
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["hidden"] = "Linear(in_features=3)"  # a value saved as its repr
    bad = tmp_path / "bad.ckpt"
    torch.save({k: v for k, v in ckpt.items() if k != "surge"}, bad)  # a plain dict: unverified
    with pytest.raises(SystemExit) as done:
        run("validate", f"--ckpt_path={bad}")
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert f"--ckpt_path={bad}" in err and "model.hidden" in err and "adapt_checkpoint_hparams" in err


def test_adapt_checkpoint_hparams_can_drop_or_change_them(checkpoint):
    class Adapting(LightningCLI):
        def adapt_checkpoint_hparams(self, subcommand, checkpoint_hparams):
            return {**checkpoint_hparams, "scale": 3.0} if subcommand == "validate" else checkpoint_hparams

    args = ["validate", f"--ckpt_path={checkpoint}"]
    cli = Adapting(Net, BoringDataModule, args=args, trainer_defaults=QUIET, save_config_callback=None)
    assert dict(cli.model.hparams) == {
        "hidden": 6, "scale": 3.0, "_instantiator": "lightning.pytorch.cli.instantiate_module"
    }  # fmt: skip


class Injected(Net):
    """Takes its optimizer as a callable, as Lightning's `OptimizerCallable` argument."""

    def __init__(self, optimizer: Callable[[Iterable], torch.optim.Optimizer] = torch.optim.SGD) -> None:
        super().__init__()
        self.optimizer = optimizer

    def configure_optimizers(self):
        return self.optimizer(self.parameters())


def test_an_optimizer_group_with_link_to_is_passed_to_that_argument():
    class LinkedCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_optimizer_args(torch.optim.Adam, link_to="model.optimizer")

    cli = build(Injected, "--optimizer.lr=0.04", cli=LinkedCLI)
    optimizer = cli.model.configure_optimizers()  # the module's own: not replaced
    assert type(optimizer) is torch.optim.Adam and optimizer.param_groups[0]["lr"] == 0.04


def test_the_parser_classes_are_lightnings_names():
    from surge.lightning import cli as cli_module
    from surge.lightning.cli_parser import LightningArgumentParser, ReduceLROnPlateau

    assert cli_module.LightningArgumentParser is LightningArgumentParser
    assert cli_module.ReduceLROnPlateau is ReduceLROnPlateau
    seen = []

    class Seeing(LightningCLI):
        def add_arguments_to_parser(self, parser):
            seen.append(parser)

    build(Net, cli=Seeing)
    assert seen and all(isinstance(p, LightningArgumentParser) for p in seen)


def test_importing_the_cli_module_leaves_jsonargparse_unloaded():
    code = "import sys, surge.lightning.cli; assert 'jsonargparse' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    subprocess.run(
        [sys.executable, "-c", code], check=True, env=env, timeout=600
    )  # a hang guard only: a busy machine took over 60 s
