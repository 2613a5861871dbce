"""A Lightning script as SLURM runs it, requeued once: its first run gets the requeue signal (SIGUSR1)
at step 5; the second run, with no ckpt_path, goes on from the checkpoint the first one wrote.

Prints, as its last line, what the run saw: the step at on_train_start, the step it ended at, and
the hpc_ckpt files in default_root_dir."""

import json
import os
import signal
import sys

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel


class Net(BoringModel):
    def on_train_start(self):
        self.started_at = self.trainer.global_step

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if sys.argv[1:] == ["first"] and self.trainer.global_step == 5:
            os.kill(os.getpid(), signal.SIGUSR1)


pl.seed_everything(7)
model = Net()
trainer = pl.Trainer(
    max_epochs=2, limit_train_batches=8, limit_val_batches=0, enable_checkpointing=False, logger=False,
    enable_progress_bar=False, enable_model_summary=False, default_root_dir=".",
)  # fmt: skip
try:
    trainer.fit(model)
finally:
    ckpts = sorted(f for f in os.listdir(".") if f.startswith("hpc_ckpt_"))
    print(
        json.dumps(
            {
                "started_at": model.__dict__.get("started_at"),
                "global_step": trainer.global_step,
                "hpc": ckpts,
                "weights_sum": float(sum(p.sum() for p in model.parameters())),
            }
        )
    )
    sys.stdout.flush()
