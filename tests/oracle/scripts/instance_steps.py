"""Steps and hooks set on the instance rather than defined by the class (as Lightning's own tests
and some projects do): validate/test/predict with steps the class lacks, `validation_step = None`
switching validation off, an instance's `on_train_epoch_end` and `configure_optimizers`."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.utils.data import DataLoader, TensorDataset


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)), batch_size=4
    )


def trainer():
    return pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_model_summary=False,
                      enable_progress_bar=False)  # fmt: skip


pl.seed_everything(0)
model = Regressor()
model.validation_step = lambda batch, batch_idx: model.log("v", 2.0)
model.test_step = lambda batch, batch_idx: model.log("t", 1.0)
model.on_train_epoch_end = lambda: record.append("events", "on_train_epoch_end (instance)")
model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.5)
t = trainer()
t.fit(model, loader(), loader())
record.put("fit", [sorted(t.callback_metrics), t.num_val_batches, t.optimizers[0].param_groups[0]["lr"]])
record.put("test", t.test(model, loader(), verbose=False))
record.put("validate", t.validate(model, loader(), verbose=False))
model.predict_step = lambda batch, batch_idx: batch[0].sum()
record.put("predict", [float(p) for p in t.predict(model, loader())])
record.weights("model", model)

off = Regressor()
off.validation_step = None  # validation switched off
t = trainer()
t.fit(off, loader(), loader())
record.put("off", [t.num_val_batches, t.global_step])
try:
    t.validate(off, loader(), verbose=False)
except MisconfigurationException:
    record.put("off_validate", "MisconfigurationException")
