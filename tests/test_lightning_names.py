"""Lightning's public names and arguments on surge's objects, each with Lightning's behaviour:
`trainer.state`, `reduce_fx` as torch's functions, `save_hyperparameters(logger=False)`,
`enable_autolog_hparams`, the `Tuner`, the loggers' `lightning_logs` in Lightning mode, and the
refusal of `check_val_every_n_epoch=None` without an int interval and of `weights_only=False`
before any work."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import surge
from surge.errors import MisconfigurationError
from surge.lightning.demos.boring_classes import BoringModel, RandomDataset
from surge.lightning.states import RunningStage, TrainerFn, TrainerStatus
from surge.lightning.tuner import Tuner


def trainer(**kwargs):
    args = dict(max_epochs=1, limit_train_batches=4, limit_val_batches=2, enable_progress_bar=False)
    return surge.Trainer(**{**args, **kwargs})


class Stages(BoringModel):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.lr = lr
        self.seen: list[tuple[str, str | None, str]] = []

    def training_step(self, batch, batch_idx):
        state = self.trainer.state
        self.seen.append((state.fn, state.stage, state.status))
        out = super().training_step(batch, batch_idx)
        self.log("peak", torch.tensor(float(batch_idx)), on_step=False, on_epoch=True, reduce_fx=torch.max)
        self.log("total", 1.0, on_step=False, on_epoch=True, reduce_fx="SUM")
        return out

    def validation_step(self, batch, batch_idx):
        state = self.trainer.state
        self.seen.append((state.fn, state.stage, state.status))


def test_state_reduce_fx_and_the_entry_points(tmp_path):
    t = trainer(default_root_dir=tmp_path, logger=False)
    assert t.state.status == TrainerStatus.INITIALIZING and t.state.fn is None
    model = Stages()
    t.fit(model)
    assert (TrainerFn.FITTING, RunningStage.TRAINING, TrainerStatus.RUNNING) in model.seen
    assert ("fit", "sanity_check", "running") in model.seen and ("fit", "validate", "running") in model.seen
    assert t.state.finished and t.state.fn == "fit" and t.state.stage is None
    assert t.callback_metrics["peak"] == 3.0 and t.callback_metrics["total"] == 4.0
    assert t.test(model, verbose=False) == [{}] and t.state.fn == TrainerFn.TESTING  # nothing logged
    with pytest.raises(MisconfigurationError, match="verbose"):
        t.validate(model, verbose="yes")
    with pytest.raises(MisconfigurationError, match="weights_only"):
        t.fit(model, weights_only=False)
    with pytest.raises(MisconfigurationError, match="reduce_fx"):
        surge.Trainer(max_steps=1, logger=False).fit(LogsMedian())


class LogsMedian(BoringModel):
    def training_step(self, batch, batch_idx):
        self.log("m", 1.0, reduce_fx=torch.median)
        return super().training_step(batch, batch_idx)


class Hparams(BoringModel):
    def __init__(self, width: int = 3, logged: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters(logger=logged)


@pytest.mark.parametrize(
    ("logged", "autolog", "written"), [(True, True, True), (False, True, False), (True, False, False)]
)
def test_hyperparameters_reach_the_loggers_only_when_asked(tmp_path, logged, autolog, written):
    logger = surge.loggers.CSVLogger(tmp_path, name="run")
    model = Hparams(logged=logged)
    trainer(logger=logger, enable_autolog_hparams=autolog, default_root_dir=tmp_path).fit(model)
    assert model.hparams == {"width": 3, "logged": logged}
    assert (tmp_path / "run" / "version_0" / "hparams.yaml").exists() == written


def test_none_is_lightnings_default_and_a_mode_none_stands_for_is_refused():
    t = surge.Trainer(
        min_epochs=None, limit_val_batches=None, precision=None, logger=None, log_every_n_steps=None
    )
    assert (
        t.min_epochs == 0
        and t.limit_val_batches == 1.0
        and t.precision == "32-true"
        and t.log_every_n_steps == 50
    )
    with pytest.raises(MisconfigurationError, match="check_val_every_n_epoch=None"):
        surge.Trainer(check_val_every_n_epoch=None)  # counting across epochs needs an int interval
    assert surge.Trainer(check_val_every_n_epoch=None, val_check_interval=10).check_val_every_n_epoch is None


def test_the_tuner_sets_what_it_found(tmp_path):
    model = Stages(lr=0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tuned = trainer(logger=False, default_root_dir=tmp_path, limit_train_batches=20)
    result = Tuner(tuned).lr_find(model, num_training=20, early_stop_threshold=None)
    assert model.lr == result.suggestion() != 0.5 and len(result.results["lr"]) == len(result.results["loss"])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the trial is undone

    class Sized(BoringModel):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 2

        def train_dataloader(self):
            return DataLoader(RandomDataset(32, 40), batch_size=self.batch_size)

    sized = Sized()
    found = Tuner(trainer(logger=False)).scale_batch_size(sized, mode="power", steps_per_trial=1, max_val=16)
    assert found == sized.batch_size == 16  # the cap (a tiny model fits anything on the CPU)
    with pytest.raises(MisconfigurationError, match="field batch_size not found"):  # Lightning's, in setup
        Tuner(trainer(logger=False)).scale_batch_size(BoringModel())
    with pytest.raises(MisconfigurationError, match="method"):
        Tuner(trainer(logger=False)).lr_find(model, method="validate")


def test_loggers_write_lightning_logs_in_lightning_mode(tmp_path):
    from surge.lightning import mode

    assert surge.loggers.CSVLogger(tmp_path).log_dir == str(tmp_path / "surge_logs" / "version_0")
    mode.install()
    try:
        assert surge.loggers.CSVLogger(tmp_path).log_dir == str(tmp_path / "lightning_logs" / "version_0")
        assert surge.loggers.TensorBoardLogger(tmp_path).log_dir == str(
            tmp_path / "lightning_logs" / "version_1"
        )
        assert surge.loggers.CSVLogger(tmp_path, name=None).log_dir == str(tmp_path / "version_0")
    finally:
        mode.uninstall()


def test_lightning_utilities_import_torchmetrics_only_when_its_version_flag_is_read():
    """`compare_version("torchmetrics", ...)` imports torchmetrics (with transformers and scipy, ~2 s):
    `from lightning.pytorch.utilities import rank_zero_only` must not pay it."""
    import subprocess
    import sys

    code = (
        "import sys; import surge.lightning.utilities; before = 'torchmetrics' in sys.modules; "
        "from surge.lightning.utilities.imports import _TORCHMETRICS_GREATER_EQUAL_1_0_0 as flag; "
        "print(before, flag, 'torchmetrics' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "True"]
