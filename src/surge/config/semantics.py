"""Whose observable behaviour a run follows where surge's own API deliberately differs from
Lightning's: `SURGE`, or `LIGHTNING` under `surge run` (the Lightning mode).

One frozen value with a named field per difference. The Trainer reads the mode once, in its
constructor (`Semantics.current()`), and hands the value to the parts it builds, as it hands them
the precision or the strategy; a part reads its field when it is built, never per step. Two objects
a script builds before any Trainer read the mode themselves, when built: a logger (its default run
name) and `ModelCheckpoint` (the refusal Lightning makes in its constructor). The mode
marks itself with the `sys.meta_path` finder it installs (`lightning_semantics = True`); nothing
else is global. docs/lightning.md ("Where the Lightning mode differs") has one row per field, and
tests/test_semantics.py holds the two equal."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Semantics:
    """One field per observable difference between surge's own API and Lightning's."""

    name: Literal["surge", "lightning"]
    # A step-interval scheduler's `frequency` counts optimizer steps, or the batch's index in its
    # epoch plus one (Lightning's, which also steps them at a -1 cut of the epoch).
    scheduler_clock: Literal["optimizer_steps", "batch_index"]
    # The loss `on_train_batch_end` (and an optimizer closure) gets: as `training_step` returned it,
    # or divided by the accumulation window, as the backward used it.
    batch_end_loss: Literal["as_returned", "divided"]
    # Gradients freed right after the optimizer step (when no zero_grad hook watches), or kept to
    # the next window's first micro-batch.
    frees_gradients: Literal["at_step", "next_window"]
    # Subtracted from `global_step` for the loggers' training step (Lightning's is one less).
    logger_step_offset: int
    # Whether validation inside a fit draws from training's random streams.
    validation_moves_training_rng: bool
    # Whether an epoch value logged without `sync_dist` is reduced over the ranks.
    epoch_reduces_unsynced: bool
    # A torchmetrics Metric logged with `on_step` on a batch that only updated it: refused, or
    # its step value left out (its epoch value stays).
    uncalled_metric_step: Literal["refused", "left_out"]
    # The run directory name a logger's default `name` stands for.
    default_logger_name: str
    # Whether `logger=True` writes `metrics.csv` beside TensorBoard's files.
    csv_beside_tensorboard: bool
    # Whether the goodput values and heartbeat go to the loggers and their folder.
    goodput_in_loggers: bool
    # What the end of a fit prints of the goodput when `goodput_report` is not given.
    goodput_report: Literal["line", "SURGE_GOODPUT"]
    # Whether fit() on the CPU checks torch's thread count against the cores per process.
    checks_cpu_threads: bool
    # Whether the "16-mixed on the CPU" warning adds how to keep fp16 all the same.
    fp16_on_cpu_advice: bool
    # Automatic optimization with several optimizers: each steps, or refused.
    automatic_multiple_optimizers: Literal["stepped", "refused"]
    # The checkpoint a requeue signal writes (and fit() resumes): surge's own, or `hpc_ckpt_<N>.ckpt`.
    requeue_checkpoint: Literal["surge", "hpc_ckpt"]
    # Whether each stage's setup re-seeds every rank from the last `seed_everything`.
    reseeds_ranks: bool
    # Where ModelCheckpoint's directory lock lives: in the directory, or in surge's own folder.
    checkpoint_lock: Literal["in_directory", "beside"]
    # `ModelCheckpoint(save_top_k=k > 1)` without a monitor: keeps the newest k, or refused.
    top_k_without_monitor: Literal["newest", "refused"]
    # What a fit's end says: surge's warning when it trained nothing, or Lightning's stop reason.
    fit_end_words: Literal["surge", "lightning"]
    # Whether a fit that resumes from a checkpoint warns that ModelCheckpoint's directory is not empty.
    warns_full_checkpoint_dir_on_resume: bool
    # What `predict()` returns on several processes: every rank's predictions on rank zero, in
    # dataset order (the others: []), or each rank its own.
    predict_returns: Literal["gathered", "own"]
    # Whether a resumed fit runs the sanity check: never, or (Lightning) from a checkpoint written
    # after a training epoch's end (none written inside an epoch or during its validation).
    sanity_check_on_resume: Literal["never", "after_epoch_end"]

    @classmethod
    def current(cls) -> Semantics:
        """The mode this process runs in: `LIGHTNING` under `surge run` (its DDP ranks and its
        DataLoader workers too), else `SURGE`. The one global read: the Trainer's constructor calls it
        (and the two objects built before any Trainer, above)."""
        marked = any(getattr(finder, "lightning_semantics", False) is True for finder in sys.meta_path)
        return LIGHTNING if marked else SURGE


SURGE = Semantics(
    name="surge",
    scheduler_clock="optimizer_steps",
    batch_end_loss="as_returned",
    frees_gradients="at_step",
    logger_step_offset=0,
    validation_moves_training_rng=False,
    epoch_reduces_unsynced=True,
    uncalled_metric_step="refused",
    default_logger_name="surge_logs",
    csv_beside_tensorboard=True,
    goodput_in_loggers=True,
    goodput_report="line",
    checks_cpu_threads=True,
    fp16_on_cpu_advice=True,
    automatic_multiple_optimizers="stepped",
    requeue_checkpoint="surge",
    reseeds_ranks=False,
    checkpoint_lock="in_directory",
    top_k_without_monitor="newest",
    fit_end_words="surge",
    warns_full_checkpoint_dir_on_resume=False,
    predict_returns="gathered",
    sanity_check_on_resume="never",
)

LIGHTNING = Semantics(
    name="lightning",
    scheduler_clock="batch_index",
    batch_end_loss="divided",
    frees_gradients="next_window",
    logger_step_offset=1,
    validation_moves_training_rng=True,
    epoch_reduces_unsynced=False,
    uncalled_metric_step="left_out",
    default_logger_name="lightning_logs",
    csv_beside_tensorboard=False,
    goodput_in_loggers=False,
    goodput_report="SURGE_GOODPUT",
    checks_cpu_threads=False,
    fp16_on_cpu_advice=False,
    automatic_multiple_optimizers="refused",
    requeue_checkpoint="hpc_ckpt",
    reseeds_ranks=True,
    checkpoint_lock="beside",
    top_k_without_monitor="refused",
    fit_end_words="lightning",
    warns_full_checkpoint_dir_on_resume=True,
    predict_returns="own",
    sanity_check_on_resume="after_epoch_end",
)
