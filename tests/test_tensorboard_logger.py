"""TensorBoardLogger: the event files hold the logged values at the right steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge

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
