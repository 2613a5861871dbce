"""TensorBoardLogger: the event files hold the logged values at the right steps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge

SRC = str(Path(__file__).resolve().parents[1] / "src")

pytest.importorskip("tensorboard", reason="the tensorboard package is an optional extra")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


class Model(surge.Module):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(4, 1)
        self.example_input_array = torch.zeros(2, 4)
        self.losses: list[float] = []

    def forward(self, x):
        return self.lin(x)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self(x).pow(2).mean()
        self.losses.append(loss.item())
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_scalars_hparams_and_graph_are_read_back_at_their_steps(tmp_path):
    logger = surge.loggers.TensorBoardLogger(tmp_path, log_graph=True)
    model = Model()
    trainer = surge.Trainer(max_steps=6, log_every_n_steps=2, logger=logger, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4))
    events = EventAccumulator(str(logger.log_dir))
    events.Reload()
    points = {e.step: e.value for e in events.Scalars("loss")}
    assert sorted(points) == [2, 4, 6]
    for step, value in points.items():
        assert value == pytest.approx(model.losses[step - 1], rel=1e-6)  # the step's own loss
    assert events.Graph() is not None
    assert logger.log_dir == trainer.log_dir and Path(logger.log_dir).name == "version_0"


def test_a_logger_that_never_logs_writes_an_event_file_and_hparams_yaml_as_lightning(tmp_path):
    logger = surge.loggers.TensorBoardLogger(tmp_path)
    assert list(tmp_path.iterdir()) == []  # made, never used: nothing
    logger.save()
    logger.finalize("success")
    run = Path(logger.log_dir)
    assert (run / "hparams.yaml").read_text() == "{}\n"
    assert [p.name.startswith("events.out.tfevents.") for p in run.iterdir() if p.name != "hparams.yaml"] == [
        True
    ]


def scalars_on_disk(logger: surge.loggers.TensorBoardLogger, tag: str) -> list[tuple[int, float, float]]:
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    return (
        [(e.step, e.value, e.wall_time) for e in events.Scalars(tag)]
        if tag in events.Tags()["scalars"]
        else []
    )


def test_scalars_are_handed_over_in_batches_with_the_wall_time_they_were_logged_at(tmp_path, monkeypatch):
    import surge.loggers.tensorboard as tb

    clock = [1000.0]
    monkeypatch.setattr(tb.time, "time", lambda: clock[0])
    logger = surge.loggers.TensorBoardLogger(tmp_path, flush_secs=30)
    logger.log_metrics({"loss": 1.0}, step=1)  # the first log point hands over at once
    assert scalars_on_disk(logger, "loss") == [(1, 1.0, 1000.0)]
    clock[0] = 1010.0
    logger.log_metrics({"loss": 2.0}, step=2)
    clock[0] = 1029.0
    logger.log_metrics({"loss": 3.0}, step=3)
    assert len(scalars_on_disk(logger, "loss")) == 1  # kept: 30 s have not passed
    clock[0] = 1030.0
    logger.log_metrics({"loss": 4.0}, step=4)
    assert scalars_on_disk(logger, "loss") == [
        (1, 1.0, 1000.0), (2, 2.0, 1010.0), (3, 3.0, 1029.0), (4, 4.0, 1030.0)
    ]  # fmt: skip
    logger.log_metrics({"loss": 5.0}, step=5)
    logger.run_state()  # a checkpoint names the run: what was logged before it is written first
    assert [s for s, _, _ in scalars_on_disk(logger, "loss")] == [1, 2, 3, 4, 5]
    logger.log_metrics({"loss": 6.0}, step=6)
    logger.save()  # an epoch's end
    assert [s for s, _, _ in scalars_on_disk(logger, "loss")] == [1, 2, 3, 4, 5, 6]
    logger.finalize("success")


def test_the_writer_thread_writes_nothing_while_steps_run_between_hand_overs(tmp_path):
    # Each scalar the SummaryWriter's thread writes opens, writes and closes the event file; done
    # while a step runs, each of those takes the interpreter's lock from the step.
    sizes: list[int] = []  # the event files' bytes after each step

    class Watch(surge.callbacks.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            sizes.append(sum(p.stat().st_size for p in Path(logger.log_dir).glob("events.out.tfevents.*")))

    logger = surge.loggers.TensorBoardLogger(tmp_path, flush_secs=3600)  # one hand-over, however slow the fit
    trainer = surge.Trainer(max_steps=40, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                            callbacks=[Watch()])  # fmt: skip
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=1))
    assert len(set(sizes[1:])) == 1, sizes  # after the first log point's hand-over, nothing until the end
    assert [s for s, _, _ in scalars_on_disk(logger, "loss")] == list(range(1, 41))


def test_a_tensor_given_to_log_metrics_is_written_with_its_value_when_logged(tmp_path):
    # Lightning's logger takes a tensor's number at once; one kept for a later batch would show what
    # the tensor holds at the hand-over (an in-place running count) and keep its autograd graph alive.
    import weakref

    logger = surge.loggers.TensorBoardLogger(tmp_path)  # flush_secs=30: steps 2 and 3 wait for the end
    count, w = torch.zeros(()), torch.ones(3, requires_grad=True)
    graphs = []
    for step in (1, 2, 3):
        count += 1
        loss = (w * 2).sum() * step
        graphs.append(weakref.ref(loss))
        logger.log_metrics({"count": count, "loss": loss}, step=step)
    del loss
    assert [g() for g in graphs] == [None, None, None]  # nothing logged keeps a graph alive
    logger.finalize("success")
    assert [(s, v) for s, v, _ in scalars_on_disk(logger, "count")] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert [(s, v) for s, v, _ in scalars_on_disk(logger, "loss")] == [(1, 6.0), (2, 12.0), (3, 18.0)]


def test_scalars_logged_outside_a_fit_reach_the_event_file_when_the_process_exits(tmp_path):
    # After a fit's end (a final metric), or with no Trainer at all, no epoch end or checkpoint
    # hands the last batch over: the interpreter's exit does.
    import subprocess
    import sys

    script = (
        "import surge\n"
        f"logger = surge.loggers.TensorBoardLogger({str(tmp_path)!r}, version=0)\n"
        "for step in range(5):\n"
        "    logger.log_metrics({'x': float(step)}, step=step)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ, "PYTHONPATH": SRC})
    events = EventAccumulator(str(tmp_path / "surge_logs" / "version_0"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("x")] == [(s, float(s)) for s in range(5)]


def test_a_value_that_is_not_a_number_is_refused_where_it_is_logged(tmp_path):
    # Kept for a later batch, it would fail that hand-over (an epoch's end, a checkpoint) and every
    # one after it.
    logger = surge.loggers.TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=1)
    for value in ({"a": 1.0}, "abc", None, torch.ones(2)):
        with pytest.raises(surge.errors.MisconfigurationError, match="'bad'"):
            logger.log_metrics({"bad": value}, step=2)
    logger.log_metrics({"loss": 2.0}, step=3)
    logger.finalize("success")
    assert [(s, v) for s, v, _ in scalars_on_disk(logger, "loss")] == [(1, 1.0), (3, 2.0)]


@pytest.mark.parametrize("flush_secs", ["30", -1, float("nan"), True])
def test_a_wrong_flush_secs_is_refused_when_the_logger_is_made(tmp_path, flush_secs):
    with pytest.raises(surge.errors.MisconfigurationError, match=r"TensorBoardLogger\(flush_secs\)"):
        surge.loggers.TensorBoardLogger(tmp_path, flush_secs=flush_secs)
