"""Trainer(effective_batch_size=...) equals the plain large batch; scale_lr scales rates once at setup."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader

import surge
from helpers import TinyModel, fast_trainer, make_dataset, params_of


def _fit(batch_size: int, **kwargs) -> tuple[TinyModel, surge.Trainer]:
    torch.manual_seed(0)
    model = TinyModel(lr=0.5)
    trainer = fast_trainer(max_epochs=2, **kwargs)
    trainer.fit(model, DataLoader(make_dataset(64), batch_size=batch_size))
    return model, trainer


@pytest.mark.parametrize(
    ("effective", "loader_batch", "micro", "accumulate"), [(32, 8, 8, 4), (32, 32, 32, 1), (16, 32, 16, 1)]
)
def test_effective_batch_size_matches_the_plain_large_batch(
    effective, loader_batch, micro, accumulate, caplog
):
    big, _ = _fit(effective)
    with caplog.at_level("INFO", logger="surge"):
        small, trainer = _fit(loader_batch, effective_batch_size=effective)
    assert trainer.accumulate_grad_batches == accumulate
    assert trainer.train_dataloader.batch_size == micro
    assert (
        f"effective_batch_size={effective}: micro-batch {micro} fits, so {accumulate} accumulation"
        in caplog.text
    )
    a, b = params_of(big), params_of(small)
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)


def test_micro_batch_is_evened_out_to_the_closest_effective_batch(caplog):
    with caplog.at_level("INFO", logger="surge"):
        _, trainer = _fit(12, effective_batch_size=32)
    # 12 fits -> ceil(32 / 12) = 3 steps -> micro-batch ceil(32 / 3) = 11: 33 samples per step.
    assert (trainer.train_dataloader.batch_size, trainer.accumulate_grad_batches) == (11, 3)
    assert "effective batch 33" in caplog.text


class WithScheduler(TinyModel):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=100)}


@pytest.mark.parametrize(("mode", "factor"), [("linear", 4.0), ("sqrt", 2.0)])
def test_scale_lr(mode, factor, caplog):
    trainer = fast_trainer(max_steps=1, scale_lr=mode, reference_batch_size=8, effective_batch_size=32)
    with caplog.at_level("INFO", logger="surge"):
        trainer.fit(WithScheduler(), DataLoader(make_dataset(64), batch_size=8))
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * factor)
    assert trainer.lr_scheduler_configs[0].scheduler.base_lrs == [pytest.approx(0.1 * factor)]
    assert f"learning rates x{factor:g}" in caplog.text


def test_scale_lr_uses_the_loader_batch_and_accumulation():
    trainer = fast_trainer(max_steps=1, scale_lr="sqrt", reference_batch_size=4, accumulate_grad_batches=2)
    trainer.fit(TinyModel(lr=0.1), DataLoader(make_dataset(64), batch_size=8))
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * math.sqrt(16 / 4))
