"""Every hook call of a small project, in order, for each scenario named on the command line.

A LightningModule, a Callback and a LightningDataModule whose hooks each record their name and
their arguments (`record.call`) before doing what the default does; each scenario's calls go
under its own key. Usage: `python hook_order.py fit_auto validate_2 ...`.
"""

import os
import sys

import lightning.pytorch as pl
import record
import torch
from torch.utils.data import DataLoader, Dataset

MODULE_HOOKS = (
    "configure_callbacks", "prepare_data", "setup", "configure_model", "configure_optimizers",
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end",
    "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start", "on_train_batch_end",
    "on_validation_start", "on_validation_end", "on_validation_epoch_start", "on_validation_epoch_end",
    "on_validation_batch_start", "on_validation_batch_end",
    "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_test_batch_start", "on_test_batch_end",
    "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end",
    "on_validation_model_eval", "on_validation_model_train", "on_validation_model_zero_grad",
    "on_test_model_eval", "on_test_model_train", "on_predict_model_eval",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
    "on_before_zero_grad", "optimizer_zero_grad", "on_before_backward", "backward", "on_after_backward",
    "on_before_optimizer_step", "configure_gradient_clipping", "optimizer_step", "lr_scheduler_step",
    "on_save_checkpoint", "on_load_checkpoint", "teardown",
    "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
)  # fmt: skip
CALLBACK_HOOKS = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_train_batch_start", "on_train_batch_end",
    "on_validation_start", "on_validation_end", "on_validation_epoch_start", "on_validation_epoch_end",
    "on_validation_batch_start", "on_validation_batch_end",
    "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_test_batch_start", "on_test_batch_end",
    "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
    "on_save_checkpoint", "on_load_checkpoint", "state_dict", "load_state_dict",
)  # fmt: skip
DATAMODULE_HOOKS = (
    "prepare_data", "setup", "teardown", "train_dataloader", "val_dataloader", "test_dataloader",
    "predict_dataloader", "state_dict", "load_state_dict",
)  # fmt: skip

CALLS = "calls"  # the key the current scenario records under (set per scenario)


def recording(names, prefix=""):
    """A class decorator: each hook in `names` records its call, then runs the parent's."""

    def decorate(cls):
        for name in names:

            def hook(self, *args, _name=name, **kwargs):
                out = getattr(super(cls, self), _name)(*args, **kwargs)
                record.call(CALLS, prefix + _name, *args, **kwargs)
                return out

            hook.__name__ = name
            setattr(cls, name, hook)
        return cls

    return decorate


class Vectors(Dataset):
    def __init__(self, n=64):
        self.data = torch.randn(n, 32)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


class Net(pl.LightningModule):
    """A linear layer trained toward ones, with an SGD optimizer and an epoch StepLR."""

    def __init__(self, manual=False):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.automatic_optimization = not manual

    def forward(self, x):
        return self.layer(x)

    def loss(self, batch):
        out = self(batch)
        return torch.nn.functional.mse_loss(out, torch.ones_like(out))

    def training_step(self, batch, batch_idx):
        if self.automatic_optimization:
            return {"loss": self.loss(batch)}
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.loss(batch)
        self.manual_backward(loss)
        opt.step()
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        return {"x": self.loss(batch)}

    def test_step(self, batch, batch_idx):
        return {"y": self.loss(batch)}

    def predict_step(self, batch, batch_idx):
        return self(batch)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def train_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def val_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def test_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def predict_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)


@recording(MODULE_HOOKS)
class RecordedNet(Net):
    pass


class OneCycleNet(RecordedNet):
    """A schedule sized by `trainer.estimated_stepping_batches` (the train loader is asked for there)."""

    def configure_optimizers(self):
        super().configure_optimizers()
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        total = self.trainer.estimated_stepping_batches
        record.call(CALLS, "-- estimated_stepping_batches", total)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


@recording(CALLBACK_HOOKS, "Callback.")
class RecordedCallback(pl.Callback):
    def state_dict(self):
        return {"seen": True}


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def val_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def test_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def predict_dataloader(self):
        return DataLoader(Vectors(), batch_size=2)

    def state_dict(self):
        return {"data": 1}


@recording(DATAMODULE_HOOKS, "DataModule.")
class RecordedData(Data):
    pass


def trainer(name, **kwargs):
    settings = dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=2, enable_progress_bar=False,
        enable_model_summary=False, logger=False, default_root_dir=os.path.join(os.getcwd(), name),
    )  # fmt: skip
    settings.update(kwargs)
    return pl.Trainer(**settings)


def fit(name, model=None, ckpt_path=None, **kwargs):
    model = model or RecordedNet()
    t = trainer(name, callbacks=[RecordedCallback()], **kwargs)
    t.fit(model, ckpt_path=ckpt_path)
    return t


def first_checkpoint(name, **kwargs):
    """A plain run (nothing recorded) that leaves the checkpoint a resume starts from."""
    t = trainer(name, limit_val_batches=0, **kwargs)
    t.fit(Net())
    return t.checkpoint_callback.best_model_path


def evaluate(name, verb, batches, instance_none):
    model = RecordedNet()
    if instance_none:  # a hook switched off on the instance, as users (and Lightning's tests) do
        setattr(model, f"on_{'validation' if verb == 'validate' else verb}_model_train", None)
    t = trainer(name, limit_val_batches=batches, limit_test_batches=batches, callbacks=[RecordedCallback()])
    getattr(t, verb)(model)


def datamodule(name):
    model = Net()
    t = trainer(name, limit_test_batches=2, limit_predict_batches=2, reload_dataloaders_every_n_epochs=1)
    for verb in ("fit", "validate", "test", "predict"):
        dm = RecordedData()
        record.call(CALLS, f"-- {verb}")
        getattr(t, verb)(model, datamodule=dm)


def load_from_checkpoint(name):
    t = trainer(name, max_steps=1, limit_val_batches=0)
    t.fit(RecordedNet(), datamodule=Data())
    path = os.path.join(os.getcwd(), name, "saved.ckpt")
    t.save_checkpoint(path)
    record.call(CALLS, "-- load")
    RecordedNet.load_from_checkpoint(path)
    RecordedData.load_from_checkpoint(path)


SCENARIOS = {
    "fit_auto": lambda n: fit(n),
    "fit_manual": lambda n: fit(n, RecordedNet(manual=True)),
    "fit_accumulate": lambda n: fit(n, max_epochs=2, limit_train_batches=5, accumulate_grad_batches=2),
    "fit_clip": lambda n: fit(n, gradient_clip_val=0.5, gradient_clip_algorithm="value"),
    "fit_stepping_batches": lambda n: fit(n, OneCycleNet(), max_epochs=2),
    "fit_no_sanity": lambda n: fit(n, num_sanity_val_steps=0),
    "resume_max_epochs": lambda n: fit(
        n, max_epochs=2, limit_val_batches=0, ckpt_path=first_checkpoint(n + "_first")
    ),
    "resume_max_steps": lambda n: fit(
        n,
        max_epochs=-1,
        max_steps=3,
        limit_train_batches=4,
        limit_val_batches=0,
        ckpt_path=first_checkpoint(n + "_first", max_steps=1, limit_train_batches=4),
    ),  # fmt: skip
    "validate_0": lambda n: evaluate(n, "validate", 0, False),
    "validate_2": lambda n: evaluate(n, "validate", 2, True),
    "test_0": lambda n: evaluate(n, "test", 0, True),
    "test_2": lambda n: evaluate(n, "test", 2, False),
    "predict": lambda n: predict(n),
    "datamodule": datamodule,
    "load_from_checkpoint": load_from_checkpoint,
}


def predict(name):
    t = trainer(name, limit_predict_batches=2, callbacks=[RecordedCallback()])
    t.predict(RecordedNet())


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        CALLS = scenario
        pl.seed_everything(1)
        try:
            SCENARIOS[scenario](scenario)
        except Exception as err:  # the record says which scenario failed and how; the others still run
            record.call(CALLS, f"!! {type(err).__name__}: {str(err)[:300]}")
