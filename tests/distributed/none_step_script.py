"""Two CPU processes whose rank 1 alone returns None from training_step at batch 1."""

from __future__ import annotations

import torch

import surge
from helpers import TinyModel, make_loaders


class SkipsOnRankOne(TinyModel):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return None if self.global_rank == 1 and batch_idx == 1 else loss


torch.manual_seed(0)
quiet = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
trainer = surge.Trainer(max_steps=4, accelerator="cpu", devices=2, **quiet)
trainer.fit(SkipsOnRankOne(), *make_loaders())
print(f"rank {trainer.global_rank} finished", flush=True)
