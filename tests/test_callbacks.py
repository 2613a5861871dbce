"""ModelCheckpoint, EarlyStopping, LearningRateMonitor and the order in which callback hooks run."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import surge
from helpers import TinyModel, fast_trainer, make_dataset, make_loaders, params_of, same_params
from surge.callbacks import Callback, EarlyStopping, EarlyStoppingReason, LearningRateMonitor, ModelCheckpoint
from surge.callbacks.base import CALLBACK_HOOKS
from surge.loggers import CSVLogger


def ckpt_names(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if p.suffix == ".ckpt"}


def no_temporaries(directory) -> bool:
    return not [p for p in directory.iterdir() if ".tmp-" in p.name]


def checkpoint_trainer(cb: ModelCheckpoint, **kw) -> surge.Trainer:
    return fast_trainer(enable_checkpointing=True, callbacks=[cb], **kw)


# -- ModelCheckpoint -------------------------------------------------------------------------


def test_filename_template_with_metric_formatting(tmp_path):
    model = TinyModel()
    train, val = make_loaders()
    cb = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{epoch}-{val_loss:.3f}", monitor="val_loss", save_top_k=-1
    )
    checkpoint_trainer(cb, max_epochs=3).fit(model, train, val)
    assert len(model.val_history) == 3
    expected = {f"epoch={e}-val_loss={v:.3f}.ckpt" for e, v in enumerate(model.val_history)}
    assert ckpt_names(tmp_path / "ckpt") == expected
    assert "epoch=2-val_loss=" in " ".join(expected)


def test_filename_without_auto_inserted_names(tmp_path):
    model = TinyModel(scripted_val_loss=[0.5, 0.25])
    train, val = make_loaders()
    cb = ModelCheckpoint(
        dirpath=tmp_path,
        filename="m-{epoch:02d}-{val_loss:.2f}",
        monitor="val_loss",
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    checkpoint_trainer(cb, max_epochs=2).fit(model, train, val)
    assert ckpt_names(tmp_path) == {"m-00-0.50.ckpt", "m-01-0.25.ckpt"}


def test_default_filename_is_epoch_and_step(tmp_path):
    train, val = make_loaders(n_train=32, batch_size=8)  # 4 steps per epoch
    cb = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    checkpoint_trainer(cb, max_epochs=2).fit(TinyModel(), train, val)
    assert ckpt_names(tmp_path) == {"epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"}


TOP_K_CASES = [
    # mode, scripted val_loss per epoch, epochs whose checkpoint must remain
    ("min", [0.5, 0.2, 0.3], {1, 2}),  # the first is replaced once a better one comes
    ("min", [0.2, 0.3, 0.5], {0, 1}),  # the worse third is never kept
    ("min", [0.2, 0.5, 0.3], {0, 2}),  # the one dropped is the most recently written
    ("min", [0.4, 0.4, 0.1], {1, 2}),  # on a tie the older checkpoint is dropped (as in Lightning)
    ("max", [0.5, 0.2, 0.3], {0, 2}),
    ("max", [0.1, 0.2, 0.3], {1, 2}),
]


@pytest.mark.parametrize(("mode", "values", "kept"), TOP_K_CASES)
def test_save_top_k_keeps_the_k_best(tmp_path, mode, values, kept):
    model = TinyModel(scripted_val_loss=values)
    train, val = make_loaders()
    cb = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{epoch}", monitor="val_loss", mode=mode, save_top_k=2
    )
    checkpoint_trainer(cb, max_epochs=3).fit(model, train, val)
    directory = tmp_path / "ckpt"
    assert ckpt_names(directory) == {f"epoch={e}.ckpt" for e in kept}
    assert no_temporaries(directory)
    pick = min if mode == "min" else max
    best_epoch = values.index(pick(values))
    assert model.val_history == values
    assert cb.best_model_path == str(directory / f"epoch={best_epoch}.ckpt")
    assert float(cb.best_model_score) == pytest.approx(pick(model.val_history), rel=1e-6)
    assert {k: pytest.approx(float(v), rel=1e-6) for k, v in cb.best_k_models.items()} == {
        str(directory / f"epoch={e}.ckpt"): pytest.approx(values[e], rel=1e-6) for e in kept
    }
    # Each kept file holds the state of its own epoch.
    steps_per_epoch = 4
    for e in kept:
        ckpt = torch.load(directory / f"epoch={e}.ckpt", weights_only=True)
        assert ckpt["epoch"] == e
        assert ckpt["global_step"] == (e + 1) * steps_per_epoch


def test_save_top_k_with_real_val_loss_matches_logged_minimum(tmp_path):
    model = TinyModel(lr=0.5)
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2)
    checkpoint_trainer(cb, max_epochs=3).fit(model, train, val)
    assert len(model.val_history) == 3
    assert len(ckpt_names(tmp_path)) == 2
    assert float(cb.best_model_score) == pytest.approx(min(model.val_history), rel=1e-5)
    best_epoch = model.val_history.index(min(model.val_history))
    assert torch.load(cb.best_model_path, weights_only=True)["epoch"] == best_epoch
    kept_scores = sorted(float(v) for v in cb.best_k_models.values())
    assert kept_scores == pytest.approx(sorted(model.val_history)[:2], rel=1e-5)


def test_save_top_k_minus_one_keeps_all(tmp_path):
    values = [0.3, 0.2, 0.9]
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", monitor="val_loss", save_top_k=-1)
    checkpoint_trainer(cb, max_epochs=3).fit(TinyModel(scripted_val_loss=values), train, val)
    assert ckpt_names(tmp_path) == {"epoch=0.ckpt", "epoch=1.ckpt", "epoch=2.ckpt"}
    assert cb.best_model_path == str(tmp_path / "epoch=1.ckpt")
    assert float(cb.best_model_score) == pytest.approx(0.2)


def test_save_top_k_zero_saves_no_ranked_files_but_last(tmp_path):
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=0, save_last=True)
    trainer = checkpoint_trainer(cb, max_epochs=2)
    trainer.fit(TinyModel(), train, val)
    assert ckpt_names(tmp_path) == {"last.ckpt"}
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == trainer.global_step


def test_without_monitor_keeps_the_latest_k(tmp_path):
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_top_k=2)
    checkpoint_trainer(cb, max_epochs=3).fit(TinyModel(), train, val)
    assert ckpt_names(tmp_path) == {"epoch=1.ckpt", "epoch=2.ckpt"}
    assert cb.best_model_path == str(tmp_path / "epoch=2.ckpt")
    assert cb.last_model_path == ""  # as in Lightning: only save_last sets it


@pytest.mark.parametrize("values", [[0.5, 0.4, 0.3], [0.1, 0.5, 0.6]], ids=["improving", "getting-worse"])
def test_save_last_writes_last_ckpt_whenever_a_checkpoint_is_written(tmp_path, values):
    """As Lightning 2.6: last.ckpt is written with each top-k file, so it holds the latest one's state."""
    model = TinyModel(scripted_val_loss=values)
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", monitor="val_loss", save_last=True)
    trainer = checkpoint_trainer(cb, max_epochs=3)
    trainer.fit(model, train, val)
    best_epoch = values.index(min(values))
    assert ckpt_names(tmp_path) == {"last.ckpt", f"epoch={best_epoch}.ckpt"}
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert trainer.global_step == 12
    latest = 2 if values == sorted(values, reverse=True) else 0  # the epoch of the latest top-k save
    assert (last["epoch"], last["global_step"]) == (latest, 4 * (latest + 1))
    best = torch.load(tmp_path / f"epoch={best_epoch}.ckpt", weights_only=True)
    assert same_params(last["state_dict"], best["state_dict"])
    assert same_params(last["state_dict"], params_of(model)) == (latest == 2)
    assert cb.last_model_path == str(tmp_path / "last.ckpt")
    assert cb.best_model_path == str(tmp_path / f"epoch={best_epoch}.ckpt")
    assert no_temporaries(tmp_path)


def test_save_last_link_is_a_relative_symlink_to_the_newest_file_that_never_dangles(tmp_path):
    """save_last="link" (Lightning's): last.ckpt points at the checkpoint just written; a top-k file
    it pointed to is deleted only once last.ckpt points at its replacement; a fit resumes from it."""

    class Watch(Callback):
        def on_train_epoch_start(self, trainer, module):
            last = tmp_path / "last.ckpt"
            if trainer.current_epoch > 0:
                assert last.is_symlink() and last.resolve().is_file()

    model = TinyModel(scripted_val_loss=[0.5, 0.4, 0.3])
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", monitor="val_loss", save_last="link")
    trainer = fast_trainer(enable_checkpointing=True, callbacks=[cb, Watch()], max_epochs=3)
    trainer.fit(model, train, val)
    last = tmp_path / "last.ckpt"
    assert ckpt_names(tmp_path) == {"last.ckpt", "epoch=2.ckpt"}
    assert last.is_symlink() and Path(last.readlink()) == Path("epoch=2.ckpt")  # relative, as Lightning's
    again = checkpoint_trainer(ModelCheckpoint(dirpath=tmp_path / "again"), max_epochs=4)
    again.fit(TinyModel(), train, val, ckpt_path=str(last))
    assert again.global_step == 16 and no_temporaries(tmp_path)


def test_every_n_train_steps(tmp_path):
    train, val = make_loaders(n_train=40, batch_size=8)  # 5 steps per epoch, 10 in all
    cb = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    trainer = checkpoint_trainer(cb, max_epochs=2)
    trainer.fit(TinyModel(), train, val)
    assert trainer.global_step == 10
    assert ckpt_names(tmp_path) == {"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt", "epoch=1-step=9.ckpt"}
    for step in (3, 6, 9):
        (path,) = tmp_path.glob(f"*step={step}.ckpt")
        assert torch.load(path, weights_only=True)["global_step"] == step


def test_every_n_train_steps_with_accumulation_counts_optimizer_steps(tmp_path):
    train, val = make_loaders(n_train=64, batch_size=8)  # 8 batches, 4 optimizer steps per epoch
    cb = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    trainer = checkpoint_trainer(cb, max_epochs=1, accumulate_grad_batches=2)
    trainer.fit(TinyModel(), train, val)
    assert trainer.global_step == 4
    assert ckpt_names(tmp_path) == {"epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"}


def test_default_dirpath_is_under_the_log_dir():
    train, val = make_loaders()
    trainer = fast_trainer(enable_checkpointing=True, logger=True, max_epochs=1)
    trainer.fit(TinyModel(), train, val)
    cb = trainer.checkpoint_callback
    assert isinstance(cb, ModelCheckpoint)
    assert cb.dirpath == str(Path(trainer.log_dir) / "checkpoints")  # a str, as Lightning's
    assert ckpt_names(Path(cb.dirpath)) == {"epoch=0-step=4.ckpt"}


def test_best_checkpoint_is_what_test_ckpt_path_best_loads(tmp_path):
    values = [0.1, 0.5, 0.7]  # the first epoch is the best
    model = TinyModel(scripted_val_loss=values, lr=0.5)
    train, val = make_loaders()
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss")
    trainer = checkpoint_trainer(cb, max_epochs=3)
    trainer.fit(model, train, val)
    best = torch.load(cb.best_model_path, weights_only=True)
    assert best["epoch"] == 0
    final = params_of(model)
    assert not same_params(final, best["state_dict"])  # training moved on after the best epoch

    results = trainer.test(model, DataLoader(make_dataset(16, seed=5), batch_size=8), ckpt_path="best")
    assert same_params(params_of(model), best["state_dict"])
    assert len(results) == 1 and {"test_loss", "test_acc"} <= set(results[0])

    # The metric it reports is that of the best weights.
    fresh = TinyModel()
    fresh.load_state_dict(best["state_dict"])
    x, y = make_dataset(16, seed=5).tensors
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(fresh(x), y).item()
    assert results[0]["test_loss"] == pytest.approx(expected, rel=1e-5)


def test_ckpt_path_best_without_a_saved_checkpoint():
    train, val = make_loaders()
    trainer = fast_trainer()
    model = TinyModel()
    trainer.fit(model, train, val)
    with pytest.raises(surge.MisconfigurationError, match="best"):
        trainer.test(model, val, ckpt_path="best")


# -- EarlyStopping ---------------------------------------------------------------------------


class EpochCounter(TinyModel):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.epochs_started = 0

    def on_train_epoch_start(self):
        self.epochs_started += 1


def test_early_stopping_stops_when_val_loss_never_improves():
    model = EpochCounter(lr=0.0)  # nothing changes: val_loss is the same every epoch
    train, val = make_loaders()
    es = EarlyStopping(monitor="val_loss", patience=2)
    trainer = fast_trainer(max_epochs=8, callbacks=[es])
    trainer.fit(model, train, val)
    # epoch 0 sets the best; epochs 1 and 2 do not improve -> stop after 3 epochs.
    assert model.epochs_started == 3
    assert len(model.val_history) == 3 and len(set(model.val_history)) == 1
    assert trainer.current_epoch == 3
    assert es.stopped_epoch == 2
    assert es.wait_count == 2
    assert trainer.should_stop
    assert es.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "val_loss" in es.stopping_reason_message


def test_early_stopping_patience_counts_from_the_last_improvement():
    # improves at epochs 0, 1, 3; then no improvement at 4, 5 -> stops after epoch 5.
    values = [0.9, 0.8, 0.85, 0.7, 0.75, 0.71, 0.1, 0.1]
    model = EpochCounter(scripted_val_loss=values)
    train, val = make_loaders()
    es = EarlyStopping(monitor="val_loss", patience=2)
    trainer = fast_trainer(max_epochs=8, callbacks=[es])
    trainer.fit(model, train, val)
    assert model.epochs_started == 6
    assert float(es.best_score) == pytest.approx(0.7)
    assert es.stopped_epoch == 5


def test_early_stopping_mode_max_and_min_delta():
    values = [0.5, 0.505, 0.509, 0.6, 0.6]  # +0.005 and +0.009 are below min_delta=0.01
    model = EpochCounter(scripted_val_loss=values)
    train, val = make_loaders()
    es = EarlyStopping(monitor="val_loss", mode="max", patience=2, min_delta=0.01)
    fast_trainer(max_epochs=5, callbacks=[es]).fit(model, train, val)
    assert model.epochs_started == 3
    assert float(es.best_score) == pytest.approx(0.5)


def test_early_stopping_respects_min_epochs():
    model = EpochCounter(lr=0.0)
    train, val = make_loaders()
    es = EarlyStopping(monitor="val_loss", patience=2)
    trainer = fast_trainer(max_epochs=8, min_epochs=5, callbacks=[es])
    trainer.fit(model, train, val)
    assert model.epochs_started == 5
    assert trainer.current_epoch == 5


def test_early_stopping_stops_on_a_non_finite_metric():
    model = EpochCounter(scripted_val_loss=[0.5, math.nan, 0.1, 0.1])
    train, val = make_loaders()
    es = EarlyStopping(monitor="val_loss", patience=3)
    fast_trainer(max_epochs=4, callbacks=[es]).fit(model, train, val)
    assert model.epochs_started == 2
    assert es.stopping_reason is EarlyStoppingReason.NON_FINITE_METRIC
    assert "not finite" in es.stopping_reason_message


# -- LearningRateMonitor ---------------------------------------------------------------------


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_lr_monitor_follows_an_epoch_step_lr(tmp_path):
    model = TinyModel(lr=0.1, scheduler="step_epoch")  # StepLR(step_size=1, gamma=0.5)
    train, val = make_loaders(n_train=32, batch_size=8)  # 4 steps per epoch
    logger = CSVLogger(tmp_path)
    trainer = fast_trainer(
        max_epochs=3, logger=logger, callbacks=[LearningRateMonitor(logging_interval="epoch")]
    )
    trainer.fit(model, train, val)
    # as Lightning's: in callback_metrics, not in logged_metrics (what the module logged)
    assert trainer.callback_metrics["lr-SGD"].item() == pytest.approx(0.025)
    assert "lr-SGD" not in trainer.logged_metrics
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0125)
    rows = [(int(r["step"]), float(r["lr-SGD"])) for r in read_csv(logger.metrics_path) if r["lr-SGD"]]
    assert rows == [(0, pytest.approx(0.1)), (4, pytest.approx(0.05)), (8, pytest.approx(0.025))]


def test_lr_monitor_follows_a_per_step_step_lr(tmp_path):
    model = TinyModel(lr=0.1, scheduler="step_step")  # StepLR(step_size=2, gamma=0.5), stepped per step
    train, val = make_loaders(n_train=48, batch_size=8)  # 6 steps
    logger = CSVLogger(tmp_path)
    trainer = fast_trainer(
        max_epochs=1,
        logger=logger,
        log_every_n_steps=1,
        callbacks=[LearningRateMonitor(logging_interval="step")],
    )
    trainer.fit(model, train, val)
    rows = [(int(r["step"]), float(r["lr-SGD"])) for r in read_csv(logger.metrics_path) if r["lr-SGD"]]
    # as Lightning: logged before each batch, at the steps taken before it, the lr that batch uses
    assert rows == [(s, pytest.approx(0.1 * 0.5 ** (s // 2))) for s in range(6)]
    assert trainer.callback_metrics["lr-SGD"].item() == pytest.approx(0.1 * 0.5**2)


def test_lr_monitor_names_param_groups(tmp_path):
    class TwoGroups(TinyModel):
        def configure_optimizers(self):
            return torch.optim.SGD(
                [
                    {"params": self.net[0].parameters(), "lr": 0.1},
                    {"params": self.net[2].parameters(), "lr": 0.01},
                ],
                momentum=0.9,
            )

    train, val = make_loaders()
    trainer = fast_trainer(callbacks=[LearningRateMonitor(logging_interval="epoch", log_momentum=True)])
    trainer.fit(TwoGroups(), train, val)
    logged = {k: v.item() for k, v in trainer.callback_metrics.items() if k.startswith("lr-")}
    assert logged == {
        "lr-SGD/pg1": pytest.approx(0.1),
        "lr-SGD/pg2": pytest.approx(0.01),
        "lr-SGD/pg1-momentum": pytest.approx(0.9),  # Lightning 2.6's names
        "lr-SGD/pg2-momentum": pytest.approx(0.9),
    }


# -- hook order ------------------------------------------------------------------------------

RECORDED = [
    "setup",
    "on_fit_start",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
    "teardown",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
]


def _recorder(name):
    def hook(self, trainer, module, *args, **kwargs):  # setup/teardown get stage= (as in Lightning)
        assert isinstance(trainer, surge.Trainer) and isinstance(module, surge.Module)
        self.calls.append(name)

    hook.__name__ = name
    return hook


Recorder = type(
    "Recorder",
    (Callback,),
    {"__init__": lambda self: setattr(self, "calls", []), **{n: _recorder(n) for n in RECORDED}},
)


class BatchArgs(Callback):
    def __init__(self):
        self.train_batches: list[int] = []
        self.outputs_detached: list[bool] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.train_batches.append(batch_idx)
        self.outputs_detached.append(
            isinstance(outputs["loss"], torch.Tensor) and not outputs["loss"].requires_grad
        )


def _expected_calls(epochs: int, train_batches: int, val_batches: int, sanity_batches: int) -> list[str]:
    def validation(n):
        calls = ["on_validation_start", "on_validation_epoch_start"]
        calls += ["on_validation_batch_start", "on_validation_batch_end"] * n
        return calls + ["on_validation_epoch_end", "on_validation_end"]

    calls = ["setup", "on_fit_start", "on_sanity_check_start", *validation(sanity_batches)]
    calls += ["on_sanity_check_end", "on_train_start"]
    step = [
        "on_train_batch_start",
        "on_before_zero_grad",  # each window's first micro-batch, before its backward (Lightning)
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_train_batch_end",
    ]
    for _ in range(epochs):
        calls += ["on_train_epoch_start", *step * train_batches, *validation(val_batches)]
        calls += ["on_train_epoch_end"]
    return calls + ["on_train_end", "on_fit_end", "teardown"]


def test_callback_hook_order_during_fit():
    rec, args = Recorder(), BatchArgs()
    train, val = make_loaders(n_train=16, n_val=16, batch_size=8)  # 2 train, 2 val batches
    trainer = fast_trainer(max_epochs=2, num_sanity_val_steps=1, callbacks=[rec, args])
    trainer.fit(TinyModel(), train, val)
    assert rec.calls == _expected_calls(epochs=2, train_batches=2, val_batches=2, sanity_batches=1)
    assert args.train_batches == [0, 1, 0, 1]
    assert all(args.outputs_detached)
    # the coarse order the brief names
    order = [
        "on_fit_start",
        "on_train_start",
        "on_train_epoch_start",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_validation_start",
        "on_train_epoch_end",
        "on_train_end",
        "on_fit_end",
    ]
    position = -1
    for name in order:
        position = rec.calls.index(name, position + 1)  # raises if it does not come after the previous
    assert position == len(rec.calls) - 2  # on_fit_end, then teardown


def test_callback_hooks_not_overridden_are_never_called(monkeypatch):
    """The base class's no-ops are swapped for spies: a hook a callback does not override must
    never be looked up and called on it."""
    spied: list[str] = []

    def spy(name):
        def hook(self, *args, **kwargs):
            spied.append(f"{type(self).__name__}.{name}")

        return hook

    class OnlyTrainStart(Callback):
        def __init__(self):
            self.calls = 0

        def on_train_start(self, trainer, module):
            self.calls += 1

    for name in CALLBACK_HOOKS:
        if name != "on_train_start":
            monkeypatch.setattr(Callback, name, spy(name))
    cb = OnlyTrainStart()
    train, val = make_loaders()
    model = TinyModel()
    trainer = fast_trainer(max_epochs=2, num_sanity_val_steps=1, callbacks=[cb])
    trainer.fit(model, train, val)
    trainer.validate(model, val)
    trainer.test(model, val)
    trainer.predict(model, DataLoader(make_dataset(8).tensors[0], batch_size=4))
    assert cb.calls == 1
    assert spied == []


def test_evaluation_hooks_for_test_and_predict():
    names = [
        "on_test_start",
        "on_test_epoch_start",
        "on_test_batch_start",
        "on_test_batch_end",
        "on_test_epoch_end",
        "on_test_end",
        "on_predict_start",
        "on_predict_epoch_start",
        "on_predict_batch_start",
        "on_predict_batch_end",
        "on_predict_epoch_end",
        "on_predict_end",
    ]
    rec = type(
        "EvalRecorder",
        (Callback,),
        {"__init__": lambda self: setattr(self, "calls", []), **{n: _recorder(n) for n in names}},
    )()
    model = TinyModel()
    trainer = fast_trainer(callbacks=[rec])
    trainer.test(model, DataLoader(make_dataset(8), batch_size=4))  # 2 batches
    assert rec.calls == [
        "on_test_start",
        "on_test_epoch_start",
        *["on_test_batch_start", "on_test_batch_end"] * 2,
        "on_test_epoch_end",
        "on_test_end",
    ]
    rec.calls.clear()
    preds = trainer.predict(model, DataLoader(make_dataset(8).tensors[0], batch_size=4))
    assert len(preds) == 2 and preds[0].shape == (4, 2)
    assert rec.calls == [
        "on_predict_start",
        "on_predict_epoch_start",
        *["on_predict_batch_start", "on_predict_batch_end"] * 2,
        "on_predict_epoch_end",
        "on_predict_end",
    ]


def test_on_exception_is_called_with_the_error():
    class Boom(TinyModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                raise ValueError("boom")
            return super().training_step(batch, batch_idx)

    class Catch(Callback):
        def __init__(self):
            self.errors: list[BaseException] = []

        def on_exception(self, trainer, module, err):
            self.errors.append(err)

    cb = Catch()
    train, val = make_loaders()
    trainer = fast_trainer(callbacks=[cb])
    with pytest.raises(ValueError, match="boom"):
        trainer.fit(Boom(), train, val)
    assert len(cb.errors) == 1 and str(cb.errors[0]) == "boom"
    assert trainer.state.status == "interrupted" and trainer.interrupted


def test_train_time_interval_saves_inside_a_long_epoch(tmp_path):
    import time as _time

    from helpers import TinyModel, fast_trainer, make_loaders

    class Slow(TinyModel):
        def training_step(self, batch, batch_idx):
            _time.sleep(0.03)
            return super().training_step(batch, batch_idx)

    cb = ModelCheckpoint(dirpath=tmp_path, train_time_interval=0.1, save_top_k=-1)
    trainer = fast_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[cb], default_root_dir=tmp_path)
    trainer.fit(Slow(), make_loaders(n_train=128, batch_size=8)[0])  # 16 steps, about 0.5 s
    steps = sorted(int(p.stem.split("step=")[1]) for p in tmp_path.glob("*.ckpt"))
    assert len(steps) >= 3 and steps[0] < 16  # saved during the epoch, not only at its end
    assert cb.every_n_epochs == 0


@pytest.mark.parametrize("bad", [-1.0, "1h", True])
def test_train_time_interval_must_be_positive_seconds(bad):
    with pytest.raises(ValueError, match="train_time_interval"):
        ModelCheckpoint(train_time_interval=bad)
    with pytest.raises(ValueError, match="should be mutually exclusive"):
        ModelCheckpoint(train_time_interval=5, every_n_train_steps=10)
