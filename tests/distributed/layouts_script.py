"""Checkpoints that move between layouts: `python layouts_script.py MODE ROOT OUT`.

The model and data are mesh_script.py's (a 2-block transformer with a tensor-parallel plan); every
layout reads the same global batches of 8 (40 samples: 5 optimizer steps), so one process and every
mesh follow the same trajectory up to the order of their reductions.

MODE "sigterm" (4 processes, 2 x 2): SIGTERM reaches rank zero after step 3; the run saves and exits 143.
MODE "mesh" (4 processes), one fit after another, each recorded (per-rank losses, the whole state
  where the fit starts and where it ends) and written to OUT by rank zero:
  straight   2 x 2, never stopped; ModelCheckpoint every 2 steps (step=2, step=4); trainer.export at the end
  requeued   2 x 2 resumed from the "sigterm" run's folder with ckpt_path="auto" (the same mesh),
             saving step=4 with async_checkpoint=True
  dp4        4 x 1 resumed from step=2;  to_fsdp: FSDPStrategy on 4 processes resumed from step=2
  fsdp       FSDPStrategy on 4 processes, never stopped;  fsdp_to_mesh: 2 x 2 resumed from its step=3
  then a last fit that is killed (SIGKILL to every rank) while committing its second checkpoint.
MODE "one" (one plain process, saving step=4) and MODE "two" (2 processes, 1 x 2): resumed from the
  straight run's step=2; then "two" resumes the one process's step=4 on 1 x 2, and saves a model with
  a layer sized by the layout on 1 x 2 and resumes it on 2 x 1 (refused).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from mesh_script import WIDTH, Block, Net, data
from torch import nn
from torch.utils._pytree import tree_map
from torch.utils.data import DataLoader

import surge
from surge.errors import CheckpointError

SAMPLES, GLOBAL_BATCH = 40, 8
STEP2, STEP3, STEP4 = "epoch=0-step=2.ckpt", "epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt"
LAYOUTS = {"2x2": (2, 2), "4x1": (4, 1), "1x2": (1, 2), "2x1": (2, 1)}
RANK = [0]  # this process's rank in the last fit


class Drawn(Net):
    """Net whose loss is scaled by a random draw each step, the same on every rank (one scalar from
    the global generator): a resume that lost the RNG's state would train differently."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * (1 + 0.1 * torch.rand(()))


class PerRank(Drawn):
    """With a layer split by hand, outside the plan: each rank builds its own part, so the layer's
    (global) size is the layout's, which no resharding can change."""

    def configure_model(self):
        super().configure_model()
        self.part = nn.Linear(WIDTH, WIDTH // self.device_mesh["tensor_parallel"].size())


def full_state(module: Any, trainer: Any) -> dict[str, Any] | None:
    """The whole (gathered) weights and optimizer state, on rank zero (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_state_dict(module, trainer.optimizers[0], options=options)
    if not trainer.is_global_zero:
        return None
    # copies: a state dict may hold the live tensors (one process; a mesh dimension of size 1)
    weights, optim = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, state)
    return {"weights": weights, "optim": optim}


class Record(surge.callbacks.Callback):
    """Each step's loss on this rank; the whole state where training starts (after a resume's
    restore), after the steps in `at` and at the end; SIGTERM to this process after step `term_at`
    on rank zero."""

    def __init__(self, at: tuple[int, ...] = (), term_at: int | None = None) -> None:
        self.losses: list[torch.Tensor] = []
        self.at, self.term_at = at, term_at
        self.states: dict[str, Any] = {}

    def on_train_start(self, trainer, module):
        if trainer.optimizers[0].state:  # resumed (on a fresh optimizer, DCP's state dict would take a step)
            self.states["loaded"] = full_state(module, trainer)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"].detach().clone())
        if trainer.global_step in self.at:
            self.states[f"at{trainer.global_step}"] = full_state(module, trainer)
        if trainer.global_step == self.term_at and trainer.is_global_zero:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_end(self, trainer, module):
        self.states["end"] = full_state(module, trainer)


def fit(
    root: Path,
    layout: str,
    ckpt: Any = None,
    record: Record | None = None,
    every: int | None = None,
    model: type[Net] = Drawn,
    export: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """One fit on `layout` ("2x2", "4x1", "1x2", "fsdp" on 4 processes, "one"), saving every `every`
    steps (None: no ModelCheckpoint), exporting the trained weights with `export`; what it recorded."""
    if layout == "one":
        strategy, devices, dp = "auto", 1, 1
    elif layout == "fsdp":
        strategy, devices, dp = surge.strategies.FSDPStrategy(shard={Block}), 4, 4
    else:
        dp, tp = LAYOUTS[layout]
        strategy = surge.strategies.ModelParallel(data_parallel=dp, tensor_parallel=tp, shard={Block})
        devices = dp * tp
    record = record or Record()
    callbacks: list[Any] = [record]
    if every is not None:
        folder = root / "checkpoints"
        callbacks.append(
            surge.callbacks.ModelCheckpoint(
                dirpath=folder, every_n_train_steps=every, save_top_k=-1, save_last=True
            )
        )
    surge.seed_everything(0)
    trainer = surge.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_epochs=1, gradient_clip_val=0.5,
        default_root_dir=root, enable_progress_bar=False, enable_model_summary=False, logger=False,
        log_every_n_steps=1,
        enable_checkpointing=every is not None, callbacks=callbacks, **kw,
    )  # fmt: skip
    train = DataLoader(data(SAMPLES), batch_size=GLOBAL_BATCH // dp)
    trainer.fit(model(), train, ckpt_path=ckpt)
    if export:
        trainer.export(root / "model.safetensors")  # every rank: the shards are gathered
    losses = torch.stack(record.losses) if record.losses else torch.empty(0)
    every = trainer.strategy.all_gather_object(losses) if devices > 1 else [losses]
    RANK[0] = trainer.global_rank
    return {"losses": every, "data_parallel": dp, "global_step": trainer.global_step, **record.states}


def kill_at_second_commit() -> None:
    """Every rank killed (SIGKILL to the job's process group) once all have written their shards of
    the second checkpoint and rank zero is about to commit its file: the moment a crash leaves the
    most debris."""
    from surge.checkpoint import sharded

    commit, calls = sharded.save_atomic, []

    def dying(state: Any, path: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        return commit(state, path)

    sharded.save_atomic = dying


def main(mode: str, root: Path, out: Path) -> None:
    if mode == "sigterm":
        fit(root / "sigterm", "2x2", record=Record(term_at=3), every=100)  # only SIGTERM's save
        raise AssertionError("SIGTERM did not stop the run")
    runs: dict[str, Any] = {}
    saved = root / "straight" / "checkpoints" / STEP2
    if mode == "mesh":
        runs["straight"] = fit(root / "straight", "2x2", record=Record(at=(1, 2, 3)), every=2, export=True)
        runs["requeued"] = fit(root / "sigterm", "2x2", "auto", every=4, async_checkpoint=True)
        runs["dp4"] = fit(root / "dp4", "4x1", saved)
        runs["to_fsdp"] = fit(root / "to_fsdp", "fsdp", saved)
        runs["fsdp"] = fit(root / "fsdp", "fsdp", record=Record(at=(3,)), every=3)
        runs["fsdp_to_mesh"] = fit(root / "fsdp_to_mesh", "2x2", root / "fsdp" / "checkpoints" / STEP3)
    else:
        layout, record = {"two": ("1x2", None), "one": ("one", Record(at=(4,)))}[mode]
        runs[mode] = fit(root / mode, layout, saved, record=record, every=4 if mode == "one" else None)
    if mode == "two":  # the one process's whole (not sharded) checkpoint of step 4, resumed on 1 x 2
        runs["one_to_mesh"] = fit(root / "one_to_mesh", "1x2", root / "one" / "checkpoints" / STEP4)
    if mode == "two":  # a layer whose size is the layout's, saved on 1 x 2, resumed on 2 x 1
        fit(root / "per_rank", "1x2", model=PerRank, every=1, max_steps=1)
        try:
            fit(root / "per_rank_2x1", "2x1", root / "per_rank" / "checkpoints" / "last.ckpt", model=PerRank)
        except CheckpointError as err:
            runs["refused"] = str(err)
    if RANK[0] == 0:
        torch.save(runs, out)
    if mode == "mesh":
        kill_at_second_commit()
        fit(root / "killed", "2x2", every=1)
        raise AssertionError("the killed fit went on")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
