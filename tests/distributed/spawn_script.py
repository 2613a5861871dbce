"""A job for tests/distributed/test_spawn.py: `python spawn_script.py --start fork --out X --root R`.

Fits a small regression on 2 CPU ranks with `DDPStrategy(start_method=...)`, then (`--stages`)
validates, tests and predicts; the main process (rank zero under "popen") writes what it sees after
each stage to `--out`: the weights, `trainer.state`, `global_step`, `callback_metrics`, the
checkpoint callback's `best_model_path`, the stages' results, and the ranks' process ids.
"""

from __future__ import annotations

import argparse
import os
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.callbacks import ModelCheckpoint
from surge.strategies import DDPStrategy


class Net(surge.Module):
    def __init__(self, fail_rank: int = -1, lock: bool = False) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.fail_rank = fail_rank
        if lock:
            self.guard = threading.Lock()  # does not pickle

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.fail_rank and batch_idx == 1:
            raise ValueError(f"training_step failed on purpose in rank {self.global_rank}")
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def seen(trainer: surge.Trainer) -> dict:
    return {
        "state": str(trainer.state), "global_step": trainer.global_step,
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "best_model_path": trainer.checkpoint_callback.best_model_path,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", default="fork")
    parser.add_argument("--out", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--stages", default="fit")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--lock", action="store_true")
    args = parser.parse_args()
    surge.seed_everything(1)
    model = Net(args.fail_rank, args.lock)
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, max_epochs=2, strategy=DDPStrategy(start_method=args.start),
        callbacks=[ModelCheckpoint(monitor="val_loss")], default_root_dir=args.root, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    out: dict = {"main_pid": os.getpid()}
    try:
        trainer.fit(model, loader(), loader())
        out["fit"] = seen(trainer)
        out["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
        if "validate" in args.stages:
            out["validate"] = {"result": trainer.validate(model, loader(), verbose=False), **seen(trainer)}
        if "test" in args.stages:
            out["test"] = {"result": trainer.test(model, loader(), verbose=False), **seen(trainer)}
        if "predict" in args.stages:
            out["predict"] = torch.cat(trainer.predict(model, loader()))
    except Exception as err:  # what the main process is told
        out["error"] = {
            "type": type(err).__name__,
            "message": str(err),
            "bases": [c.__name__ for c in type(err).__mro__],
        }
    launcher = trainer.strategy.launcher
    out["rank_pids"] = [p.pid for p in getattr(launcher, "procs", [])]
    if trainer.global_rank == 0:
        torch.save(out, args.out)


if __name__ == "__main__":
    main()
