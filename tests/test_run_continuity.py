"""A resume continues the loggers' run: the same TensorBoard/CSV version, and at the end the run holds
exactly what the uninterrupted run logged, no step written twice or lost, from every save point.

The reference run logs every step into the default loggers (TensorBoard + metrics.csv) and writes
checkpoints at every kind of save point. Each resume starts from a copy of the reference's whole
directory (its logs run to the end, as after a crash late in the run) and must replace what was
logged after the checkpoint, not add to it.
"""

from __future__ import annotations

import csv
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

import resume_points as rp
import surge

pytest.importorskip("tensorboard")


class LogsAtBatchEnd(surge.callbacks.Callback):
    """Logs in `on_train_batch_end`, before the savers' hooks run: the value belongs to its batch's
    row, and a checkpoint saved at a log interval's batch end carries that row with it."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        module.log("batch_end_value", float(trainer.global_step * 100 + batch_idx))


def _fit(root: Path, seed: int, callbacks=(), ckpt: Path | None = None) -> surge.Trainer:
    return rp.fit(root, 1, seed, ckpt, (LogsAtBatchEnd(), *callbacks), logger=True)[1]


def csv_values(run: Path) -> Counter:
    """Every (step, name, value) cell of metrics.csv, counted (a value written twice counts 2)."""
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return Counter(
        (r["step"], k, v) for r in rows for k, v in r.items() if k != "step" and v != "" and _run_value(k)
    )


def _run_value(name: str) -> bool:
    """Not a goodput/* cell: wall-clock seconds, which no two runs share (tests/test_goodput.py checks them)."""
    return not name.startswith("goodput/")


def board_values(run: Path) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard's scalars per tag as TensorBoard shows them (purged events dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    tags = [tag for tag in acc.Tags()["scalars"] if _run_value(tag)]
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in tags}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    n = 14
    saves = [
        surge.callbacks.ModelCheckpoint(dirpath=root / "epochs", every_n_epochs=1, save_top_k=-1),
        surge.callbacks.ModelCheckpoint(dirpath=root / "steps", every_n_train_steps=2, save_top_k=-1),
        rp.SaveAt(root / "hooks", batch_ends=[(0, 1), (1, 4), (1, 5), (1, n - 1)], validation_ends=[0]),
    ]
    trainer = _fit(root / "run", seed=11, callbacks=saves)
    assert trainer.log_dir == str(root / "run" / "surge_logs" / "version_0")
    return root


def test_a_resume_from_every_save_point_continues_the_run_without_a_duplicate(reference, tmp_path):
    run = Path("run") / "surge_logs" / "version_0"
    want_csv, want_board = csv_values(reference / run), board_values(reference / run)
    assert want_csv and "train_loss" in want_board and "val_loss" in want_board
    # the batch-end value is in its own step's row (logged at the batch that wrote the row)
    logged = {int(step): float(v) for step, k, v in want_csv if k == "batch_end_value"}
    assert logged and all(v // 100 == step for step, v in logged.items()), logged
    points = rp.checkpoints(reference)
    assert len(points) >= 8
    # TensorBoard reads a run's event files in the order of their names: the second the file was
    # opened, then host, pid and a per-process counter compared as text ("10" < "9"). A resume in a new
    # process always sorts after; this one runs in the reference's process, so it waits for a later second.
    opened = max(int(f.name.split(".")[3]) for f in (reference / run).glob("events.out.tfevents.*"))
    while int(time.time()) <= opened:
        time.sleep(0.05)
    for name, ckpt in points.items():
        copy = tmp_path / name.replace(":", "_")
        shutil.copytree(reference, copy)
        trainer = _fit(copy / "run", seed=999, ckpt=copy / ckpt.relative_to(reference))
        assert trainer.log_dir == str(copy / run), name  # the same version, not version_1
        assert not (copy / "run" / "surge_logs" / "version_1").exists(), name
        got_csv = csv_values(copy / run)
        assert got_csv == want_csv, (
            f"{name}: metrics.csv differs: {(got_csv - want_csv) + (want_csv - got_csv)}"
        )
        assert board_values(copy / run) == want_board, f"{name}: TensorBoard scalars differ"


def test_a_checkpoint_names_the_run_its_loggers_wrote(reference):
    state = torch.load(next((reference / "epochs").glob("*.ckpt")), weights_only=True)
    runs = state["loggers"]["runs"]
    assert [r["class"] for r in runs] == ["TensorBoardLogger", "CSVLogger"]
    assert [r["run"] for r in runs] == [{"version": 0}, {"version": 0}]
    assert state["loggers"]["step"] == state["global_step"]  # what was logged at the save's step
    assert any("train_loss" in row for row in state["loggers"]["rows"])


def test_a_given_version_wins_over_the_checkpoints(reference, tmp_path, caplog):
    shutil.copytree(reference, tmp_path / "copy")
    ckpt = next((tmp_path / "copy" / "epochs").glob("*.ckpt"))
    logger = surge.loggers.CSVLogger(tmp_path / "copy" / "run", version=7)
    surge.seed_everything(1)
    caplog.set_level("INFO", logger="surge")
    trainer = surge.Trainer(
        default_root_dir=tmp_path / "copy" / "run",
        max_epochs=rp.EPOCHS,
        accumulate_grad_batches=rp.ACCUMULATE,
        logger=logger,
        enable_progress_bar=False,
    )
    trainer.fit(rp.Net(), *rp.loaders(), ckpt_path=ckpt)
    assert Path(logger.log_dir).name == "version_7"
    assert "logging to version 7, not the checkpoint's 0" in caplog.text
