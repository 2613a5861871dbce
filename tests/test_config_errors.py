"""Bad input fails early with a surge error that names the argument, the value and what is allowed."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel, fast_trainer, make_dataset, make_loaders, params_of, same_params
from surge.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, ProgressBar
from surge.loggers import CSVLogger

# (argument, bad value, a phrase of what is allowed)
BAD_TRAINER_ARGS = [
    ("accumulate_grad_batches", 0, ">= 1"),
    ("accumulate_grad_batches", 2.0, ">= 1"),
    ("accumulate_grad_batches", True, ">= 1"),
    ("max_epochs", -2, "-1"),
    ("max_epochs", 1.5, ">= 0"),
    ("max_epochs", "3", ">= 0"),
    ("min_epochs", -1, ">= 0"),
    ("max_steps", -5, "-1"),
    ("max_steps", True, ">= 0"),
    ("precision", "17", "32-true"),
    ("precision", 17, "32-true"),
    ("limit_train_batches", 1.5, "[0.0, 1.0]"),
    ("limit_train_batches", "all", "int >= 0"),
    ("limit_train_batches", True, "int >= 0"),
    ("limit_val_batches", -1, "int >= 0"),
    ("limit_val_batches", math.nan, "[0.0, 1.0]"),
    ("limit_test_batches", 2.0, "[0.0, 1.0]"),
    ("limit_predict_batches", -3, "int >= 0"),
    ("val_check_interval", 0, "int >= 1"),
    ("val_check_interval", 0.0, "(0.0, 1.0]"),
    ("val_check_interval", 1.5, "(0.0, 1.0]"),
    ("val_check_interval", True, "(0.0, 1.0]"),
    ("check_val_every_n_epoch", 0, ">= 1"),
    ("num_sanity_val_steps", -2, "-1"),
    ("gradient_clip_val", -1, ">= 0"),
    ("gradient_clip_val", math.nan, ">= 0"),
    ("gradient_clip_val", "1.0", ">= 0"),
    ("gradient_clip_val", True, ">= 0"),
    ("gradient_clip_algorithm", "l3", '"norm" or "value"'),
    ("accelerator", "tpu", "cpu"),
    ("devices", 0, "int >= 1"),
    ("devices", -2, "int >= 1"),
    ("devices", "a,b", '"0,2"'),
    ("devices", "0", "int >= 1"),
    ("devices", "", '"auto"'),
    ("devices", [0, 0], "distinct"),
    ("devices", "0,0", "distinct"),
    ("devices", [], "list"),
    ("devices", [-1], "list"),
    ("num_nodes", 0, ">= 1"),
    ("log_every_n_steps", -1, ">= 0"),
    ("log_every_n_steps", 1.5, ">= 0"),
    ("deterministic", "maybe", '"warn"'),
    ("strategy", "zzz", "Strategy object"),
    ("strategy", 42, "Strategy object"),
    ("enable_progress_bar", "yes", "True or False"),
    ("enable_checkpointing", 1, "True or False"),
    ("default_root_dir", 123, "path"),
    ("effective_batch_size", 0, ">= 1"),
    ("effective_batch_size", 64.0, ">= 1"),
    ("scale_lr", "cubic", '"linear" or "sqrt"'),
    ("reference_batch_size", 0, ">= 1"),
    ("num_workers", -1, '"auto"'),
    ("num_workers", "many", '"auto"'),
]


def _ids(cases):
    return [f"{name}={value!r}" for name, value, *_ in cases]


def _check(err: BaseException, name: str, shown: str, allowed: str | None) -> None:
    assert isinstance(err, surge.SurgeError), f"{type(err).__name__} is not a SurgeError: {err}"
    assert isinstance(err, ValueError | TypeError), f"{type(err).__mro__}"
    message = str(err)
    assert name in message, message
    assert shown in message, message
    if allowed is not None:
        assert allowed.lower() in message.lower(), message


@pytest.mark.parametrize(("name", "value", "allowed"), BAD_TRAINER_ARGS, ids=_ids(BAD_TRAINER_ARGS))
def test_bad_trainer_argument_fails_at_construction(name, value, allowed):
    with pytest.raises(Exception) as info:
        surge.Trainer(**{name: value})
    _check(info.value, name, repr(value), allowed)


def test_bad_callbacks_entry_names_the_entry():
    bad = object()
    with pytest.raises(Exception) as info:
        surge.Trainer(callbacks=[bad])
    _check(info.value, "callbacks", repr(bad), "Callback")


def test_callbacks_not_a_list():
    with pytest.raises(Exception) as info:
        surge.Trainer(callbacks="checkpoint")
    _check(info.value, "callbacks", repr("checkpoint"), "Callback")


@pytest.mark.parametrize("bad", [object(), "csv", 3], ids=["object", "str", "int"])
def test_bad_logger(bad):
    with pytest.raises(Exception) as info:
        surge.Trainer(logger=bad)
    _check(info.value, "logger", repr(bad), "Logger")


def test_bad_logger_inside_a_list():
    bad = object()
    with pytest.raises(Exception) as info:
        surge.Trainer(logger=[CSVLogger("."), bad])
    _check(info.value, "logger", repr(bad), "Logger")


@pytest.mark.parametrize("name", ["cuda", "gpu"])
def test_cuda_requested_without_cuda(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Exception) as info:
        surge.Trainer(accelerator=name)
    _check(info.value, "accelerator", repr(name), "'cpu'")


def test_model_checkpoint_together_with_enable_checkpointing_false():
    with pytest.raises(Exception) as info:
        surge.Trainer(callbacks=[ModelCheckpoint()], enable_checkpointing=False)
    _check(info.value, "enable_checkpointing", "False", None)


# Valid values on their own that cannot run as asked: several nodes without a launcher, and
# DataParallel without CUDA devices.
UNSUPPORTED = [
    ("num_nodes", 2, {"accelerator": "cpu"}),
    ("strategy", "dp", {"accelerator": "cpu"}),
    ("effective_batch_size", 128, {"accumulate_grad_batches": 4}),
    ("scale_lr", "linear", {}),
    ("reference_batch_size", 32, {}),
]


@pytest.mark.parametrize(("name", "value", "extra"), UNSUPPORTED, ids=_ids(UNSUPPORTED))
def test_unsupported_combination_fails_at_construction(name, value, extra):
    with pytest.raises(Exception) as info:
        surge.Trainer(**{name: value}, **extra)
    _check(info.value, name, repr(value), None)


BAD_CALLBACK_ARGS = [
    (lambda: ModelCheckpoint(mode="avg"), "mode", "avg"),
    (lambda: ModelCheckpoint(save_top_k=-2), "save_top_k", -2),
    (lambda: ModelCheckpoint(save_top_k=1.0), "save_top_k", 1.0),
    (lambda: ModelCheckpoint(every_n_train_steps=-1), "every_n_train_steps", -1),
    (lambda: ModelCheckpoint(every_n_epochs=1.5), "every_n_epochs", 1.5),
    (lambda: EarlyStopping("val_loss", mode="up"), "mode", "up"),
    (lambda: EarlyStopping("val_loss", patience=-1), "patience", -1),
    (lambda: EarlyStopping("val_loss", min_delta="0.1"), "min_delta", "0.1"),
    (lambda: EarlyStopping("val_loss", stopping_threshold="low"), "stopping_threshold", "low"),
    (lambda: ModelCheckpoint(save_last="last"), "save_last", "last"),
    (lambda: LearningRateMonitor(logging_interval="batch"), "logging_interval", "batch"),
    (lambda: ProgressBar(mode="fancy"), "mode", "fancy"),
    (lambda: ProgressBar(refresh_rate=0), "refresh_rate", 0),
]


@pytest.mark.parametrize(
    ("build", "name", "value"),
    BAD_CALLBACK_ARGS,
    ids=[f"{i}-{name}={value!r}" for i, (_, name, value) in enumerate(BAD_CALLBACK_ARGS)],
)
def test_bad_callback_argument(build, name, value):
    with pytest.raises(Exception) as info:
        build()
    _check(info.value, name, repr(value), None)


# -- hooks returning what surge cannot use -----------------------------------------------------


class ReturnsNone(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        F.cross_entropy(self(x), y)


class ReturnsVector(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y, reduction="none")[:3]


class ReturnsDictWithoutLoss(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"total": F.cross_entropy(self(x), y)}


class ReturnsDetached(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y).detach()


class ReturnsNoGrad(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        with torch.no_grad():
            return F.cross_entropy(self(x), y)


class LogsVector(TinyModel):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y, reduction="none")
        self.log("per_sample", loss[:3])
        return loss.mean()


class LogsMedian(TinyModel):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("loss_median", loss, reduce_fx="median")
        return loss


class LogsString(TinyModel):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("note", "hello")
        return loss


STEP_ERRORS = [
    (ReturnsVector, surge.MisconfigurationError, "shape (3,)"),
    (ReturnsDictWithoutLoss, surge.MisconfigurationError, "'loss'"),
    (ReturnsDetached, surge.SurgeRuntimeError, "does not require grad"),
    (ReturnsNoGrad, surge.SurgeRuntimeError, "does not require grad"),
    (LogsVector, surge.MisconfigurationError, "must have a single element"),
    (LogsMedian, surge.MisconfigurationError, "'median'"),
    (LogsString, surge.MisconfigurationError, "str"),
]


@pytest.mark.parametrize(("cls", "kind", "phrase"), STEP_ERRORS, ids=[c.__name__ for c, *_ in STEP_ERRORS])
def test_bad_training_step_fails_at_the_first_step(cls, kind, phrase):
    model = cls()
    before = params_of(model)
    train, val = make_loaders()
    trainer = fast_trainer(max_epochs=2, num_sanity_val_steps=0)
    with pytest.raises(kind) as info:
        trainer.fit(model, train, val)
    assert isinstance(info.value, surge.SurgeError)
    assert phrase in str(info.value), str(info.value)
    assert trainer.global_step == 0
    assert same_params(before, params_of(model)), "the model was updated before the error"
    assert trainer.state.status == "interrupted" and trainer.interrupted


def test_a_step_returning_none_with_fp16_is_refused_at_that_batch():
    """32-bit and bf16 skip that batch's backward as Lightning does (tests/oracle/test_none_step.py);
    fp16's loss scaler cannot step without gradients, so there it is refused before any update."""
    model = ReturnsNone()
    before = params_of(model)
    trainer = fast_trainer(
        max_epochs=2, num_sanity_val_steps=0, precision=surge.precision.MixedPrecision(torch.float16, "cpu")
    )
    with pytest.raises(surge.MisconfigurationError, match=r"returned None at batch 0.*precision='16-mixed'"):
        trainer.fit(model, *make_loaders())
    assert trainer.global_step == 0 and same_params(before, params_of(model))


def test_a_dict_with_loss_none_is_refused_at_its_batch():
    """Lightning refuses {"loss": None} as a dict without a loss; on a later batch too (surge checks
    the loss's type only on the first)."""

    class LossNoneAtTwo(TinyModel):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return {"loss": None} if batch_idx == 2 else loss

    trainer = fast_trainer(max_epochs=1, num_sanity_val_steps=0)
    with pytest.raises(surge.MisconfigurationError, match=r"without a 'loss' key .* at batch 2"):
        trainer.fit(LossNoneAtTwo(), *make_loaders())


class OptimizerReturns(TinyModel):
    def __init__(self, make):
        super().__init__()
        self._make = make

    def configure_optimizers(self):
        return self._make(self)


def _sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


OPTIMIZER_ERRORS = [
    ("none", lambda m: None, "returned None"),
    ("a-module", lambda m: m.net, "returned Sequential"),
    ("an-int", lambda m: 3, "returned int"),
    ("list-with-non-optimizer", lambda m: [object()], "not a torch.optim.Optimizer"),
    ("empty-list", lambda m: [], "no optimizer"),
    ("dict-without-optimizer", lambda m: {"lr_scheduler": None}, "'optimizer' (required)"),
    ("dict-unknown-key", lambda m: {"optimizer": _sgd(m), "scheduler": None}, "allowed"),
    (
        "scheduler-dict-unknown-key",
        lambda m: (
            lambda opt: {
                "optimizer": opt,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                    "intervall": "step",
                },
            }
        )(_sgd(m)),
        "intervall",
    ),
    (
        "scheduler-bad-interval",
        lambda m: (
            lambda opt: {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1), "interval": "batch"},
            }
        )(_sgd(m)),
        "interval",
    ),
    (
        "plateau-without-monitor",
        lambda m: (
            lambda opt: {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}
        )(_sgd(m)),
        "monitor",
    ),
]


@pytest.mark.parametrize(
    ("make", "phrase"), [c[1:] for c in OPTIMIZER_ERRORS], ids=[c[0] for c in OPTIMIZER_ERRORS]
)
def test_bad_configure_optimizers(make, phrase):
    model = OptimizerReturns(make)
    before = params_of(model)
    train, val = make_loaders()
    trainer = fast_trainer()
    with pytest.raises(surge.MisconfigurationError) as info:
        trainer.fit(model, train, val)
    message = str(info.value)
    assert any(where in message for where in ("configure_optimizers", "lr_scheduler", "ReduceLROnPlateau"))
    assert phrase in message, message
    assert trainer.global_step == 0
    assert same_params(before, params_of(model))


def test_plateau_monitoring_an_unlogged_metric():
    class Plateau(TinyModel):
        def configure_optimizers(self):
            opt = _sgd(self)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "nope"}}

    train, val = make_loaders()
    with pytest.raises(surge.MisconfigurationError, match="'nope'"):
        fast_trainer().fit(Plateau(), train, val)


def test_empty_train_dataloader():
    empty = DataLoader(TensorDataset(torch.empty(0, 4), torch.empty(0, dtype=torch.long)), batch_size=4)
    model = TinyModel()
    trainer = fast_trainer()
    with pytest.raises(surge.MisconfigurationError, match="empty") as info:
        trainer.fit(model, empty)
    assert "train dataloader" in str(info.value)
    assert trainer.global_step == 0


def test_fit_without_any_data():
    trainer = fast_trainer()
    with pytest.raises(surge.MisconfigurationError, match="no training data"):
        trainer.fit(TinyModel())


def test_fit_refuses_a_sequential_combined_loader_for_training():
    train, val = make_loaders()
    combined = surge.data.CombinedLoader([train, val], "sequential")
    trainer = fast_trainer()
    with pytest.raises(
        surge.MisconfigurationError, match='does not support the `CombinedLoader\\(mode="sequential"\\)`'
    ):
        trainer.fit(TinyModel(), combined)
    assert trainer.global_step == 0


def test_train_dataloaders_not_iterable():
    with pytest.raises(surge.SurgeTypeError, match="train_dataloaders"):
        fast_trainer().fit(TinyModel(), 42)


def test_val_check_interval_larger_than_the_epoch():
    train, val = make_loaders(n_train=32, batch_size=8)  # 4 batches
    trainer = fast_trainer(val_check_interval=10)
    model = TinyModel()
    before = params_of(model)
    with pytest.raises(surge.MisconfigurationError) as info:
        trainer.fit(model, train, val)
    message = str(info.value)
    assert (
        "`val_check_interval` (10) must be less than or equal to the number of the training batches (4)"
        in message
    )
    assert isinstance(info.value, ValueError)  # Lightning raises a ValueError with these words
    assert same_params(before, params_of(model))


def test_limit_train_batches_fraction_below_one_batch():
    train, val = make_loaders(n_train=32, batch_size=8)  # 4 batches
    with pytest.raises(surge.MisconfigurationError, match="limit_train_batches=0.1"):
        fast_trainer(limit_train_batches=0.1).fit(TinyModel(), train, val)


def test_model_that_is_not_a_surge_module():
    train, _ = make_loaders()
    with pytest.raises(surge.SurgeTypeError, match="surge.Module"):
        fast_trainer().fit(torch.nn.Linear(4, 2), train)


def test_module_without_training_step():
    class NoStep(surge.Module):
        def configure_optimizers(self):
            return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    train, _ = make_loaders()
    with pytest.raises(surge.MisconfigurationError, match="training_step"):
        fast_trainer().fit(NoStep(), train)


def test_test_without_test_step():
    class NoTestStep(TinyModel):
        test_step = surge.Module.test_step

    with pytest.raises(surge.MisconfigurationError, match="test_step"):
        fast_trainer().test(NoTestStep(), DataLoader(make_dataset(8), batch_size=4))


def test_ckpt_path_that_does_not_exist(tmp_path):
    train, val = make_loaders()
    missing = tmp_path / "nope.ckpt"
    with pytest.raises(surge.MisconfigurationError) as info:
        fast_trainer().fit(TinyModel(), train, val, ckpt_path=missing)
    assert "ckpt_path" in str(info.value) and str(missing) in str(info.value)


def test_early_stopping_on_a_metric_never_logged():
    train, val = make_loaders()
    trainer = fast_trainer(callbacks=[EarlyStopping(monitor="val_los")])
    with pytest.raises(RuntimeError, match="'val_los'") as info:  # Lightning's RuntimeError (strict=True)
        trainer.fit(TinyModel(), train, val)
    assert "val_loss" in str(info.value)  # it lists what was logged


def test_checkpoint_filename_with_an_unlogged_metric(tmp_path):
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{epoch}-{val_accuracy:.2f}")
    trainer = fast_trainer(enable_checkpointing=True, callbacks=[cb])
    trainer.fit(TinyModel(), train, val)
    # Lightning's documented rule: a field that was not logged is written as 0
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["epoch=0-val_accuracy=0.00.ckpt"]
