"""ModelCheckpoint ranking a step-level metric at step saves (`every_n_train_steps`): each file is
ranked by the value of the step it was saved at, whatever `log_every_n_steps` and with or without a
logger. (Before: step values reached `callback_metrics` only at log intervals, so files were ranked
by stale values and the truly best one could be deleted; with `logger=False` nothing was saved.)"""

from __future__ import annotations

import pytest
import torch

from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import ModelCheckpoint
from surge.loggers import CSVLogger

# the metric logged by the batches that make global steps 1..12 (SCRIPTED[s - 1] for step s)
SCRIPTED = [9.0, 3.36, 7.0, 5.0, 6.0, 0.32, 8.0, 4.0, 1.0, 2.5, 0.1, 3.0]


class ScriptedStepMetric(TinyModel):
    """Logs `SCRIPTED[global_step]` as `metric` at each training step (on_step only)."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("metric", torch.tensor(SCRIPTED[self.global_step]), on_step=True, on_epoch=False)
        return loss


@pytest.mark.parametrize("logger", ["none", "csv"])
def test_step_saves_rank_by_the_value_at_their_step(tmp_path, logger):
    train, val = make_loaders(n_train=32, batch_size=8)  # 4 steps per epoch, 3 epochs
    cb = ModelCheckpoint(
        dirpath=tmp_path / "ckpts", monitor="metric", save_top_k=2, every_n_train_steps=2, filename="{step}"
    )
    trainer = fast_trainer(
        max_epochs=3,
        callbacks=[cb],
        enable_checkpointing=True,
        logger=CSVLogger(tmp_path / "logs") if logger == "csv" else False,
        log_every_n_steps=50,  # never reached: nothing is published for the loggers during the fit
    )
    trainer.fit(ScriptedStepMetric(), train, val)
    at_saves = {step: SCRIPTED[step - 1] for step in range(2, 13, 2)}
    best_two = sorted(at_saves, key=at_saves.__getitem__)[:2]
    assert best_two == [6, 10]  # 0.32 and 2.5
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == sorted(
        f"step={s}.ckpt" for s in best_two
    )
    assert float(cb.best_model_score) == pytest.approx(0.32)
    assert cb.best_model_path.endswith("step=6.ckpt")
    assert torch.load(cb.best_model_path, weights_only=True)["global_step"] == 6
    assert {k.rsplit("/", 1)[1]: round(float(v), 4) for k, v in cb.best_k_models.items()} == {
        "step=6.ckpt": 0.32,
        "step=10.ckpt": 2.5,
    }


def test_callback_metrics_show_the_step_value_without_a_host_read():
    """During training a read of `callback_metrics` gives the current step's value as the logged
    tensor's own storage (no copy to the host was made for it)."""
    seen = []

    class Keep(TinyModel):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.logged = loss.detach()
            return loss

        def on_train_batch_end(self, outputs, batch, batch_idx):
            shown = self.trainer.callback_metrics["train_loss"]
            seen.append(shown.device == self.logged.device and shown.data_ptr() == self.logged.data_ptr())

    train, val = make_loaders(n_train=16, batch_size=8)
    fast_trainer(max_epochs=1).fit(Keep(), train, val)
    assert seen == [True, True]
