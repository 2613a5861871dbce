"""A bad batch at any position of a two-epoch fit, and the run that never saw the batches a rollback
skips. Shared by tests/test_rollback_exact.py (one process) and tests/distributed/rollback_script.py
(DDP-2).

Each epoch has N=6 batches a rank; a judgment every EVERY=4 optimizer steps and at each epoch's end,
snapshots at each epoch's start and at the checks. The window a bad batch of an epoch rolls back is
therefore fixed (`skipped`). A bad batch is "nan" (an inf/NaN input: a NaN loss) or "grad" (a finite
loss whose gradient is NaN: `sqrt` at 0). The model has dropout, the optimizer momentum, and the
scheduler (`sched`) is a StepLR stepped every epoch, an epoch ReduceLROnPlateau on `val_loss`, or none
(under SWA, whose SWALR replaces it); an EMA callback updates a copy of the weights every batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

import surge
from surge.callbacks import Callback, SpikeGuard, StochasticWeightAveraging

N, BATCH, EVERY, EPOCHS = 6, 2, 4, 2


def skipped(epoch: int, j: int) -> range:
    """The batches of `epoch` a bad batch `j` there rolls back: from the last snapshot to the judgment."""
    if epoch == 0:  # checks after steps 4 (batch 3) and 6 (the epoch's end)
        return range(0, 4) if j < 4 else range(4, 6)
    return range(0, 2) if j < 2 else range(2, 6)  # steps 8 (batch 1) and 12 (the epoch's end)


class Net(surge.Module):
    def __init__(self, sched: str = "step") -> None:
        super().__init__()
        self.sched = sched
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )
        self.data: dict[int, Any] = {}  # epoch -> its training set

    def training_step(self, batch, batch_idx):
        x, y, flag = batch
        loss = F.mse_loss(self.net(x).squeeze(1), y)
        if flag.max() > 0:  # a finite loss with a NaN gradient (d sqrt(u)/du at u=0 is inf, times 0)
            loss = loss + (self.net[0].weight.sum() * 0).sqrt()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y, _ = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(1), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if self.sched == "step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
        if self.sched == "plateau":
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}
        return opt

    def train_dataloader(self):
        return DataLoader(self.data[self.trainer.current_epoch], batch_size=BATCH)

    def val_dataloader(self):
        return DataLoader(samples(1, None), batch_size=4)


class EMA(Callback):
    """An exponential moving average of the weights, updated at every batch's end."""

    def __init__(self) -> None:
        self.shadow: list[torch.Tensor] | None = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        params = [p.detach() for p in module.parameters()]
        if self.shadow is None:
            self.shadow = [p.clone() for p in params]
        for s, p in zip(self.shadow, params):
            s.mul_(0.9).add_(p, alpha=0.1)

    def state_dict(self):
        return {"shadow": self.shadow}

    def load_state_dict(self, state):
        self.shadow = state["shadow"]


def samples(world: int, bad: tuple[str, int] | None, rank: int = 0) -> TensorDataset:
    """N batches a rank; `bad` = (kind, j): `rank`'s batch j made bad."""
    g = torch.Generator().manual_seed(3)
    n = N * BATCH * world
    x = torch.randn(n, 4, generator=g)
    y = x[:, 0] - 2 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    flag = torch.zeros(n)
    if bad is not None:
        kind, j = bad
        idx = torch.arange(j * BATCH, (j + 1) * BATCH) * world + rank  # rank's batch j
        if kind == "nan":
            x[idx] = torch.nan
        else:
            flag[idx] = 1.0
    return TensorDataset(x, y, flag)


def without(data: TensorDataset, world: int, batches: range) -> Subset:
    """`data` less every rank's `batches`."""
    lo, hi = batches.start * BATCH * world, batches.stop * BATCH * world
    return Subset(data, [i for i in range(len(data)) if not lo <= i < hi])


def callbacks(sched: str) -> list[Any]:
    extra = [StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2)] if sched == "swa" else []
    return [EMA(), *extra]


def fit(root: Path, data: dict[int, Any], sched: str, guard: bool, devices: int = 1, **kw: Any):
    """Two epochs on `data` (epoch -> set) from seed 7, with a SpikeGuard (non-finite only) or not."""
    surge.seed_everything(7)
    model = Net("none" if sched == "swa" else sched)
    model.data = data
    cbs = kw.pop("callbacks", None) or callbacks(sched) + (
        [SpikeGuard(threshold=float("inf"), max_rollbacks=5)] if guard else []
    )
    trainer = surge.Trainer(
        default_root_dir=root, accelerator="cpu", devices=devices, max_epochs=EPOCHS, logger=False,
        log_every_n_steps=EVERY, callbacks=cbs, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
        limit_val_batches=0 if sched != "plateau" else 1.0, **kw,
    )  # fmt: skip
    trainer.fit(model)
    return model, trainer


def bad_run(root: Path, sched: str, kind: str, epoch: int, j: int, world: int = 1, rank: int = 0):
    data = {e: samples(world, (kind, j) if e == epoch else None, rank) for e in range(EPOCHS)}
    return fit(root, data, sched, guard=True, devices=world)


def reference(root: Path, sched: str, epoch: int, j: int, world: int = 1):
    clean = samples(world, None)
    data = {e: without(clean, world, skipped(epoch, j)) if e == epoch else clean for e in range(EPOCHS)}
    return fit(root, data, sched, guard=False, devices=world)


def state(model: surge.Module, trainer: surge.Trainer) -> dict[str, Any]:
    """What must be equal: weights, optimizer and scheduler state, the step, the callbacks' states."""
    out: dict[str, Any] = {"model": model.state_dict(), "step": trainer.global_step}
    out["optimizer"] = trainer.optimizers[0].state_dict()
    out["schedulers"] = [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs]
    for cb in trainer.callbacks:
        if isinstance(cb, (EMA, StochasticWeightAveraging)):
            out[type(cb).__name__] = cb.state_dict()
    return out


def differences(a: Any, b: Any, key: str = "") -> list[str]:
    """Where two nested states differ (`torch.equal` on tensors, == on the rest)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{key}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{key}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{key}: {len(a)} != {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{key}[{i}]")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if torch.equal(a, b) else [key]
    return [] if a == b else [f"{key}: {a!r} != {b!r}"]
