"""Validation every `val_check_interval` batches counted across epochs
(`check_val_every_n_epoch=None`): an interval that does not divide the epoch, one longer than the
epoch, with gradient accumulation; where validation ran and the batch count Lightning reports."""

import lightning.pytorch as pl
import record
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader


class Recording(BoringModel):
    def validation_step(self, batch, batch_idx):
        record.append(f"{RUN}/validated_after", self.trainer.fit_loop.total_batch_idx + 1)
        return super().validation_step(batch, batch_idx)

    def on_train_epoch_end(self):
        record.append(
            f"{RUN}/epoch_end",
            [self.trainer.fit_loop.total_batch_idx, self.trainer.progress_bar_callback.total_val_batches],
        )

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4))


RUNS = {
    "every_3": dict(max_epochs=3, val_check_interval=3),
    "every_6_accumulating": dict(max_steps=6, val_check_interval=6, accumulate_grad_batches=2),
    "every_5": dict(max_epochs=4, val_check_interval=5, limit_train_batches=3),
}
for RUN, kwargs in RUNS.items():
    pl.seed_everything(3)
    trainer = pl.Trainer(
        check_val_every_n_epoch=None, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip
    trainer.fit(Recording())
    record.put(f"{RUN}/end", [trainer.global_step, trainer.check_val_every_n_epoch, trainer.num_val_batches])
    record.weights(RUN, trainer.lightning_module)
