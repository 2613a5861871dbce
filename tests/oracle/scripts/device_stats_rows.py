"""`DeviceStatsMonitor`'s rows in metrics.csv: which hooks log at which steps, without and with
accumulation (the values are the CPU's, different each run: only where they are is compared)."""

import csv
import glob

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import DeviceStatsMonitor
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger

for accumulate in (1, 2, 3):
    pl.seed_everything(1)
    folder = f"stats{accumulate}"
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=6, limit_val_batches=0, log_every_n_steps=2,
        accumulate_grad_batches=accumulate, logger=CSVLogger(folder), callbacks=[DeviceStatsMonitor()],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(BoringModel())
    with open(glob.glob(f"{folder}/**/metrics.csv", recursive=True)[0]) as f:
        rows = [
            [row["step"], sorted(k.split("/")[0] for k, v in row.items() if v and k.endswith("/cpu_percent"))]
            for row in csv.DictReader(f)
        ]
    record.put(f"rows{accumulate}", rows)
