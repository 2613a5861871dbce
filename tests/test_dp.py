"""strategy="dp": the loss and logged values over replicas equal the single-device ones (the
averaging pitfall), checked on CPU by running the replica step on each chunk by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import surge
from surge.errors import MisconfigurationError
from surge.metrics.results import Results
from surge.strategies.dp import DataParallelStrategy, _ReplicaStep, chunk_sizes, merge_logs


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.lin(x), y)
        self.log("loss", loss, on_epoch=True)
        self.log("seen", float(len(x)), reduce_fx="sum", on_epoch=True)
        self.log("biggest", x.max(), reduce_fx="max", on_epoch=True)
        return loss


@pytest.mark.parametrize(
    ("batch", "devices", "sizes"), [(10, 4, [3, 3, 3, 1]), (8, 2, [4, 4]), (2, 4, [1, 1]), (7, 3, [3, 3, 1])]
)
def test_chunk_sizes_follow_tensor_chunk(batch, devices, sizes):
    assert chunk_sizes(batch, devices) == sizes == [len(c) for c in torch.arange(batch).chunk(devices)]


def _replicated_step(model: Net, batch, devices: int):
    """What DataParallel does on `devices` GPUs: each chunk through a replica, outputs gathered."""
    chunks = list(zip(*(t.chunk(devices) for t in batch)))
    outs, logs = [], []
    for chunk in chunks:
        out, log = _ReplicaStep(model)(chunk, 0)
        outs.append(out)
        logs += log
    return torch.cat(outs), logs, [len(c[0]) for c in chunks]


def test_uneven_replicas_give_the_single_device_loss_and_logs():
    model = Net()
    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(10, 3, generator=g), torch.randint(0, 2, (10,), generator=g))
    single = F.cross_entropy(model.lin(batch[0]), batch[1])
    strategy = DataParallelStrategy.__new__(DataParallelStrategy)
    strategy._weights, strategy.device = {}, torch.device("cpu")
    losses, logs, sizes = _replicated_step(model, batch, devices=4)
    assert sizes == [3, 3, 3, 1]
    merged = strategy.merge(losses, sizes)
    torch.testing.assert_close(merged, single)
    assert not torch.isclose(losses.mean(), single)  # the plain mean of means is the pitfall
    results = Results("train")
    results.batch = batch
    merge_logs(results, logs, sizes, torch.device("cpu"))
    step, epoch = results.read_step(), results.read_epoch()
    assert step["loss_step"] == pytest.approx(float(single), rel=1e-6)
    assert epoch["loss_epoch"] == pytest.approx(float(single), rel=1e-6)
    assert epoch["seen_epoch"] == 10.0
    assert step["biggest_step"] == pytest.approx(float(batch[0].max()))
    assert model._results is None  # the replica's log buffer never leaks into the module


def test_replica_logs_carry_their_options_by_name():
    model = Net()
    batch = (torch.randn(4, 3), torch.randint(0, 2, (4,)))
    _, logs = _ReplicaStep(model)(batch, 0)
    name, _, options = logs[0].calls[1]
    assert name == "seen" and options["reduce_fx"] == "sum" and options["on_epoch"] is True
    assert options["batch_size"] is None and options["prog_bar"] is False
    with pytest.raises(TypeError):  # the options are keyword-only: no caller depends on their order
        Results("train").log("x", 1.0, None, True, False, True, "mean", None, False)


def test_dp_needs_cuda_devices():
    with pytest.raises(MisconfigurationError, match="strategy='dp'.*accelerator='cpu'"):
        surge.Trainer(strategy="dp", accelerator="cpu")
    with pytest.raises(MisconfigurationError, match="needs CUDA devices"):
        DataParallelStrategy([])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DataParallel needs at least 2 CUDA devices")
def test_dp_on_two_gpus_matches_one_device(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(30, 3, generator=g), torch.randint(0, 2, (30,), generator=g))
    runs = {}
    for strategy, devices in (("dp", 2), ("auto", 1)):
        model = Net()
        model.configure_optimizers = lambda m=model: torch.optim.SGD(m.parameters(), lr=0.1)
        trainer = surge.Trainer(
            strategy=strategy, accelerator="cuda", devices=devices, max_epochs=2, default_root_dir=tmp_path,
            enable_progress_bar=False, enable_checkpointing=False,
        )  # fmt: skip
        trainer.fit(model, DataLoader(data, batch_size=7))
        runs[strategy] = (model.lin.weight.detach().cpu(), float(trainer.callback_metrics["loss_epoch"]))
    torch.testing.assert_close(runs["dp"][0], runs["auto"][0], atol=1e-5, rtol=1e-5)
    assert runs["dp"][1] == pytest.approx(runs["auto"][1], rel=1e-5)
