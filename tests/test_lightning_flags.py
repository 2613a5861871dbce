"""Trainer flags as Lightning users observe them: the info lines for a limit of 1 or 1.0, the batch
counts a fit reports, and overfit_batches' reading of the loaders."""

from __future__ import annotations

import logging

import pytest
import torch

from surge import Trainer
from surge.errors import MisconfigurationError
from surge.lightning.demos.boring_classes import BoringModel


def said(caplog: pytest.LogCaptureFixture, **kwargs: object) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="surge"):
        Trainer(logger=False, enable_progress_bar=False, **kwargs)  # type: ignore[arg-type]
    return [r.getMessage() for r in caplog.records if "was configured" in r.getMessage()]


def test_an_explicit_one_says_how_it_is_read(caplog):
    assert said(caplog, limit_train_batches=1) == [
        "`Trainer(limit_train_batches=1)` was configured so 1 batch per epoch will be used."
    ]
    assert said(caplog, limit_val_batches=1.0) == [
        "`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be used."
    ]
    assert said(caplog, val_check_interval=1) == [
        "`Trainer(val_check_interval=1)` was configured so validation will run after every batch."
    ]
    assert said(caplog, limit_test_batches=2, limit_predict_batches=0.5) == []
    assert said(caplog) == []  # the defaults are not "given"


def test_fast_dev_run_and_overfit_batches_replace_the_limits_they_set(caplog):
    # overfit_batches sets the train/val limits: only it is said; fast_dev_run sets all of them.
    assert said(caplog, overfit_batches=1, limit_train_batches=1, limit_test_batches=1) == [
        "`Trainer(overfit_batches=1)` was configured so 1 batch will be used.",
        "`Trainer(limit_test_batches=1)` was configured so 1 batch will be used.",
    ]
    assert said(caplog, fast_dev_run=True, limit_test_batches=1, overfit_batches=1.0) == [
        "`Trainer(overfit_batches=1.0)` was configured so 100% of the batches will be used."
    ]


def test_a_fraction_with_validation_across_epochs_is_refused_in_lightnings_words():
    with pytest.raises(
        MisconfigurationError, match=r"`val_check_interval` should be an integer or a time-based"
    ):
        Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)
    with pytest.raises(MisconfigurationError, match=r"check_val_every_n_epoch=None \(validation every"):
        Trainer(check_val_every_n_epoch=None)  # the mode itself is refused (docs/lightning.md)


def test_an_interval_longer_than_the_epoch_is_a_value_error_unless_nothing_validates(tmp_path):
    def fit(**kwargs: object) -> Trainer:
        trainer = Trainer(
            default_root_dir=tmp_path, max_epochs=1, limit_train_batches=10, val_check_interval=100,
            logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs,  # type: ignore[arg-type]
        )  # fmt: skip
        trainer.fit(BoringModel())
        return trainer

    with pytest.raises(ValueError, match="must be less than or equal to the number of the training batches"):
        fit()
    assert fit(limit_val_batches=0).global_step == 10


def test_the_tuners_are_skipped_with_a_warning_under_fast_dev_run(tmp_path):
    from surge.lightning.tuner import Tuner

    model = BoringModel()
    model.lr, model.batch_size = 0.1, 8
    before = [p.detach().clone() for p in model.parameters()]
    tuner = Tuner(Trainer(default_root_dir=tmp_path, fast_dev_run=True, enable_progress_bar=False))
    with pytest.warns(UserWarning, match="Skipping learning rate finder since `fast_dev_run` is enabled."):
        assert tuner.lr_find(model) is None
    with pytest.warns(UserWarning, match="Skipping batch size scaler since `fast_dev_run` is enabled."):
        assert tuner.scale_batch_size(model) is None
    assert (model.lr, model.batch_size) == (0.1, 8)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


class InOrder(torch.utils.data.Sampler):
    """A sampler of the user's own (reads in order, but is not a SequentialSampler)."""

    def __init__(self, data: torch.utils.data.Dataset) -> None:
        self.n = len(data)  # type: ignore[arg-type]

    def __iter__(self):  # noqa: ANN204
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def test_overfit_batches_reads_fits_loaders_in_order_and_says_so(tmp_path):
    from torch.utils.data import DataLoader, SequentialSampler

    from surge.lightning.demos.boring_classes import RandomDataset

    data = RandomDataset(32, 64)
    trainer = Trainer(
        default_root_dir=tmp_path, max_epochs=1, overfit_batches=2, logger=False, enable_progress_bar=False
    )
    with pytest.warns(UserWarning) as seen:
        trainer.fit(BoringModel(), DataLoader(data, sampler=InOrder(data)), DataLoader(data, shuffle=True))
    said = [str(w.message) for w in seen if "overfit" in str(w.message)]
    assert said == [  # val first: Lightning asks for the val loader at the sanity check, train after it
        "You requested to overfit but enabled val dataloader shuffling. We are turning off the val "
        "dataloader shuffling for you.",
        "You requested to overfit but enabled train dataloader shuffling. We are turning off the train "
        "dataloader shuffling for you.",
    ]
    assert isinstance(trainer.train_dataloader.sampler, SequentialSampler)
    assert isinstance(trainer.val_dataloaders.sampler, SequentialSampler)  # the one loader given
    assert trainer.num_training_batches == 2 and trainer.num_val_batches == [2]
