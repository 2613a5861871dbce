"""What a fit leaves in the folders Lightning owns, and what the Trainer says about them, one
configuration per folder: the files of each checkpoint and log folder (at the fit's end and while it
runs), the types of `log_dir`/`default_root_dir` and of a logger's folders, `fast_dev_run`'s
checkpoint callback, `save_hyperparameters` called twice, a class-valued hyper-parameter loaded back,
and a logger's `log_graph`."""

import json
import os
from pathlib import Path

import lightning.pytorch as pl
import record
import torch
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from regressor import Regressor, loader


def listing(folder):
    """The files under `folder`; TensorBoard's event files by a fixed name (theirs holds the time)."""
    root = Path(folder)
    if not root.is_dir():
        return None
    names = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(
        "/".join("EVENTS" if s.startswith("events.out.tfevents.") else s for s in n.split("/")) for n in names
    )


class Watch(Callback):
    """The folders' files while training runs (a lock or a heartbeat shows here)."""

    def __init__(self, name):
        self.name = name

    def on_train_epoch_end(self, trainer, pl_module):
        record.put(f"{self.name}/during", listing(self.name))


class Silent(Regressor):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        pass


def fit(name, model=None, ckpt_path=None, callbacks=(), max_epochs=2, **kwargs):
    trainer = pl.Trainer(
        default_root_dir=name, max_epochs=max_epochs, limit_train_batches=4, limit_val_batches=2,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[*callbacks, Watch(name)], **kwargs,
    )  # fmt: skip
    trainer.fit(model or Regressor(), loader(32, 0), loader(8, 1), ckpt_path=ckpt_path)
    record.put(f"{name}/files", listing(name))
    record.put(f"{name}/cwd", sorted(p for p in os.listdir(".") if Path(p).is_file()))
    return trainer


def types(name, trainer):
    """The types (and values relative to the run) Lightning gives the folders."""
    logger = trainer.logger
    values = {
        "trainer.log_dir": trainer.log_dir, "trainer.default_root_dir": trainer.default_root_dir,
        **{f"logger.{a}": getattr(logger, a, "absent") for a in ("log_dir", "save_dir", "root_dir", "name", "version")},
    }  # fmt: skip
    record.put(f"{name}/types", {k: [type(v).__name__, str(v)] for k, v in values.items()})
    try:
        record.put(
            f"{name}/joined", [json.dumps({"dir": trainer.log_dir}) != "", trainer.log_dir + "/" != ""]
        )
    except TypeError as err:
        record.put(f"{name}/joined", str(err))


# 1. the default logger, 2. CSVLogger, 3. no logger, 4. a dirpath of the user's, 5. saves every 2 steps
trainer = fit("default")
types("default", trainer)
types("csv", fit("csv", logger=CSVLogger("csv")))
types("tensorboard", fit("tensorboard", logger=TensorBoardLogger("tensorboard", name="tb")))
types("none", fit("none", logger=False))
fit("dirpath", callbacks=[ModelCheckpoint(dirpath="dirpath/mine", save_last=True)])
fit("steps", callbacks=[ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)])
# 6. a resume from the default run's checkpoint, in a folder of its own; 7. a run that logs nothing
resumed = fit("resume", ckpt_path=trainer.checkpoint_callback.best_model_path, max_epochs=3)
silent = fit("silent", model=Silent())
record.put("silent/hparams.yaml", (Path(silent.log_dir) / "hparams.yaml").read_text())
goodput = getattr(resumed, "goodput", None)  # surge's: the resume read the first run's heartbeat
record.put("surge/resume_goodput", None if goodput is None else [goodput.runs, list(goodput.notes)])

# fast_dev_run keeps the checkpoint callback, which saves nothing
fast = pl.Trainer(
    default_root_dir="fast", fast_dev_run=True, enable_progress_bar=False, enable_model_summary=False
)
fast.fit(Regressor(), loader(8, 0), loader(8, 1))
callback = fast.checkpoint_callback
record.put("fast/callback", [type(callback).__name__, getattr(callback, "best_model_path", None)])
record.put("fast/files", listing("fast"))


# save_hyperparameters in a parent and again in the subclass: merged
class Base(Regressor):
    def __init__(self, lr=0.05, width=8):
        super().__init__(lr=lr)
        self.save_hyperparameters()


class Child(Base):
    def __init__(self, depth=3, lr=0.01):
        super().__init__(lr=lr, width=16)
        self.save_hyperparameters()


trainer = fit("twice", model=Child(depth=5), logger=CSVLogger("twice"))
record.put("twice/hparams", dict(trainer.lightning_module.hparams))
record.put("twice/yaml", yaml.safe_load((Path(trainer.log_dir) / "hparams.yaml").read_text()))
best = trainer.checkpoint_callback.best_model_path
record.put("twice/ckpt", dict(torch.load(best, weights_only=False)["hyper_parameters"]))
record.put("twice/loaded", dict(Child.load_from_checkpoint(best).hparams))


# a class as a hyper-parameter: loaded back with weights_only=False (a file the user trusts)
class WithActivation(Regressor):
    def __init__(self, activation=torch.nn.ReLU, lr=0.05):
        super().__init__(lr=lr)
        self.save_hyperparameters()
        self.act = activation()


trainer = fit("classes", model=WithActivation(activation=torch.nn.Tanh), logger=False)
best = trainer.checkpoint_callback.best_model_path
try:
    WithActivation.load_from_checkpoint(best)
    record.put("classes/default", "loaded")
except Exception:  # the default load is weights-only: it does not make a class from the file
    record.put("classes/default", "refused")
loaded = WithActivation.load_from_checkpoint(best, weights_only=False)
record.put("classes/trusted", [loaded.hparams.activation is torch.nn.Tanh, type(loaded.act).__name__])


# log_graph: the module's graph from its example_input_array, in the event file
class Graphed(Regressor):
    def __init__(self):
        super().__init__()
        self.example_input_array = torch.zeros(2, 8)

    def forward(self, x):
        return self.layer(x)


board = TensorBoardLogger("graph", log_graph=True)
fit("graph", model=Graphed(), logger=board)
record.put("graph/flag", bool(board._log_graph))
events = next(Path(board.log_dir).glob("events.out.tfevents.*")).read_bytes()
record.put("graph/in_events", b"Linear" in events)
late = TensorBoardLogger("late")
late._log_graph = True  # as a course sets it on trainer.logger
fit("late", model=Graphed(), logger=late)
events = next(Path(late.log_dir).glob("events.out.tfevents.*")).read_bytes()
record.put("late/in_events", b"Linear" in events)
