"""What Lightning's defaults do that a module can see: `clip_gradients` called at every step by the
default `configure_gradient_clipping` (clipping set or not), gradients freed by `zero_grad()` at each
stage's start, the stage `setup`/`teardown` receive, `trainer.gradient_clip_algorithm`'s type."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.demos.boring_classes import BoringModel


class Watched(BoringModel):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def clip_gradients(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        algorithm = gradient_clip_algorithm
        shown = None if algorithm is None else f"{type(algorithm).__name__}:{algorithm.value}"
        record.append(f"{self.run}/clip", [self.trainer.global_step, gradient_clip_val, shown])
        super().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def zero_grad(self, set_to_none=True):
        record.append(f"{self.run}/zero_grad", self.trainer.state.fn and str(self.trainer.state.fn.value))
        super().zero_grad(set_to_none)

    def setup(self, stage):
        record.append(
            f"{self.run}/setup",
            [type(stage).__name__, str(stage.value if hasattr(stage, "value") else stage)],
        )

    def teardown(self, stage):
        record.append(
            f"{self.run}/teardown",
            [type(stage).__name__, str(stage.value if hasattr(stage, "value") else stage)],
        )

    def _grads(self, where):
        record.append(f"{self.run}/grads", [where, [p.grad is None for p in self.parameters()]])

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0:
            self._grads("validation_step")
        return super().validation_step(batch, batch_idx)

    def test_step(self, batch, batch_idx):
        if batch_idx == 0:
            self._grads("test_step")
        return super().test_step(batch, batch_idx)


class Averaged(BoringModel):
    """Logs a loss per batch of uneven sizes (the last batch smaller): the epoch mean's last bits."""

    def test_step(self, batch, batch_idx):
        loss = (self.layer(batch) ** 2).mean() * 1.37
        self.log("test_loss", loss)
        self.log("test_sum", loss, reduce_fx="sum")


def mean_bits():
    pl.seed_everything(3)
    data = torch.utils.data.DataLoader(torch.randn(400, 32), batch_size=7)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    (result,) = trainer.test(Averaged(), data)
    record.put("mean_bits/result", {k: repr(float(v)) for k, v in result.items()})


def set_grads(model):
    for p in model.parameters():
        p.grad = torch.ones_like(p)


def main():
    for run, clip in (
        ("no_clip", {}),
        ("clip_value", {"gradient_clip_val": 0.5, "gradient_clip_algorithm": "Value"}),
    ):
        pl.seed_everything(1)
        model = Watched(run)
        trainer = pl.Trainer(
            max_epochs=1, limit_train_batches=3, limit_val_batches=1, limit_test_batches=1,
            num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, **clip,
        )  # fmt: skip
        algorithm = trainer.gradient_clip_algorithm
        record.put(
            f"{run}/algorithm", None if algorithm is None else [type(algorithm).__name__, algorithm.value]
        )
        trainer.fit(model)
        set_grads(model)
        trainer.validate(model)
        set_grads(model)
        trainer.test(model)
        record.weights(run, model)
    mean_bits()


if __name__ == "__main__":
    main()
