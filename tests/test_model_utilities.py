"""`grad_norm`, `measure_flops`, `Throughput`, `BasePredictionWriter` and `ThroughputMonitor` in
surge's own API (their Lightning behaviour is compared with Lightning in
tests/oracle/test_utilities_points.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import BasePredictionWriter, Throughput, ThroughputMonitor
from surge.errors import MisconfigurationError
from surge.lightning.refuse import LightningNameError, refused_at_use
from surge.loggers.base import Logger
from surge.utilities import grad_norm, measure_flops


def test_grad_norm_gives_each_gradients_norm_and_the_total():
    layer = nn.Linear(3, 2)
    layer.weight.grad = torch.tensor([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    norms = grad_norm(layer, 2, group_separator=":")
    assert list(norms) == ["grad_2.0_norm:weight", "grad_2.0_norm_total"]  # bias: no gradient, no entry
    assert norms["grad_2.0_norm:weight"].item() == 5.0 and norms["grad_2.0_norm_total"].item() == 5.0
    layer.bias.grad = torch.tensor([12.0, 0.0])
    norms = grad_norm(layer, "inf")
    assert norms["grad_inf_norm/bias"].item() == 12.0 and norms["grad_inf_norm_total"].item() == 12.0
    assert grad_norm(layer, 2)["grad_2.0_norm_total"].item() == pytest.approx(13.0)
    assert all(isinstance(v, torch.Tensor) for v in norms.values())  # nothing read to the host
    assert grad_norm(nn.Linear(2, 2), 1) == {}
    for bad in (0, -2, "-inf"):
        with pytest.raises(MisconfigurationError, match="norm_type"):
            grad_norm(layer, bad)


def test_measure_flops_counts_forward_and_backward_on_the_meta_device():
    with torch.device("meta"):
        model = nn.Linear(32, 64, bias=False)
        x = torch.randn(5, 32)
    forward = measure_flops(model, lambda: model(x))
    assert forward == 2 * 5 * 32 * 64
    assert measure_flops(model, lambda: model(x), lambda y: y.sum()) == 2 * forward  # + the weight's gradient


def test_throughput_rates_over_a_full_window_only():
    t = Throughput(window_size=2, world_size=2, available_flops=100.0)
    t.update(time=1.0, batches=1, samples=4, lengths=8, flops=10)
    assert t.compute() == {"time": 1.0, "batches": 1, "samples": 4, "lengths": 8}
    t.update(time=3.0, batches=2, samples=8, lengths=16, flops=10)
    rates = t.compute()
    assert rates["device/batches_per_sec"] == 0.5 and rates["batches_per_sec"] == 1.0
    assert rates["device/samples_per_sec"] == 2.0 and rates["samples_per_sec"] == 4.0
    assert rates["device/items_per_sec"] == 4.0 and rates["items_per_sec"] == 8.0
    assert (
        rates["flops_per_sec"] == 10.0
        and rates["device/flops_per_sec"] == 5.0
        and rates["device/mfu"] == 0.05
    )
    with pytest.raises(ValueError, match="increase"):
        t.update(time=2.0, batches=3, samples=12)
    with pytest.raises(ValueError, match="samples"):
        Throughput().update(time=1.0, batches=2, samples=1)
    with pytest.raises(MisconfigurationError, match="window_size"):
        Throughput(window_size=1)


class Writer(BasePredictionWriter):
    def __init__(self, interval):
        super().__init__(interval)
        self.calls = []

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx
    ):
        self.calls.append(("batch", batch_indices, batch[0].flatten().tolist(), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.calls.append(("epoch", len(predictions), batch_indices))


class Identity(surge.Module):
    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return batch[0] * 2


def test_prediction_writer_gets_the_samplers_indices_of_each_batch():
    """A shuffled loader: the indices handed to the writer are those of the samples in the batch."""
    torch.manual_seed(0)
    samples = TensorDataset(torch.arange(10.0).unsqueeze(1))
    loaders = [DataLoader(samples, batch_size=4, shuffle=True), DataLoader(samples, batch_size=5)]
    writer = Writer("batch_and_epoch")
    trainer = fast_trainer(callbacks=[writer])
    assert trainer.predict(Identity(), loaders, return_predictions=False) is None
    batches = [c for c in writer.calls if c[0] == "batch"]
    assert [c[1] for c in batches] == [[int(v) for v in c[2]] for c in batches]
    assert [(c[3], c[4]) for c in batches] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]
    assert writer.calls[-1] == ("epoch", 2, [[c[1] for c in batches[:3]], [c[1] for c in batches[3:]]])
    assert trainer.predict_loop.predictions == [] and trainer.predict_loop.epoch_batch_indices == []
    with pytest.raises(MisconfigurationError, match="write_interval"):
        Writer("step")


class RowLogger(Logger):
    def __init__(self):
        self.rows = []

    @property
    def name(self):
        return "rows"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params):
        pass

    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))


def test_throughput_monitor_logs_counts_at_logging_steps():
    logger = RowLogger()
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].shape[0], window_size=2)
    trainer = fast_trainer(max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[monitor],
                           limit_val_batches=0)  # fmt: skip
    train, _ = make_loaders(n_train=40, batch_size=8)
    trainer.fit(TinyModel(), train)
    rows = [(step, m["train/batches"], m["train/samples"]) for step, m in logger.rows if "train/batches" in m]
    assert rows == [(1, 2, 16), (3, 4, 32)]
    assert all("train/device/samples_per_sec" in m for _, m in logger.rows if "train/batches" in m)


def test_a_name_refused_at_use_imports_and_refuses_when_called():
    Missing = refused_at_use("lightning.fabric", "Thing", "because")
    assert not isinstance(object(), Missing)
    with pytest.raises(LightningNameError, match=r"lightning\.fabric\.Thing .*because"):
        Missing(1, key=2)
