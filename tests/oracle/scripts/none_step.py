"""training_step returning None on some batches (1, 4 and 5 of 8), with and without accumulation
(and with a backward of its own before returning None):
the hooks around backward, zero_grad and the optimizer step, global_step, a step-interval scheduler's
learning rate, what on_train_batch_end gets, the warning and the weights."""

import warnings

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

SKIP = {1, 4, 5}


class Skipping(BoringModel):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        if batch_idx in SKIP and self.run == "own_backward":
            out["loss"].backward()  # gradients of its own, then None: zeroed at the window's start
        return None if batch_idx in SKIP else out

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return [opt], [{"scheduler": sched, "interval": "step"}]

    def on_before_backward(self, loss):
        record.append(f"{self.run}/events", "before_backward")

    def on_after_backward(self):
        record.append(f"{self.run}/events", "after_backward")

    def on_before_optimizer_step(self, optimizer):
        record.append(f"{self.run}/events", f"before_optimizer_step global_step={self.trainer.global_step}")

    def on_before_zero_grad(self, optimizer):
        record.append(f"{self.run}/events", "before_zero_grad")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        record.append(
            f"{self.run}/events",
            f"batch_end {batch_idx} outputs={sorted(outputs)} global_step={self.trainer.global_step} lr={lr}",
        )


RUNS = {
    "plain": {},
    "accumulate": dict(accumulate_grad_batches=2),
    "own_backward": dict(accumulate_grad_batches=2),
}
for run, kwargs in RUNS.items():
    pl.seed_everything(1)
    model = Skipping(run)
    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=8, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_model_summary=False, enable_progress_bar=False, **kwargs,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    record.put(
        f"{run}/warned", any("returned" in str(w.message) and "None" in str(w.message) for w in caught)
    )
    record.put(f"{run}/global_step", trainer.global_step)
    record.weights(run, model)
