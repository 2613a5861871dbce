"""What hooks see around the optimizer step, one run per point, with accumulation where it matters:
the loss `on_train_batch_end` gets, the gradients there, what `optimizer.step(closure)` returns in an
overridden `optimizer_step`, a step-interval scheduler's `frequency`, `on_train_batch_start`
returning -1, `should_stop` set inside a window, a backward of the step's own before it returns
the loss, and where `LearningRateMonitor`'s values show."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger


class Points(BoringModel):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        frequency = 2 if self.run == "frequency" else 1
        return [opt], [{"scheduler": sched, "interval": "step", "frequency": frequency}]

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        if self.run == "stop" and batch_idx == 2:  # the first batch of the second window
            self.trainer.should_stop = True
        if self.run == "own_backward":
            out["loss"].backward(retain_graph=True)  # dropped at the window's first batch (zero_grad)
        return out

    def on_train_batch_start(self, batch, batch_idx):
        if self.run == "cut" and batch_idx == 3:
            return -1
        return None

    def on_train_batch_end(self, outputs, batch, batch_idx):
        grad = self.layer.weight.grad
        record.append(f"{self.run}/events", [
            "batch_end", batch_idx, float(outputs["loss"]), self.trainer.global_step,
            self.trainer.optimizers[0].param_groups[0]["lr"], None if grad is None else float(grad.abs().sum()),
        ])  # fmt: skip

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        if self.run != "closure":
            return super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        returned = optimizer.step(closure=optimizer_closure)
        record.append(f"{self.run}/events", ["step returned", None if returned is None else float(returned)])
        return None


RUNS = {
    "plain": {},
    "accumulate": dict(accumulate_grad_batches=2),
    "closure": dict(accumulate_grad_batches=2),
    "frequency": dict(accumulate_grad_batches=2),
    "cut": dict(accumulate_grad_batches=2),
    "stop": dict(accumulate_grad_batches=2),
    "own_backward": dict(accumulate_grad_batches=2),
    "lr_monitor": dict(log_every_n_steps=2),
}
for run, kwargs in RUNS.items():
    pl.seed_everything(1)
    model = Points(run)
    monitor = run == "lr_monitor"
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=8, limit_val_batches=0, enable_checkpointing=False,
        enable_model_summary=False, enable_progress_bar=False, logger=CSVLogger(".") if monitor else False,
        callbacks=[LearningRateMonitor()] if monitor else [], **kwargs,
    )  # fmt: skip
    trainer.fit(model)
    record.put(f"{run}/global_step", trainer.global_step)
    record.put(f"{run}/lr", trainer.optimizers[0].param_groups[0]["lr"])
    record.put(f"{run}/logged", sorted(trainer.logged_metrics))
    record.put(f"{run}/callback", sorted(trainer.callback_metrics))
    record.weights(run, model)
