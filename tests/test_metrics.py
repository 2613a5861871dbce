"""`self.log(name, metric)` with a torchmetrics Metric: updated per step, computed and reset per epoch.
(torchmetrics is imported where used: its import takes seconds in every worker that collects.)"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from helpers import TinyModel, fast_trainer, make_dataset
from surge import MisconfigurationError


class Metered(TinyModel):
    """TinyModel with a macro F1 on validation and a sample counter on training."""

    def __init__(self, step_update: str = "forward") -> None:
        import torchmetrics

        super().__init__()
        self.step_update = step_update
        self.val_f1 = torchmetrics.classification.MulticlassF1Score(num_classes=2, average="macro")
        self.train_seen = torchmetrics.SumMetric()

    def training_step(self, batch, batch_idx):
        x, _ = batch
        size = torch.tensor(float(len(x)))
        if self.step_update == "forward":
            self.train_seen(size)
        else:
            self.train_seen.update(size)
        self.log("seen", self.train_seen, on_step=True, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_f1(self(x), y)
        self.log("val_f1", self.val_f1)


def loaders(n_train: int = 20, n_val: int = 20) -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(make_dataset(n_train), batch_size=8),
        DataLoader(make_dataset(n_val, seed=3), batch_size=8),
    )


def test_epoch_value_is_the_metric_computed_over_the_epoch():
    import torchmetrics

    train, val = loaders()
    model = Metered()
    trainer = fast_trainer(max_epochs=2, num_sanity_val_steps=2)
    trainer.fit(model, train, val)
    after_fit = dict(trainer.callback_metrics)  # validate() starts them empty, as Lightning does
    x, y = val.dataset.tensors
    expected = torchmetrics.functional.classification.multiclass_f1_score(model(x), y, 2, average="macro")
    batch_mean = sum(
        len(xb)
        * torchmetrics.functional.classification.multiclass_f1_score(model(xb), yb, 2, average="macro")
        for xb, yb in val
    ) / len(x)
    assert abs(float(expected) - float(batch_mean)) > 1e-3  # the test can tell compute() from a mean
    metrics = trainer.validate(model, dataloaders=val)[0]
    assert metrics["val_f1"] == pytest.approx(float(expected), abs=1e-6)
    # Reset between epochs: the counter holds one epoch's samples, not two (and no sanity batches).
    assert after_fit["seen_epoch"].item() == 20.0
    assert after_fit["seen_step"].item() == 4.0  # the last batch's own value (forward)


def test_sanity_check_does_not_leak_into_the_first_validation():
    import torchmetrics

    class Counting(Metered):
        def __init__(self) -> None:
            super().__init__()
            self.val_seen = torchmetrics.SumMetric()

        def validation_step(self, batch, batch_idx):
            self.val_seen.update(torch.tensor(float(len(batch[0]))))  # update() alone: epoch value only
            self.log("val_seen", self.val_seen)

    model = Counting()
    trainer = fast_trainer(max_epochs=1, num_sanity_val_steps=1)
    trainer.fit(model, *loaders())
    assert trainer.callback_metrics["val_seen"].item() == 20.0  # not 28: the sanity batch was dropped
    assert model.val_seen.update_count == 0  # reset once the evaluation read it


def test_a_step_value_needs_the_metric_to_be_called():
    train, val = loaders()
    with pytest.raises(MisconfigurationError, match=r"'seen'.*on_step=False"):
        fast_trainer(max_epochs=1).fit(Metered(step_update="update"), train)
