"""The Lightning helpers scripts import beyond the Trainer, recorded the same way under both
frameworks: `grad_norm` logged in `on_before_optimizer_step`, `model_summary`, `measure_flops`,
`ThroughputMonitor`'s logged rows, `BasePredictionWriter`'s calls, every public name of
`lightning.fabric.utilities` (fabric_utilities_names.py). `--ddp`: the Trainer's fit,
tests and predict on two CPU processes (gloo); every rank records its own file (record-rank{N}.json)."""

from __future__ import annotations

import sys

import fabric_utilities_names
import lightning.pytorch as L
import record
import torch
from lightning.fabric.utilities.throughput import measure_flops as fabric_measure_flops
from lightning.pytorch.callbacks import BasePredictionWriter, ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import grad_norm, measure_flops
from lightning.pytorch.utilities.model_summary import ModelSummary, get_human_readable_count, summarize
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DDP = "--ddp" in sys.argv


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randn(n, 1, generator=g))


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.BatchNorm1d(8))
        self.head = nn.Linear(8, 1)
        self.scale = nn.Parameter(torch.ones(1))  # outside every layer: the summary's "other params"
        self.example_input_array = torch.zeros(4, 6)

    def forward(self, x):
        return self.head(self.body(x)) * self.scale

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0]) + 10 * dataloader_idx

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class GradNorms(Net):
    def on_before_optimizer_step(self, optimizer):
        self.log_dict(grad_norm(self, norm_type=2))


def trainer(name, **kwargs):
    settings = dict(
        max_epochs=1, accelerator="cpu", devices=2 if DDP else 1, strategy="ddp" if DDP else "auto",
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        num_sanity_val_steps=0, log_every_n_steps=1,
    )  # fmt: skip
    settings.update(kwargs)
    return L.Trainer(default_root_dir=name, **settings)


def fit_test_predict():
    """One Trainer (one set of processes under DDP): a fit logging `grad_norm` with a
    `ThroughputMonitor` and accumulation, two test runs, a predict with a writer on two loaders."""
    L.seed_everything(3)  # windows of 2 that divide the epoch: surge's partial window differs (docs)
    monitor = ThroughputMonitor(batch_size_fn=lambda b: b[0].shape[0], length_fn=lambda b: 3 * b[0].shape[0],
                                window_size=2)  # fmt: skip
    model = GradNorms()
    model.flops_per_batch = 1000
    t = trainer("fit", max_epochs=2, log_every_n_steps=2, accumulate_grad_batches=2, logger=Rows("fit"),
                callbacks=[monitor, Writer("batch_and_epoch")], num_sanity_val_steps=1)  # fmt: skip
    t.fit(model, DataLoader(data(64, 0), batch_size=4, shuffle=True), DataLoader(data(24, 1), batch_size=8))
    record.put("grad_norm/logged", {k: v for k, v in t.logged_metrics.items() if k.startswith("grad_")})
    record.put("grad_norm/callback", {k: v for k, v in t.callback_metrics.items() if k.startswith("grad_")})
    record.weights("grad_norm", model)
    model(torch.linspace(-1, 1, 24).reshape(4, 6)).sum().backward()  # gradients of one's own
    for norm in ("inf", 1, 2.0, "3"):
        record.put(f"grad_norm/direct/{norm}", grad_norm(model, norm, group_separator="|"))
    for bad in (0, -1, "-inf"):
        try:
            grad_norm(model, bad)
            record.put(f"grad_norm/error/{bad}", "no error")
        except ValueError as err:  # Lightning's words in the message (its own tests match them)
            said = "`norm_type` must be a positive number or 'inf'" in str(err)
            record.put(f"grad_norm/error/{bad}", "ValueError" + (" saying so" if said else ""))
    for _ in range(2):  # the second run's rows count on from the first's
        t.test(model, DataLoader(data(24, 2), batch_size=8), verbose=False)
    Writer.calls = []
    out = t.predict(model, [DataLoader(data(10, 4), batch_size=4), DataLoader(data(6, 5), batch_size=3)],
                    return_predictions=False)  # fmt: skip
    record.put("writer/batch_and_epoch/calls", Writer.calls)
    record.put("writer/batch_and_epoch/returned", out)
    record.put(
        "writer/batch_and_epoch/loop_after", [t.predict_loop.predictions, t.predict_loop.epoch_batch_indices]
    )
    record.put("throughput/rows", Rows.rows)
    record.put("grad_norm/none", grad_norm(nn.Linear(2, 2), 2))


def summary_and_flops():
    L.seed_everything(3)
    model = Net()
    record.put("summary/deep", str(ModelSummary(model, max_depth=-1)))
    record.put("summary/top", str(summarize(model)))
    record.put("summary/none", str(summarize(model, max_depth=0)))
    s = ModelSummary(model, max_depth=2)
    record.put("summary/props", [s.layer_names, s.layer_types, s.param_nums, s.in_sizes, s.out_sizes,
                                 s.total_parameters, s.trainable_parameters, s.total_flops, s.training_modes])  # fmt: skip
    record.put("summary/counts", [get_human_readable_count(n) for n in (0, 7, 999, 1000, 12345, 4e14, 5e15)])
    with torch.device("meta"):
        meta = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        x = torch.randn(5, 32)
    record.put("flops/forward", measure_flops(meta, lambda: meta(x)))
    record.put("flops/backward", fabric_measure_flops(meta, lambda: meta(x), lambda y: y.sum()))


class Rows(CSVLogger):
    """A CSVLogger that also records each row the Trainer logs: its step and keys, and the counts."""

    rows = []

    def log_metrics(self, metrics, step=None):
        counts = {
            k: v for k, v in metrics.items() if k.split("/")[-1] in ("batches", "samples", "lengths", "epoch")
        }
        self.rows.append([step, sorted(metrics), counts])
        super().log_metrics(metrics, step)


class Writer(BasePredictionWriter):
    calls = []

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx
    ):
        self.calls.append(
            ["batch", self.interval.value, prediction, batch_indices, batch, batch_idx, dataloader_idx]
        )

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.calls.append(["epoch", self.interval.value, predictions, batch_indices])


def writer_run():
    """The other intervals, one loader each, `return_predictions` None and True (one process)."""
    model = Net()
    loaders = [DataLoader(data(10, 4), batch_size=4), DataLoader(data(6, 5), batch_size=3)]
    for interval, returned, given in (("epoch", None, loaders[0]), ("batch", True, loaders[1])):
        Writer.calls = []
        t = trainer("writer", callbacks=[Writer(interval)], logger=False)
        out = t.predict(model, given, return_predictions=returned)
        record.put(f"writer/{interval}/calls", Writer.calls)
        record.put(f"writer/{interval}/returned", None if out is None else "a list")
        record.put(
            f"writer/{interval}/loop_after",
            [t.predict_loop.predictions == [], t.predict_loop.epoch_batch_indices],
        )
    try:
        BasePredictionWriter("sometimes")
    except Exception as err:
        record.put("writer/bad_interval", [type(err).__name__, str(err)])


if __name__ == "__main__":
    record.PER_RANK = DDP
    fit_test_predict()
    if not DDP:
        summary_and_flops()
        writer_run()
        # Lightning's run (first) lists the names; surge's imports each name of that list.
        theirs = record.DIR.parent / "lightning" / "record.json"
        fabric_utilities_names.record_names(None if record.FRAMEWORK == "lightning" else theirs)
