"""Preemption inside the fit loop: ranks agreeing that a signal came, and the checkpoint-and-exit."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ..launch.signals import Preempted, requeue_slurm_job
from ..rank_zero import info

if TYPE_CHECKING:
    from .train_batches import TrainBatches


def signalled(loop: TrainBatches, single: bool) -> bool:
    """Whether a preemption signal came (under several processes: to any rank, agreed at log intervals)."""
    ctx, global_step = loop.context(), loop.global_step
    if single:
        return ctx.signals.received is not None
    if global_step % max(1, ctx.settings.log_every_n_steps):  # 0 (no step logging): every step
        return False
    # Ranks agree at log intervals (one small collective there), so all stop at the same step.
    return ctx.parts.strategy.reduce_bool(ctx.signals.received is not None)


def preempt(loop: TrainBatches) -> None:
    """Checkpoint at this step boundary, requeue under SLURM on the requeue signal, and exit."""
    ctx = loop.context()
    if ctx.rollback is not None:  # the checkpoint holds a judged state (one host read, a collective)
        loop.global_step = ctx.rollback.settle(loop, loop.batches_done)
    global_step, trainer = loop.global_step, ctx.checkpointing
    sig = ctx.signals.received or signal.SIGTERM
    cb = trainer.checkpoint_callback
    folder = (
        Path(cb.dirpath)
        if cb is not None and cb.dirpath is not None
        else Path(trainer.log_dir) / "checkpoints"
    )
    path = ctx.signals.requeue.save_path(
        sig, trainer.default_root_dir, folder
    )  # last.ckpt, or Lightning's name
    trainer.save_checkpoint(path)
    info(f"{signal.Signals(sig).name}: saved {path} at step {global_step}; stopping")
    if sig == ctx.signals.requeue.signal and trainer.is_global_zero:
        requeue_slurm_job()
    raise Preempted(ctx.signals.requeue.exit_code(sig))
