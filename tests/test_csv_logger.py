"""CSVLogger: versioned run directories, metrics.csv (Lightning's layout: one row per logging call,
sorted columns) with a growing header, hparams.yaml."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from helpers import TinyModel, fast_trainer, make_loaders
from surge.loggers import CSVLogger, TensorBoardLogger


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def fit(logger, model=None, epochs: int = 1, **kw):
    model = model if model is not None else TinyModel()
    train, val = make_loaders()
    trainer = fast_trainer(logger=logger, max_epochs=epochs, **kw)
    trainer.fit(model, train, val)
    return trainer, model


def test_two_runs_in_one_root_get_version_0_and_1(tmp_path):
    first, second = CSVLogger(tmp_path), CSVLogger(tmp_path)
    fit(first)
    fit(second)
    assert first.log_dir == str(tmp_path / "surge_logs" / "version_0")
    assert second.log_dir == str(tmp_path / "surge_logs" / "version_1")
    assert (first.version, second.version) == (0, 1)
    for lg in (first, second):
        assert (Path(lg.log_dir) / "metrics.csv").is_file()
        assert (Path(lg.log_dir) / "hparams.yaml").is_file()


def test_version_numbers_continue_after_the_highest(tmp_path):
    (tmp_path / "surge_logs" / "version_3").mkdir(parents=True)
    (tmp_path / "surge_logs" / "version_x").mkdir()
    lg = CSVLogger(tmp_path)
    assert lg.version == 4
    assert lg.log_dir == str(tmp_path / "surge_logs" / "version_4")


def test_explicit_name_and_version(tmp_path):
    lg = CSVLogger(tmp_path, name="exp", version="run-a")
    fit(lg)
    assert lg.log_dir == str(tmp_path / "exp" / "run-a")
    assert lg.name == "exp"
    assert (tmp_path / "exp" / "run-a" / "metrics.csv").is_file()
    numbered = CSVLogger(tmp_path, name="exp", version=7)
    assert numbered.log_dir == str(tmp_path / "exp" / "version_7")


def test_metrics_csv_has_the_logged_values(tmp_path):
    lg = CSVLogger(tmp_path)
    trainer, model = fit(lg, epochs=2, log_every_n_steps=2)  # 4 steps per epoch
    header, rows = read_csv(lg.metrics_path)
    assert header == sorted(header, key=lambda name: (name.startswith("goodput/"), name))  # surge's own last
    assert header[-1].startswith("goodput/") and not header[0].startswith("goodput/")
    assert {"step", "epoch", "train_loss", "val_loss", "val_acc"} <= set(header)
    assert not any(r["train_loss"] and r["val_loss"] for r in rows)  # step and epoch values: own rows
    train_rows = [r for r in rows if r["train_loss"]]
    assert [int(r["step"]) for r in train_rows] == [2, 4, 6, 8]
    val_rows = [r for r in rows if r["val_loss"]]
    assert [float(r["val_loss"]) for r in val_rows] == pytest.approx(model.val_history, rel=1e-6)
    assert [int(r["epoch"]) for r in val_rows] == [0, 1]
    assert float(val_rows[-1]["val_loss"]) == pytest.approx(trainer.logged_metrics["val_loss"].item())


def test_header_grows_when_a_new_metric_appears(tmp_path):
    lg = CSVLogger(tmp_path)
    lg.log_metrics({"a": 1.0, "epoch": 0}, step=1)
    lg.save()
    assert read_csv(lg.metrics_path)[0] == ["a", "epoch", "step"]
    lg.log_metrics({"a": 2.0, "epoch": 0}, step=2)
    lg.save()
    lg.log_metrics({"b": 3.0, "epoch": 1}, step=3)
    lg.log_metrics({"a": 4.0, "c": 5.0, "epoch": 1}, step=4)
    lg.log_metrics({"d": 6.0}, step=4)  # the same step again: a row of its own
    lg.finalize("success")
    header, rows = read_csv(lg.metrics_path)
    assert header == ["a", "b", "c", "d", "epoch", "step"]
    assert rows == [
        {"a": "1.0", "b": "", "c": "", "d": "", "epoch": "0", "step": "1"},
        {"a": "2.0", "b": "", "c": "", "d": "", "epoch": "0", "step": "2"},
        {"a": "", "b": "3.0", "c": "", "d": "", "epoch": "1", "step": "3"},
        {"a": "4.0", "b": "", "c": "5.0", "d": "", "epoch": "1", "step": "4"},
        {"a": "", "b": "", "c": "", "d": "6.0", "epoch": "", "step": "4"},
    ]


class LateMetric(TinyModel):
    """Logs "late" only from the second epoch on."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.current_epoch >= 1:
            self.log("late", loss * 2)
        return loss


def test_header_grows_during_a_run_and_older_rows_keep_empty_cells(tmp_path):
    lg = CSVLogger(tmp_path)
    fit(lg, model=LateMetric(), epochs=2, log_every_n_steps=1)
    header, rows = read_csv(lg.metrics_path)
    assert "late" in header
    step_rows = [r for r in rows if r["train_loss"]]
    assert len(step_rows) == 8
    assert all(r["late"] == "" for r in step_rows[:4])
    assert all(r["late"] != "" for r in step_rows[4:])
    for r in step_rows[4:]:
        assert float(r["late"]) == pytest.approx(2 * float(r["train_loss"]), rel=1e-5)
    # every row has exactly the header's columns
    with open(lg.metrics_path, newline="") as f:
        lines = list(csv.reader(f))
    assert all(len(line) == len(header) for line in lines)


class WithHparams(TinyModel):
    def __init__(self, hidden: int = 16, lr: float = 0.05, name: str = "tiny", layers=(8, 4)):
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters()


def test_hparams_yaml_holds_save_hyperparameters(tmp_path):
    lg = CSVLogger(tmp_path)
    model = WithHparams(hidden=12, lr=0.02, name="abc")
    fit(lg, model=model)
    saved = yaml.safe_load((Path(lg.log_dir) / "hparams.yaml").read_text())
    # TinyModel's own save_hyperparameters() and this one's, merged as Lightning's
    tiny = {"in_dim": 4, "out_dim": 2, "scheduler": None, "scripted_val_loss": None}
    assert saved == {"hidden": 12, "lr": 0.02, "name": "abc", "layers": [8, 4], **tiny}
    assert saved == {k: list(v) if isinstance(v, tuple) else v for k, v in model.hparams.items()}


def test_no_hparams_yaml_without_hyperparameters(tmp_path):
    class NoHparams(TinyModel):
        def __init__(self):
            super().__init__()
            self._hparams = type(self.hparams)()

    lg = CSVLogger(tmp_path)
    fit(lg, model=NoHparams())
    assert not (Path(lg.log_dir) / "hparams.yaml").exists()
    assert lg.metrics_path.is_file()


def test_logger_true_writes_under_default_root_dir(tmp_path):
    root = tmp_path / "root"
    trainer, _ = fit(True, default_root_dir=root)
    # As Lightning: TensorBoard's logger first when tensorboard is installed; metrics.csv beside it.
    assert [type(lg) for lg in trainer.loggers] == [TensorBoardLogger, CSVLogger]
    assert trainer.log_dir == str(root / "surge_logs" / "version_0")
    assert all(lg.log_dir == trainer.log_dir for lg in trainer.loggers)
    assert list(Path(trainer.log_dir).glob("events.out.tfevents.*"))
    assert (Path(trainer.log_dir) / "metrics.csv").is_file()
    assert (Path(trainer.log_dir) / "hparams.yaml").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_logger_true_without_default_root_dir_uses_the_working_directory(tmp_path):
    # conftest chdirs every test into tmp_path
    trainer, _ = fit(True)
    assert trainer.default_root_dir == str(tmp_path)
    assert trainer.log_dir == str(tmp_path / "surge_logs" / "version_0")
    assert (tmp_path / "surge_logs" / "version_0" / "metrics.csv").is_file()
    second, _ = fit(True)
    assert second.log_dir == str(tmp_path / "surge_logs" / "version_1")


def test_log_dir_without_a_logger_is_default_root_dir(tmp_path):
    trainer = fast_trainer(logger=False, default_root_dir=tmp_path / "r")
    assert trainer.log_dir == str(tmp_path / "r")
    assert trainer.logger is None


def test_log_dir_is_the_first_logger_with_a_directory(tmp_path):
    a, b = CSVLogger(tmp_path, name="a"), CSVLogger(tmp_path, name="b")
    trainer, _ = fit([a, b])
    assert trainer.log_dir == a.log_dir == str(tmp_path / "a" / "version_0")
    assert trainer.loggers == [a, b]
    for lg in (a, b):
        header, rows = read_csv(lg.metrics_path)
        assert "val_loss" in header and rows


def test_metrics_are_on_disk_after_a_failed_run(tmp_path):
    class FailsLate(TinyModel):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1 and batch_idx == 2:
                raise RuntimeError("stop here")
            return super().training_step(batch, batch_idx)

    lg = CSVLogger(tmp_path)
    with pytest.raises(RuntimeError, match="stop here"):
        fit(lg, model=FailsLate(), epochs=2, log_every_n_steps=1)
    _, rows = read_csv(lg.metrics_path)
    assert [int(r["step"]) for r in rows if r["train_loss"]] == [1, 2, 3, 4, 5, 6]


def test_a_second_logger_in_the_same_version_keeps_the_rows_and_columns_there(tmp_path):
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"a": 1.0}, step=1)
    first.finalize("success")
    again = CSVLogger(tmp_path, version=0)  # e.g. a resumed run pointed at its old directory
    again.log_metrics({"b": 2.0}, step=2)
    again.finalize("success")
    header, rows = read_csv(again.metrics_path)
    assert header == ["a", "b", "step"]
    assert rows == [{"a": "1.0", "b": "", "step": "1"}, {"a": "", "b": "2.0", "step": "2"}]
    assert sorted(p.name for p in Path(again.log_dir).iterdir()) == ["metrics.csv"]  # no temporary left


def test_a_tensor_given_to_log_metrics_is_written_with_its_value_when_logged(tmp_path):
    # Lightning's CSV writer reads a tensor when it is logged; a count updated in place must not be
    # written as its value at the flush, nor as "tensor(...)".
    import torch

    logger = CSVLogger(tmp_path)
    count = torch.zeros(())
    for step in range(1, 4):
        count += 1
        logger.log_metrics({"count": count}, step=step)
    logger.save()
    rows = list(csv.DictReader(logger.metrics_path.open()))
    assert [(r["step"], r["count"]) for r in rows] == [("1", "1.0"), ("2", "2.0"), ("3", "3.0")]
