"""validate() and test() with their default verbose=True print the results table; verbose=False
prints none. The logged values do not depend on random draws, so both frameworks print the same."""

import record
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel


class Model(BoringModel):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", 1.25)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("a_rather_long_metric_name_here", float(batch_idx))
        self.log("acc", 0.5 + dataloader_idx, prog_bar=True)
        self.log("count", torch.tensor(3.0))


model = Model()
trainer = Trainer(
    logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False
)
print("<<validate")
record.put("validate", trainer.validate(model))
print("<<test")
record.put("test", trainer.test(model, dataloaders=[model.test_dataloader(), model.test_dataloader()]))
print("<<quiet")
record.put("quiet", trainer.test(model, verbose=False))
print("<<end")
