"""A workload with a loss spike injected at a known batch, and the run that never saw the batches a
rollback skips. Shared by tests/test_spike_guard.py (one process) and
tests/distributed/spike_guard_script.py (DDP-2).

The data is not shuffled, so each rank's batch j holds known samples (DistributedSampler deals
sample i to rank i % world). SGD with momentum, a StepLR stepped every optimizer step and dropout
make the optimizer state, the scheduler and the RNG matter to the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

import surge
from surge.loggers.base import Logger

BATCH = 4  # per rank
BATCHES = 24  # per rank and epoch
LOG_EVERY = 4  # optimizer steps between checks


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(1), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Rows(Logger):
    """Every logged value as (step, name, value)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float]] = []

    def log_metrics(self, metrics, step: int) -> None:
        self.rows += [(step, k, v) for k, v in metrics.items() if k != "epoch"]


def samples(world: int, spikes: dict[int, float], rank: int = 0) -> TensorDataset:
    """BATCHES batches a rank; batch j of `rank` multiplied by `spikes[j]` (inf/NaN: poisoned)."""
    g = torch.Generator().manual_seed(3)
    n = BATCHES * BATCH * world
    x = torch.randn(n, 6, generator=g)
    y = x[:, 0] - 2 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    for j, factor in spikes.items():
        idx = torch.arange(j * BATCH, (j + 1) * BATCH) * world + rank  # rank's batch j
        x[idx] = x[idx] * factor
    return TensorDataset(x, y)


def without(data: TensorDataset, world: int, first: int, end: int) -> Subset:
    """`data` less every rank's batches first..end-1."""
    keep = [i for i in range(len(data)) if not first * BATCH * world <= i < end * BATCH * world]
    return Subset(data, keep)


class ScaleAt(surge.callbacks.Callback):
    """What a rollback's `lr_scale` does, done by hand before batch `at` (the reference run)."""

    def __init__(self, at: int, scale: float) -> None:
        self.at, self.scale = at, scale

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.at:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] *= self.scale


class SaveAfter(surge.callbacks.Callback):
    """`trainer.save_checkpoint(path)` at the end of batch `batch_idx`."""

    def __init__(self, path: Path, batch_idx: int) -> None:
        self.path, self.batch_idx = path, batch_idx

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx == self.batch_idx:
            trainer.save_checkpoint(self.path)


def fit(root: Path, data: Any, devices: int = 1, callbacks=(), ckpt: Path | None = None, net=Net, **kw: Any):
    """Train `data` one epoch (unless `max_epochs` says otherwise) from seed 7."""
    surge.seed_everything(7)
    model = net()
    kw.setdefault("max_epochs", 1)
    trainer = surge.Trainer(
        default_root_dir=root, accelerator="cpu", devices=devices, logger=kw.pop("logger", Rows()),
        log_every_n_steps=kw.pop("log_every_n_steps", LOG_EVERY),
        callbacks=list(callbacks), enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, **kw,
    )  # fmt: skip
    loader = DataLoader(data, batch_size=BATCH) if data is not None else None  # None: the module's own
    trainer.fit(model, loader, ckpt_path=ckpt)
    return model, trainer


def differences(a: surge.Module, ta: surge.Trainer, b: surge.Module, tb: surge.Trainer) -> list[str]:
    """What differs between two finished runs: weights, momentum, step, scheduler, learning rate."""
    out = [name for (name, p), q in zip(a.named_parameters(), b.parameters()) if not torch.equal(p, q)]
    sa, sb = ta.optimizers[0].state_dict(), tb.optimizers[0].state_dict()
    for i, state in sa["state"].items():
        if not torch.equal(state["momentum_buffer"], sb["state"][i]["momentum_buffer"]):
            out.append(f"momentum_buffer[{i}]")
    if ta.global_step != tb.global_step:
        out.append(f"global_step {ta.global_step} != {tb.global_step}")
    if ta.lr_scheduler_configs[0].scheduler.last_epoch != tb.lr_scheduler_configs[0].scheduler.last_epoch:
        out.append("scheduler step")
    if sa["param_groups"][0]["lr"] != sb["param_groups"][0]["lr"]:
        out.append(f"lr {sa['param_groups'][0]['lr']} != {sb['param_groups'][0]['lr']}")
    return out
