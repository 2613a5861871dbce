"""Resume from every point a checkpoint can be written, against the run that never stopped.

Shared by tests/test_resume_points.py (one process) and tests/distributed/resume_points_script.py
(DDP-2). The workload has everything that can drift: shuffled data, dropout, SGD with momentum, a
scheduler stepped every optimizer step, accumulation over 3 micro-batches with a partial last
window, a shuffled validation loader (which draws random numbers) and the sanity check.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.loggers.base import Logger

EPOCHS = 3
ACCUMULATE = 3


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(16, 3)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        self.log("train_x", x.sum(1).mean(), on_step=False, on_epoch=True)  # epoch means, weighted
        self.log("train_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.8)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def loaders() -> tuple[DataLoader, DataLoader]:
    """84 training samples in batches of 6: 14 batches on one process, 7 per rank on two (windows of 3
    leave a partial last window either way)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(108, 6, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    train = DataLoader(TensorDataset(x[:84], y[:84]), batch_size=6, shuffle=True)
    val = DataLoader(TensorDataset(x[84:], y[84:]), batch_size=8, shuffle=True)
    return train, val


class Recorder(Logger):
    """Every logged value by (step, name)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float]] = []

    def log_metrics(self, metrics, step: int) -> None:
        # goodput/*: wall-clock seconds, which no two runs share (tests/test_goodput.py checks them)
        self.rows += [
            (step, k, v) for k, v in metrics.items() if k != "epoch" and not k.startswith("goodput/")
        ]

    def rows_at(self, step: int) -> dict[tuple[int, str], float]:
        return {(s, k): v for s, k, v in self.rows if s == step}


class SaveAt(surge.callbacks.Callback):
    """Writes checkpoints with `trainer.save_checkpoint` inside hooks, and sends SIGTERM on request."""

    def __init__(self, folder: Path, batch_ends=(), validation_ends=(), sigterm_at=None) -> None:
        self.folder, self.batch_ends, self.validation_ends = folder, set(batch_ends), set(validation_ends)
        self.sigterm_at = sigterm_at

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        where = (trainer.current_epoch, batch_idx)
        if where in self.batch_ends:
            trainer.save_checkpoint(self.folder / f"batch_end-e{where[0]}-b{where[1]}.ckpt")
        if where == self.sigterm_at and trainer.is_global_zero:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_end(self, trainer, module):
        epoch = trainer.current_epoch
        if not trainer.sanity_checking and trainer.fit_loop.epoch_done and epoch in self.validation_ends:
            trainer.save_checkpoint(self.folder / f"validation_end-e{epoch}.ckpt")


def trainer(root: Path, devices: int, callbacks=(), **kw: Any) -> surge.Trainer:
    kw.setdefault("max_epochs", EPOCHS)
    kw.setdefault("logger", Recorder())
    return surge.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=devices,
        accumulate_grad_batches=ACCUMULATE,
        log_every_n_steps=1,
        callbacks=list(callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )


def fit(root: Path, devices: int, seed: int, ckpt: Path | None = None, callbacks=(), model=None, **kw: Any):
    """The workload's fit (`model` built after seeding: a `Net` unless a factory is given)."""
    surge.seed_everything(seed)
    model = Net() if model is None else model()
    t = trainer(root, devices, callbacks, **kw)
    train, val = loaders()
    t.fit(model, train, val, ckpt_path=ckpt)
    return model, t


def uninterrupted(root: Path, devices: int, batches_per_epoch: int) -> tuple[surge.Module, surge.Trainer]:
    """The reference run, writing checkpoints at every kind of save point as it goes."""
    n = batches_per_epoch
    saves = [
        surge.callbacks.ModelCheckpoint(dirpath=root / "epochs", every_n_epochs=1, save_top_k=-1),
        surge.callbacks.ModelCheckpoint(dirpath=root / "steps", every_n_train_steps=2, save_top_k=-1),
        # batch ends: inside a window, at a window's end, at the epoch's partial last window
        SaveAt(root / "hooks", batch_ends=[(0, 1), (1, 4), (1, 5), (1, n - 1)], validation_ends=[0]),
    ]
    return fit(root / "run", devices, seed=11, callbacks=saves)


def checkpoints(root: Path) -> dict[str, Path]:
    """Every save point the reference run wrote, by a readable name."""
    found = {f"epoch_end:{p.stem}": p for p in sorted((root / "epochs").glob("*.ckpt"))}
    steps = sorted((root / "steps").glob("*.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    found.update({f"every_2_steps:{p.stem}": p for p in steps[1::3]})
    found.update({f"hook:{p.stem}": p for p in sorted((root / "hooks").glob("*.ckpt"))})
    return found


def after_fit(root: Path, devices: int) -> Path:
    """A checkpoint written by `trainer.save_checkpoint` after `fit()` returned (1 of 3 epochs)."""
    _, t = fit(root / "short", devices, seed=11, max_epochs=1)
    path = root / "after_fit.ckpt"
    t.save_checkpoint(path)
    return path


def resume(root: Path, devices: int, ckpt: Path):
    """Resume from `ckpt` to the end, with the caller's RNG reseeded to something else first."""
    return fit(root, devices, seed=999, ckpt=ckpt)


def optimizer_state(t: surge.Trainer) -> dict[str, Any]:
    return t.optimizers[0].state_dict()


def differences(a: surge.Module, ta: surge.Trainer, b: surge.Module, tb: surge.Trainer) -> list[str]:
    """What differs between two finished runs: weights, optimizer state, step, scheduler."""
    out = [name for (name, p), q in zip(a.named_parameters(), b.parameters()) if not torch.equal(p, q)]
    sa, sb = optimizer_state(ta), optimizer_state(tb)
    for i, state in sa["state"].items():
        if not torch.equal(state["momentum_buffer"], sb["state"][i]["momentum_buffer"]):
            out.append(f"momentum_buffer[{i}]")
    if ta.global_step != tb.global_step:
        out.append(f"global_step {ta.global_step} != {tb.global_step}")
    if ta.lr_scheduler_configs[0].scheduler.state_dict() != tb.lr_scheduler_configs[0].scheduler.state_dict():
        out.append("scheduler state")
    return out


def step_logs(t: surge.Trainer) -> dict[int, float]:
    """The per-step train_loss values the run logged, by step (each step logged once)."""
    rows = [(step, v) for step, k, v in t.logger.rows if k == "train_loss"]
    steps = [s for s, _ in rows]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {steps}"
    return dict(rows)


def log_problems(full: surge.Trainer, resumed: surge.Trainer, ckpt: Path) -> list[str]:
    """The resumed run logs what the uninterrupted one logged after the checkpoint's step, with the
    same values (step and epoch metrics; an epoch's metrics cover the whole epoch); at the
    checkpoint's own step it may log only what the uninterrupted run logged there (an epoch end
    that had not run when the checkpoint was written)."""
    saved_step = torch.load(ckpt, weights_only=True)["global_step"]
    step_logs(resumed)
    want = {(s, k): v for s, k, v in full.logger.rows if s > saved_step}
    got = {(s, k): v for s, k, v in resumed.logger.rows if s > saved_step}
    problems = [] if got == want else [f"logs after step {saved_step}: {_diff(got, want)}"]
    at = {(s, k): v for s, k, v in full.logger.rows if s == saved_step}
    extra = {key: v for key, v in resumed.logger.rows_at(saved_step).items() if at.get(key) != v}
    problems += [f"logged at step {saved_step} what the uninterrupted run did not: {extra}"] if extra else []
    early = [s for s, _, _ in resumed.logger.rows if s < saved_step]
    return problems + ([f"logged steps before the checkpoint's: {sorted(set(early))}"] if early else [])


def _diff(got: dict, want: dict) -> str:
    keys = sorted(set(got) | set(want))
    return str([(k, got.get(k), want.get(k)) for k in keys if got.get(k) != want.get(k)][:6])


def fit_200_steps(root: Path, logger: Any, model: surge.Module) -> surge.Trainer:
    """200 steps logged every 50 into `logger` (the loggers' host-read tests)."""
    x, y = torch.randn(64 * 50, 6), torch.randint(0, 3, (64 * 50,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    surge.seed_everything(0)
    trainer = surge.Trainer(
        default_root_dir=root, max_steps=200, log_every_n_steps=50, logger=logger,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, loader)
    return trainer
