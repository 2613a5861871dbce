"""Two Trainers in one script, the second on 2 CPU processes: `--first auto|1|2` is the first's devices."""

from __future__ import annotations

import argparse

import torch

import surge
from helpers import TinyModel, make_loaders

parser = argparse.ArgumentParser()
parser.add_argument("--first", choices=["auto", "1", "2"], required=True)
args = parser.parse_args()
quiet = {
    "logger": False,
    "enable_progress_bar": False,
    "enable_checkpointing": False,
    "enable_model_summary": False,
}

first = "auto" if args.first == "auto" else int(args.first)
torch.manual_seed(0)
trainer = surge.Trainer(max_steps=2, accelerator="cpu", devices=first, **quiet)
trainer.fit(TinyModel(), *make_loaders())
for attempt in range(2):  # one line builds a Trainer twice: the ranks count them alike
    second = surge.Trainer(max_steps=2, accelerator="cpu", devices=2, **quiet)
    second.fit(TinyModel(), *make_loaders())
    print(f"rank {second.global_rank} finished fit {attempt}", flush=True)
