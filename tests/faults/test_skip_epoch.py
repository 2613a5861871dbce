"""`on_train_batch_start` returning -1 ends the epoch at that batch (Lightning's contract): the
run goes on with the next epoch and stops at max_epochs, instead of asking for the same batch
again forever. The expected calls are what Lightning 2.6 makes for this module."""

from __future__ import annotations

import signal

import pytest
import torch
from torch.utils.data import DataLoader

import surge


class SkipAt(surge.Module):
    def __init__(self, skip_at: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.skip_at = skip_at
        self.calls: list[tuple] = []

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(("start", self.current_epoch, batch_idx))
        if len(self.calls) > 100:
            raise RuntimeError("the same epoch keeps asking for batches")
        return -1 if batch_idx == self.skip_at else None

    def training_step(self, batch, batch_idx):
        self.calls.append(("step", self.current_epoch, batch_idx))
        return self.layer(batch).sum()

    def validation_step(self, batch, batch_idx):
        self.calls.append(("val", self.current_epoch, batch_idx))

    def on_train_epoch_end(self):
        self.calls.append(("epoch_end", self.current_epoch))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)]


def fit(skip_at: int) -> tuple[SkipAt, surge.Trainer]:
    model = SkipAt(skip_at)
    trainer = surge.Trainer(
        max_epochs=3, limit_train_batches=5, limit_val_batches=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
    )  # fmt: skip
    train, val = DataLoader(torch.randn(20, 4), batch_size=2), DataLoader(torch.randn(4, 4), batch_size=2)
    signal.alarm(60)  # a loop that never ends fails the test instead of hanging the suite
    try:
        trainer.fit(model, train, val)
    finally:
        signal.alarm(0)
    return model, trainer


@pytest.mark.parametrize("skip_at", [0, 2])
def test_minus_one_ends_the_epoch_and_the_run_goes_on(skip_at):
    model, trainer = fit(skip_at)
    expected = []
    for epoch in range(3):
        for i in range(skip_at):
            expected += [("start", epoch, i), ("step", epoch, i)]
        expected += [("start", epoch, skip_at), ("epoch_end", epoch)]  # no validation: the epoch was cut
    assert model.calls == expected
    assert trainer.global_step == 3 * skip_at
    assert trainer.current_epoch == 3
    # the epoch scheduler steps at the cut, as at an epoch's last batch: 0.1 * 0.5**3
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0125)
