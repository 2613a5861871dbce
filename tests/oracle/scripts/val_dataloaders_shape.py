"""`trainer.val_dataloaders` after fit, for each shape a user may give the val loaders in: one
loader, a list of one, a list of two, a module's `val_dataloader()` hook, and no validation_step."""

import lightning.pytorch as pl
import record
import torch
from torch.utils.data import DataLoader, TensorDataset


def loader(n=16):
    g = torch.Generator().manual_seed(n)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=4
    )


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class FromHook(Regressor):
    def val_dataloader(self):
        return loader(12)


class NoValidationStep(Regressor):
    validation_step = None


def shape(value):
    if value is None:
        return None
    if isinstance(value, list):
        return ["list", [len(v) for v in value]]
    return [type(value).__name__, len(value)]


CASES = {
    "one": (Regressor, lambda: loader(12)),
    "list_of_one": (Regressor, lambda: [loader(12)]),
    "list_of_two": (Regressor, lambda: [loader(12), loader(8)]),
    "hook": (FromHook, lambda: None),
    "no_validation_step": (NoValidationStep, lambda: loader(12)),
}
for name, (cls, vals) in CASES.items():
    pl.seed_everything(0)
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(cls(), loader(), vals())
    record.put(name, shape(trainer.val_dataloaders))


class AllStages(Regressor):
    def test_step(self, batch, batch_idx, dataloader_idx=0):
        return self.validation_step(batch, batch_idx, dataloader_idx)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.net(batch[0])


# On one trainer: validate(), test(), predict(), fit(), validate(); after each, the loaders each
# property shows (the train loader, the val, test and predict loaders, and their batch counts).
for name, given in (("one", lambda n: loader(n)), ("list_of_two", lambda n: [loader(n), loader(8)])):
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    model = AllStages()
    seen = []

    def look(trainer=trainer, seen=seen):
        seen.append([shape(trainer.train_dataloader), shape(trainer.val_dataloaders),
                     shape(trainer.test_dataloaders), shape(trainer.predict_dataloaders),
                     trainer.num_val_batches, trainer.num_test_batches, trainer.num_predict_batches])  # fmt: skip

    look()
    trainer.validate(model, given(12), verbose=False)
    look()
    trainer.test(model, given(12), verbose=False)
    look()
    trainer.predict(model, given(12))
    look()
    trainer.fit(model, loader(), given(12))
    look()
    trainer.validate(model, given(8), verbose=False)
    look()
    record.put(f"stages/{name}", [seen[0], seen[1:]])
