"""A training script run as a real job by the distributed tests: `python train_script.py --devices N ...`.

Rank zero writes what the job produced (weights, metrics, predictions) to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)

    poison: tuple[int | None, int] = (None, 0)
    stuck: tuple[int | None, int] = (None, 0)  # this rank spins forever in training_step at this batch

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.stuck == (self.trainer.global_rank, batch_idx):
            print(f"rank {self.stuck[0]} is stuck from {time.time()}", flush=True)
            spin_forever()
        loss = F.cross_entropy(self(x), y)
        rank, step = self.poison
        if rank == self.trainer.global_rank and self.trainer.global_step + 1 == step:
            loss = loss * float("nan")  # this rank alone computes a NaN loss for optimizer step `step`
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("train_x", x.sum(1).mean(), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())
        self.log("val_x", x.sum(1).mean())
        self.log("val_count", float(len(x)), reduce_fx="sum")

    def predict_step(self, batch, batch_idx):
        return batch[0].sum(1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.lin.parameters(), lr=0.5)


class CountAllreduces(surge.callbacks.Callback):
    """Counts gradient allreduces with a DDP comm hook."""

    def __init__(self) -> None:
        self.calls = 0

    def on_train_start(self, trainer, module):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def hook(state, bucket):
            self.calls += 1
            return allreduce_hook(state, bucket)

        trainer.strategy.wrapped.register_comm_hook(None, hook)


class HangAt(surge.callbacks.Callback):
    """Stops answering on one rank at one step (a hung rank, not a dead one)."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            import time

            time.sleep(600)


def spin_forever() -> None:
    """Python code that never returns (and never enters a collective)."""
    while True:
        sum(range(1000))


class StopAt(surge.callbacks.Callback):
    """Stops the whole process of one rank with SIGSTOP at one step, as a frozen host would."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            import signal

            print(f"rank {self.rank} stops itself at {time.time()}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)


class FailAt(surge.callbacks.Callback):
    """Raises on one rank at one step: the other ranks must not wait for it forever."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            raise RuntimeError(f"boom on rank {self.rank} at step {self.step}")


def data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SURGE_LAUNCHED")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--samples", type=int, default=160)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--root", required=True)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--count-allreduce", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--fail-rank", type=int, default=None)
    p.add_argument("--fail-step", type=int, default=3)
    p.add_argument("--hang-rank", type=int, default=None)
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--stop-rank", type=int, default=None, help="SIGSTOP this rank at --fail-step")
    p.add_argument("--stuck-rank", type=int, default=None, help="spin in training_step at batch --fail-step")
    p.add_argument("--poison-rank", type=int, default=None)
    p.add_argument("--nonfinite", default="warn")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--async-checkpoint", action="store_true")
    p.add_argument("--every-step", action="store_true", help="a checkpoint every step, top 2 and last")
    p.add_argument("--compile", default="false", help="Trainer(compile=...) as JSON")
    args = p.parse_args()

    surge.seed_everything(0)
    dataset = data(args.samples)
    train = DataLoader(dataset, batch_size=args.batch_size, shuffle=args.shuffle, num_workers=args.workers)
    val = DataLoader(dataset, batch_size=3)
    counter = CountAllreduces()
    callbacks = [counter] if args.count_allreduce else []
    if args.fail_rank is not None:
        callbacks.append(FailAt(args.fail_rank, args.fail_step))
    if args.hang_rank is not None:
        callbacks.append(HangAt(args.hang_rank, args.fail_step))
    if args.stop_rank is not None:
        callbacks.append(StopAt(args.stop_rank, args.fail_step))
    if args.every_step:
        callbacks.append(surge.callbacks.ModelCheckpoint(every_n_train_steps=1, save_top_k=2, save_last=True))
    strategy = "auto"
    if args.timeout is not None:
        strategy = surge.strategies.DDPStrategy(timeout=args.timeout)
    trainer = surge.Trainer(
        callbacks=callbacks,
        accelerator="cpu", devices=args.devices, max_epochs=args.epochs, max_steps=args.max_steps,
        accumulate_grad_batches=args.accumulate, default_root_dir=args.root, enable_progress_bar=False,
        strategy=strategy, on_nonfinite=args.nonfinite,
        profiler=surge.profiler.SimpleProfiler(measure_workers=False) if args.profile else None,
        enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1,
        async_checkpoint=args.async_checkpoint,
        compile=json.loads(args.compile),
    )  # fmt: skip
    model = Net()
    model.poison = (args.poison_rank, args.fail_step)
    model.stuck = (args.stuck_rank, args.fail_step)
    trainer.fit(model, train, val, ckpt_path=args.ckpt)
    fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}  # a later stage starts empty
    validated = trainer.validate(model, dataloaders=val)[0]
    predictions = trainer.predict(model, dataloaders=DataLoader(dataset, batch_size=3))
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
                "metrics": fit_metrics,
                "validated": validated,
                "allreduces": counter.calls,
                "global_step": trainer.global_step,
                "world_size": trainer.world_size,
                "predictions": torch.cat(predictions),
                "last_ckpt": trainer.checkpoint_callback.last_model_path
                or trainer.checkpoint_callback.best_model_path,
                "log_dir": str(trainer.log_dir),
                "doctor": json.dumps(trainer.profiler.report, default=str) if args.profile else "",
                "launch_vars": {k: os.environ.get(k, "") for k in LAUNCH_VARS},
            },
            args.out,
        )


if __name__ == "__main__":
    main()
