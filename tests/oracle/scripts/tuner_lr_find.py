"""A project that picks its learning rate with `Tuner.lr_find` before training: where the suggestion
goes, what the tuner leaves behind on the trainer and the model, the rates and smoothed losses it
recorded, its suggestion and plot, and the errors a misconfigured call gets."""

import lightning.pytorch as pl
import matplotlib.pyplot as plt
import record
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.tuner import Tuner
from lightning.pytorch.utilities.exceptions import MisconfigurationException as Misconfigured


class Model(BoringModel):
    def __init__(self, lr=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.batch_indices = []

    def training_step(self, batch, batch_idx):
        self.batch_indices.append(batch_idx)
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def trainer(**kwargs):
    quiet = {"enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
    return pl.Trainer(**{"max_epochs": 1, "logger": False, **quiet, **kwargs})


def error(call, kind):
    """Whether `call` raises `kind` (what a user's `except` or `pytest.raises` names)."""
    try:
        call()
    except kind:
        return True
    return False


pl.seed_everything(1)
model = Model()
before = {k: v.clone() for k, v in model.state_dict().items()}
t = trainer()
result = Tuner(t).lr_find(model, num_training=30)
suggestion = result.suggestion()
record.put("suggested", suggestion is not None)
record.put("attribute_and_hparams_set", model.lr == suggestion and model.hparams.lr == suggestion)
record.put("points", len(result.results["lr"]) == len(result.results["loss"]) > 10)
record.put("weights_restored", all(torch.equal(before[k], v) for k, v in model.state_dict().items()))
record.put("callbacks", [type(cb).__name__ for cb in t.callbacks])
record.put("global_step", t.global_step)
record.put("train_loader_set", t.train_dataloader is not None)
record.put("results", result.results)
record.put("suggestion", suggestion)
record.put(
    "suggestion_skipping", [result.suggestion(skip_begin=2, skip_end=3), result.suggestion(skip_end=0)]
)


def plotted(fig):
    """What a figure shows: its type, each axes' scale, labels and lines' data (not its pixels)."""
    axes = [
        {
            "xscale": ax.get_xscale(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "lines": [[line.get_xdata().tolist(), line.get_ydata().tolist(), line.get_marker()] for line in ax.get_lines()],
        }
        for ax in fig.axes
    ]  # fmt: skip
    return {"type": f"{type(fig).__module__}.{type(fig).__name__}", "axes": axes}


record.put("plot", plotted(result.plot()))
record.put("plot_suggest", plotted(result.plot(suggest=True)))
_, given_ax = plt.subplots()
record.put("plot_on_axes", result.plot(suggest=True, ax=given_ax) is given_ax.figure)
linear = Tuner(trainer()).lr_find(Model(), min_lr=0.001, max_lr=0.2, num_training=40, mode="linear")
record.put("linear_results", linear.results)
record.put("linear_suggestion", [linear.suggestion(), linear.suggestion(skip_begin=2)])
record.put("linear_plot", plotted(linear.plot(suggest=True)))

falling = Tuner(trainer()).lr_find(Model(), min_lr=1.0, max_lr=1e-8, num_training=3)
record.put("falling_in_range", all(1e-8 <= lr <= 1.0 for lr in falling.results["lr"]))
record.put("falling_results", falling.results)
one = Model(lr=0.123)
single = Tuner(trainer()).lr_find(one, num_training=1)
record.put("one_step", [single.suggestion(), one.lr])

fresh, short = Model(), trainer(limit_train_batches=5, max_epochs=2)
state = torch.get_rng_state()
bounded = Tuner(short).lr_find(fresh, early_stop_threshold=None)
record.put("rng_restored", torch.equal(state, torch.get_rng_state()))
record.put("bounded_by_the_fit", len(bounded.results["lr"]))  # 2 epochs of 5 batches, not num_training=100
record.put("bounded_results", bounded.results)
record.put("bounded_batch_indices", fresh.batch_indices)

record.put("no_lr_attribute", error(lambda: Tuner(trainer()).lr_find(BoringModel()), AttributeError))
record.put(
    "validate_method", error(lambda: Tuner(trainer()).lr_find(Model(), method="validate"), Misconfigured)
)
record.put("bad_method", error(lambda: Tuner(trainer()).scale_batch_size(Model(), method="x"), ValueError))
record.put(
    "dataloaders_with_fit", error(lambda: Tuner(trainer()).lr_find(Model(), dataloaders=[]), Misconfigured)
)
