"""What fit says of the optimizers and schedulers a module returns, by kind of optimization: the
errors (what catches them, their text), the warnings, and how the optimizer's `step` is called
under manual optimization (the closure by keyword, with the user's extra arguments)."""

import warnings

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from regressor import Regressor, loader

CATCHERS = {
    "RuntimeError": RuntimeError,
    "ValueError": ValueError,
    "MisconfigurationException": MisconfigurationException,
}


class NotATorchScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class RecordingSGD(torch.optim.SGD):
    def step(self, *args, **kwargs):
        record.append("step_calls", [len(args), sorted(kwargs)])
        closure = kwargs.pop("closure", args[0] if args else None)
        return super().step(closure)


class Manual(Regressor):
    def __init__(self, returns):
        super().__init__()
        self.automatic_optimization = False
        self.returns = returns

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def closure():
            loss = super(Manual, self).training_step(batch, batch_idx)
            opt.zero_grad()
            self.manual_backward(loss)
            return loss

        opt.step(closure=closure, extra="yes")

    def on_train_epoch_end(self):
        scheduler = self.lr_schedulers()
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(torch.tensor(0.0))

    def configure_optimizers(self):
        opt = RecordingSGD(self.parameters(), lr=0.01)
        if self.returns == "plateau_dict":
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return [opt], [{"scheduler": sched, "monitor": "train_loss", "interval": "step"}]
        if self.returns == "plateau":
            return [opt], [torch.optim.lr_scheduler.ReduceLROnPlateau(opt)]
        return [opt], [NotATorchScheduler(opt)]


class Automatic(Regressor):
    def __init__(self, returns):
        super().__init__()
        self.returns = returns

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        if self.returns == "two":
            return opt, torch.optim.SGD(self.parameters(), lr=0.01)
        return [opt], [NotATorchScheduler(opt)]


class AsksOptimizerIdx(Regressor):
    def training_step(self, batch, batch_idx, optimizer_idx):
        return super().training_step(batch, batch_idx)


CASES = {
    "manual_plateau_dict": lambda: Manual("plateau_dict"),
    "manual_plateau": lambda: Manual("plateau"),
    "manual_not_torch": lambda: Manual("not_torch"),
    "automatic_not_torch": lambda: Automatic("not_torch"),
    "automatic_two": lambda: Automatic("two"),
    "optimizer_idx": lambda: AsksOptimizerIdx(),
}

for case, make in CASES.items():
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(make(), loader(8, 0))
            outcome = ["ok", [c.interval for c in trainer.lr_scheduler_configs]]
        except Exception as err:  # noqa: BLE001 - what catches it is what is recorded
            outcome = [[name for name, kind in CATCHERS.items() if isinstance(err, kind)], str(err)]
    ours = [[w.category.__name__, str(w.message)] for w in caught if "lr scheduler dict" in str(w.message)]
    record.put(case, [outcome, ours])
