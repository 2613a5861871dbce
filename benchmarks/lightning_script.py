"""A typical Lightning training script, written against Lightning's API only; `lightning_mode.py`
times it under Lightning and under `surge run` (unmodified in both).

    python benchmarks/lightning_script.py --root DIR            # under Lightning
    surge run benchmarks/lightning_script.py --root DIR         # under surge

An MLP classifier on sklearn's digits (bundled with sklearn, nothing downloaded): 1,437 training
images in batches of 10 (144 optimizer steps per epoch, 3 epochs = 432 steps), a validation loader,
`self.log(..., prog_bar=True)` every step (the bar itself off), ModelCheckpoint on val_loss, a CSVLogger. A callback
times the training loop from the first batch's start to the last batch's end (validation and
checkpointing between epochs included), in wall and in process CPU time. The last line is `RESULT {json}`.
"""

import argparse
import json
import time

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset


class DigitsClassifier(L.LightningModule):
    def __init__(self, hidden: int = 128, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", acc, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class LoopClock(Callback):
    """First training batch's start to the last one's end, the number of batches, and the first
    labels of each epoch (the shuffled order)."""

    def __init__(self):
        self.start = None
        self.end = None
        self.batches = 0
        self.first_labels = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.start is None:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
        if batch_idx == 0:
            self.first_labels.append(batch[1].tolist())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1
        self.end, self.cpu_end = time.perf_counter(), time.process_time()


def digits():
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    train, val = order[:1437], order[1437:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


@torch.no_grad()
def full_val_loss(model, val):
    model.eval()
    x, y = val.tensors
    return float(F.cross_entropy(model(x), y))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, help="directory for logs and checkpoints")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(1)
    L.seed_everything(args.seed)
    train, val = digits()
    model = DigitsClassifier()
    initial_val_loss = full_val_loss(model, val)
    model.train()
    clock = LoopClock()
    checkpoint = ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        enable_progress_bar=False,
        logger=CSVLogger(args.root, name="digits"),
        callbacks=[checkpoint, clock],
        default_root_dir=args.root,
    )
    t0 = time.perf_counter()
    trainer.fit(
        model,
        DataLoader(train, batch_size=10, shuffle=True),
        DataLoader(val, batch_size=60),
    )
    fit_s = time.perf_counter() - t0
    loop_s = clock.end - clock.start
    result = {
        "framework": type(trainer).__module__.split(".")[0],
        "global_step": trainer.global_step,
        "batches": clock.batches,
        "epochs": trainer.current_epoch,
        "loop_s": loop_s,
        "steps_per_s": clock.batches / loop_s,
        "loop_cpu_s": clock.cpu_end - clock.cpu_start,
        "fit_s": fit_s,
        "initial_val_loss": initial_val_loss,
        "val_loss": full_val_loss(model, val),
        "logged_val_loss": float(trainer.callback_metrics["val_loss"]),
        "best_model_path": checkpoint.best_model_path,
        "epoch_first_labels": clock.first_labels,
        "torch_threads": torch.get_num_threads(),
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
