"""train_script.py's job with `--num-nodes` (and `--devices auto`), for torchrun's multi-node runs.

Every rank writes `rank<R>.json` (its place in the job, as surge sees it) to `--ranks-dir`; rank zero
also writes the job's result to `--out`, in the same format as train_script.py. For torchrun's restarts,
`--fail-once-at-step` kills rank 1 in the first attempt and `--rank0-late-on-restart` delays rank 0 in
the next one (so the other rank reads the rendezvous store first).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from train_script import Net, data

import surge


class FailingOnce(Net):
    """Net whose rank 1 dies at `fail_at_step` of torchrun's first attempt (TORCHELASTIC_RESTART_COUNT=0)."""

    def __init__(self, fail_at_step: int) -> None:
        super().__init__()
        self.fail_at_step = fail_at_step

    def training_step(self, batch, batch_idx):
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first_attempt and self.trainer.global_rank == 1 and self.trainer.global_step == self.fail_at_step:
            os._exit(3)
        return super().training_step(batch, batch_idx)


class StartStep(surge.callbacks.Callback):
    """Where training started: 0, or the step a resumed run continued from."""

    step = -1

    def on_train_start(self, trainer, module):
        self.step = trainer.global_step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", default="1", help="a number of processes per node, or 'auto'")
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--samples", type=int, default=160)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ranks-dir", required=True)
    p.add_argument("--fail-once-at-step", type=int, default=None, help="rank 1 dies there on attempt 0")
    p.add_argument(
        "--rank0-late-on-restart", type=float, default=0.0,
        help="seconds rank 0 waits before joining on a restarted attempt (the others join first)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint-every", type=int, default=None, help="save every N steps; resume with 'auto'"
    )
    args = p.parse_args()
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and os.environ.get("RANK") == "0":
        time.sleep(args.rank0_late_on_restart)
    devices = args.devices if args.devices == "auto" else int(args.devices)

    surge.seed_everything(0)
    dataset = data(args.samples)
    train = DataLoader(dataset, batch_size=args.batch_size)
    val = DataLoader(dataset, batch_size=3)
    start = StartStep()
    callbacks = [start]
    if args.checkpoint_every:
        callbacks.append(
            surge.callbacks.ModelCheckpoint(every_n_train_steps=args.checkpoint_every, save_last=True)
        )
    trainer = surge.Trainer(
        accelerator="cpu", devices=devices, num_nodes=args.num_nodes, max_epochs=args.epochs,
        max_steps=args.max_steps, default_root_dir=args.root, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1, callbacks=callbacks,
    )  # fmt: skip
    model = Net() if args.fail_once_at_step is None else FailingOnce(args.fail_once_at_step)
    trainer.fit(model, train, val, ckpt_path="auto" if args.checkpoint_every else None)
    validated = trainer.validate(model, dataloaders=val)[0]
    place = {
        "global_rank": trainer.global_rank, "local_rank": trainer.local_rank, "node_rank": trainer.node_rank,
        "world_size": trainer.world_size, "source": getattr(getattr(trainer.strategy, "env", None), "source", "single"),
        "group_rank_env": os.environ.get("GROUP_RANK"),
        "restart_count": os.environ.get("TORCHELASTIC_RESTART_COUNT"), "pid": os.getpid(),
        "start_step": start.step,
    }  # fmt: skip
    Path(args.ranks_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.ranks_dir) / f"rank{trainer.global_rank}.json").write_text(json.dumps(place))
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
                "validated": validated,
                "global_step": trainer.global_step,
                "world_size": trainer.world_size,
                "log_dir": str(trainer.log_dir),
            },
            args.out,
        )


if __name__ == "__main__":
    main()
