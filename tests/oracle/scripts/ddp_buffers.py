"""A BatchNorm model fitted on two CPU processes (DDP over gloo), each rank on its own batches (so
each computes its own running statistics): every rank records the BatchNorm buffers it holds at
`on_validation_start`, at each `on_validation_batch_start` and inside each validation/test step,
and after each stage; the metrics go to metrics.csv (CSVLogger, every step).

Argument: one JSON object (all keys optional): "trainer" (Trainer arguments), "strategy" ("ddp",
"ddp_spawn", or {"broadcast_buffers": ..., "find_unused_parameters": ...} for DDPStrategy),
"manual" (manual optimization), "two_vals" (two validation loaders), "lr", "after" (stages run
after fit, on the same model without a checkpoint path: "validate", "test"), "shift" (hook names:
rank 1 moves its running mean there, e.g. at `on_validation_start`: a change of its own, which a
broadcast after it undoes)."""

import json
import sys

import lightning as L
import record
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
SPAWN = ARGS.get("strategy") == "ddp_spawn"
record.PER_RANK = not SPAWN  # spawned ranks write theirs at the fit's end; the main process record.json


def bn_state(bn):
    return {"mean": bn.running_mean, "var": bn.running_var, "n": bn.num_batches_tracked}


class Normed(L.LightningModule):
    def __init__(self, manual=False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        self.automatic_optimization = not manual

    def bn(self, key):
        record.append(key, bn_state(self.net[1]))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return None
        return loss

    def shift(self, hook):
        if hook in ARGS.get("shift", ()) and self.global_rank == 1:  # a change of the rank's own
            self.net[1].running_mean += 1

    def setup(self, stage):
        self.shift("setup")

    def on_fit_start(self):
        self.shift("on_fit_start")

    def on_train_epoch_start(self):
        self.shift("on_train_epoch_start")

    def on_validation_start(self):
        self.bn("val_start")
        self.shift("on_validation_start")

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self.bn("val_batch_start")

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.bn("val_step")
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss, sync_dist=True)
        self.log("val_loss_own", loss)  # each rank's own epoch mean

    def on_test_start(self):
        self.bn("test_start")
        self.shift("on_test_start")

    def test_step(self, batch, batch_idx):
        self.bn("test_step")
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("test_loss", loss, sync_dist=True)
        self.log("test_loss_own", loss)

    def on_fit_end(self):
        if SPAWN:  # a spawned process ends without its exit handlers: its record now
            (record.DIR / f"record-rank{self.global_rank}.json").write_text(
                json.dumps(record._record, indent=1)
            )

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=ARGS.get("lr", 0.1))


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g) * 3 + 1, torch.randint(0, 3, (n,), generator=g))


def strategy():
    chosen = ARGS.get("strategy", "ddp")
    return DDPStrategy(**chosen) if isinstance(chosen, dict) else chosen


def main():
    L.seed_everything(0)
    model = Normed(manual=ARGS.get("manual", False))
    options = {
        "accelerator": "cpu", "devices": 2, "strategy": strategy(), "max_epochs": 3,
        "logger": CSVLogger(".", name="csv"), "log_every_n_steps": 1, "enable_progress_bar": False,
        "enable_model_summary": False, "enable_checkpointing": False, **ARGS.get("trainer", {}),
    }  # fmt: skip
    trainer = L.Trainer(**options)
    train = DataLoader(data(48, 1), batch_size=4, shuffle=True)  # 6 batches per rank
    vals = [DataLoader(data(16, 2), batch_size=4)]  # 2 batches per rank
    if ARGS.get("two_vals"):
        vals.append(DataLoader(data(8, 3), batch_size=4))
    trainer.fit(model, train, vals if len(vals) > 1 else vals[0])
    record.put("after_fit", record.metrics(trainer))
    record.put("global_step", trainer.global_step)
    model.bn("fit_end")
    for stage in ARGS.get("after", ()):
        if stage == "validate":
            trainer.validate(model, vals[0], verbose=False)
        else:
            trainer.test(model, DataLoader(data(16, 4), batch_size=4), verbose=False)
        record.put(f"after_{stage}", record.metrics(trainer))
        model.bn(f"{stage}_end")
    record.weights("final", model)


if __name__ == "__main__":
    main()
