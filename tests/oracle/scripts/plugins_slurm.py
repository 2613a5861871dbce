"""`Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])` inside a SLURM job step (srun), on as
many CPU processes as the step has tasks (`argv[1]`): DDP over gloo when 2. With `argv[2] ==
"signal"` a second fit then sends its process SIGUSR1 at step 2: with auto_requeue=False no
handler is installed for it, so the process ends by the signal and the job is not requeued."""

import os
import signal
import sys

import lightning.pytorch as pl
import record
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader

devices = int(sys.argv[1])


class Shuffled(BoringModel):
    """A shuffled loader: under DDP both frameworks then draw the same DistributedSampler order
    (Lightning would turn a sequential one's shuffling on; surge keeps it sequential)."""

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 64), batch_size=2, shuffle=True)


def trainer(**kwargs):
    return pl.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", logger=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=2,
        plugins=[SLURMEnvironment(auto_requeue=False)], **kwargs,
    )  # fmt: skip


pl.seed_everything(7)
model = Shuffled()
first = trainer(max_epochs=2, limit_train_batches=4)
first.fit(model)
os.environ["RANK"] = str(first.global_rank)  # which process writes the record
record.put("ranks", [first.global_rank, first.world_size])
record.put("global_step", first.global_step)
record.put("callback_metrics", record.metrics(first))
record.put("files", sorted(os.listdir("checkpoints")))
record.weights("final", model)


class SignalAtStep2(Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGUSR1)


if sys.argv[2:] == ["signal"]:
    record._write()  # now: a process the signal ends runs no exit handlers
    trainer(max_epochs=1, limit_train_batches=6, callbacks=[SignalAtStep2()], default_root_dir="second").fit(
        BoringModel()
    )
    print("the fit went on after SIGUSR1", flush=True)
