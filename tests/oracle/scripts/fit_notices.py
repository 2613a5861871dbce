"""What a fit says where it trains nothing or not as asked: `max_epochs=0`, `max_steps=0`, fp16 asked
for on the CPU, a `training_step` that never returns its loss, and a fit that runs to `max_epochs`.
Records the fit loop's INFO lines (the "lightning.pytorch" logger), the warnings, the precision, the
step count and the weights."""

import logging
import warnings

import lightning.pytorch as pl
import record
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, rec):
        self.lines.append(rec.getMessage())


class Model(pl.LightningModule):
    def __init__(self, returns=True):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.returns = returns

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.lin(x), y)
        return loss if self.returns else None

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(name, model=None, **kwargs):
    torch.manual_seed(0)
    model = model or Model()
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    lines = Lines()
    logging.getLogger("lightning.pytorch").addHandler(lines)
    with warnings.catch_warnings(record=True) as caught:
        trainer = pl.Trainer(
            logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            **kwargs,
        )  # fmt: skip
        trainer.fit(model, data)
    logging.getLogger("lightning.pytorch").removeHandler(lines)
    record.put(f"{name}/stopped", [line for line in lines.lines if line.startswith("`Trainer.fit` stopped")])
    record.put(
        f"{name}/warnings",
        [str(w.message) for w in caught if "fp16" in str(w.message) or "`None`" in str(w.message)],
    )
    record.put(f"{name}/precision", trainer.precision)
    record.put(f"{name}/global_step", trainer.global_step)
    record.weights(name, model)


fit("epochs0", max_epochs=0)
fit("steps0", max_steps=0)
fit("complete", max_epochs=2)
fit("fp16", max_epochs=1, precision="16-mixed", accelerator="cpu")
fit("no_return", Model(returns=False), max_epochs=2)
