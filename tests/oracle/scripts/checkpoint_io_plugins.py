"""Checkpoint IO plugins: TorchCheckpointIO, AsyncCheckpointIO and a CheckpointIO of the user's own
(which records its calls and writes with torch.save), each in its own directory with top-1
checkpointing over 3 epochs; a fit into another directory then resumes from the custom one's
last.ckpt through it. `direct`: AsyncCheckpointIO's save_checkpoint called by hand, with a tensor
changed in place right after, through a CheckpointIO subclassed from `lightning.fabric.plugins.io`."""

import os
from pathlib import Path

import lightning.pytorch as pl
import record
import torch
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO as FabricCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.plugins import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO


class RecordingIO(CheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        record.append("custom_calls", ["save", Path(path).name, storage_options])
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        record.append("custom_calls", ["load", Path(path).name])
        return torch.load(path, weights_only=False)

    def remove_checkpoint(self, path):
        record.append("custom_calls", ["remove", Path(path).name])
        os.remove(path)


def fit(name, plugin, epochs=3, ckpt_path=None):
    """Fit into directory `name` with `plugin`; record its files and their contents."""
    pl.seed_everything(7)
    model = BoringModel()
    trainer = pl.Trainer(
        max_epochs=epochs, limit_train_batches=4, limit_val_batches=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=[plugin],
        callbacks=[ModelCheckpoint(dirpath=name, save_top_k=1, monitor="step", mode="max", save_last=True)],
    )  # fmt: skip
    trainer.fit(model, ckpt_path=ckpt_path)
    record.put(f"{name}_files", sorted(os.listdir(name)))
    record.put(f"{name}_step", trainer.global_step)
    record.weights(f"{name}_final", model)
    for file in sorted(os.listdir(name)):
        ckpt = torch.load(Path(name) / file, weights_only=False)
        record.put(f"{name}/{file}", {"epoch": ckpt["epoch"], "global_step": ckpt["global_step"]})
        (record.DIR / "weights").mkdir(exist_ok=True)
        torch.save(ckpt["state_dict"], record.DIR / "weights" / f"{name}_{file}.pt")


fit("torch", TorchCheckpointIO())
fit("async", AsyncCheckpointIO())
fit("custom", RecordingIO())
fit("resumed", RecordingIO(), epochs=4, ckpt_path="custom/last.ckpt")


class Capture(FabricCheckpointIO):
    """Keeps what it is handed (not a copy): shows whether AsyncCheckpointIO handed it a snapshot."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saved = (checkpoint, str(path), storage_options)

    def load_checkpoint(self, path, map_location=None):
        raise NotImplementedError

    def remove_checkpoint(self, path):
        pass


# Called directly: a snapshot taken at the call, written in the background, waited for by teardown().
capture, w = Capture(), torch.tensor([0.0])
direct = AsyncCheckpointIO(checkpoint_io=capture)
direct.save_checkpoint({"w": w}, "direct.ckpt", storage_options={"k": 1})
w.add_(1.0)
direct.teardown()
record.put("direct", [capture.saved[0]["w"], capture.saved[1], capture.saved[2]])
record.put("fabric_io_is_pytorch_io", FabricCheckpointIO is CheckpointIO)
