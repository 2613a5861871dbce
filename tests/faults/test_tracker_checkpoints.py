"""Trackers and checkpoints: uploads (`log_model`) follow the durable file when checkpoints are
written in the background; a checkpoint that names another experiment's run, a run that does not
exist, or no W&B run id at all, starts a new run (and says so) instead of writing into it."""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.checkpoint import load_checkpoint, save_atomic
from surge.rank_zero import SurgeWarning

STEPS = 6


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.lin(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(root: Path, logger, steps=STEPS, ckpt=None, callbacks=(), **kw) -> surge.Trainer:
    torch.manual_seed(0)
    trainer = surge.Trainer(
        max_steps=steps, log_every_n_steps=1, logger=logger, callbacks=list(callbacks), default_root_dir=root,
        enable_progress_bar=False, enable_model_summary=False, **kw,
    )  # fmt: skip
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=1), ckpt_path=ckpt)
    return trainer


def every_step(folder: Path, **kw) -> surge.callbacks.ModelCheckpoint:
    return surge.callbacks.ModelCheckpoint(
        dirpath=folder, every_n_train_steps=1, save_top_k=-1, save_last=True, **kw
    )


def step_of(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def store(tmp_path: Path) -> str:
    """The local SQLite store MLFlowLogger(save_dir=tmp_path / "mlruns") writes."""
    return f"sqlite:///{(tmp_path / 'mlruns').resolve() / 'mlflow.db'}"


def said(caught, text: str) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SurgeWarning) and text in str(w.message)]


def resigned(ckpt: Path, out: Path, **run: str) -> Path:
    """A copy of `ckpt` whose first logger run is changed to `run`, with a valid digest."""
    state = load_checkpoint(ckpt)
    state["loggers"]["runs"][0]["run"].update(run)
    save_atomic(state, out)
    return out


# -- uploads follow the durable file ------------------------------------------------------------
def test_mlflow_log_model_all_with_background_writes_uploads_every_checkpoint_as_written(tmp_path):
    pytest.importorskip(
        "mlflow", reason='the MLflow server tests need mlflow: pip install -e ".[test-services]"'
    )
    from mlflow.tracking import MlflowClient

    from surge.loggers import MLFlowLogger

    logger = MLFlowLogger(experiment_name="uploads", save_dir=tmp_path / "mlruns", log_model="all")
    fit(tmp_path, logger, callbacks=[every_step(tmp_path / "ckpts")], async_checkpoint=True)
    got = Path(
        MlflowClient(store(tmp_path)).download_artifacts(logger.run_id, "checkpoints", str(tmp_path / "dl"))
    )
    names = {f"epoch=0-step={s}.ckpt" for s in range(1, STEPS + 1)} | {"last.ckpt"}
    assert {p.name for p in got.iterdir()} == names
    for name in names:  # each upload is the whole, final file
        assert (got / name).read_bytes() == (tmp_path / "ckpts" / name).read_bytes(), name
    assert step_of(got / "last.ckpt") == STEPS


def test_mlflow_log_model_true_uploads_the_kept_checkpoints_at_the_end(tmp_path):
    pytest.importorskip(
        "mlflow", reason='the MLflow server tests need mlflow: pip install -e ".[test-services]"'
    )
    from mlflow.tracking import MlflowClient

    from surge.loggers import MLFlowLogger

    logger = MLFlowLogger(experiment_name="uploads", save_dir=tmp_path / "mlruns", log_model=True)
    saves = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1, save_last=True)
    fit(tmp_path, logger, callbacks=[saves], async_checkpoint=True)
    got = Path(
        MlflowClient(store(tmp_path)).download_artifacts(logger.run_id, "checkpoints", str(tmp_path / "dl"))
    )
    assert {p.name for p in got.iterdir()} == {f"epoch=0-step={STEPS}.ckpt", "last.ckpt"}
    assert step_of(got / "last.ckpt") == STEPS


def test_wandb_log_model_all_with_background_writes_uploads_every_checkpoint_as_written(tmp_path):
    pytest.importorskip("wandb", reason='the W&B tests need wandb: pip install -e ".[test-services]"')
    from surge.loggers import WandbLogger
    from surge.loggers.wandb_history import records, segments

    logger = WandbLogger(save_dir=tmp_path, offline=True, log_model="all")
    fit(tmp_path, logger, callbacks=[every_step(tmp_path / "ckpts")], async_checkpoint=True)
    uploads = []
    for log in segments(tmp_path / "wandb", logger.version):
        for record in records(log):
            if record.WhichOneof("record_type") == "artifact":
                name = json.loads(record.artifact.metadata)["original_filename"]
                uploads += [(name, c.digest) for c in record.artifact.manifest.contents]

    def md5(name: str) -> str:
        return base64.b64encode(hashlib.md5((tmp_path / "ckpts" / name).read_bytes()).digest()).decode()

    steps = [f"epoch=0-step={s}.ckpt" for s in range(1, STEPS + 1)]
    assert sorted(n for n, _ in uploads if n != "last.ckpt") == steps  # each once
    assert all(digest == md5(name) for name, digest in uploads if name != "last.ckpt")
    assert uploads[-1] == ("last.ckpt", md5("last.ckpt"))  # the newest last.ckpt, step 6's bytes
    assert step_of(tmp_path / "ckpts" / "last.ckpt") == STEPS


# -- a resume writes only into its own experiment's run -------------------------------------------
def test_an_mlflow_resume_in_another_experiment_starts_a_new_run_and_leaves_the_original_alone(tmp_path):
    pytest.importorskip(
        "mlflow", reason='the MLflow server tests need mlflow: pip install -e ".[test-services]"'
    )
    from mlflow.tracking import MlflowClient

    from surge.loggers import MLFlowLogger

    local = tmp_path / "mlruns"
    original = MLFlowLogger(experiment_name="original", save_dir=local)
    fit(tmp_path / "a", original, callbacks=[every_step(tmp_path / "ckpts")])
    client = MlflowClient(store(tmp_path))
    before = client.get_run(original.run_id)
    history = client.get_metric_history(original.run_id, "loss")

    tuned = MLFlowLogger(experiment_name="finetune", save_dir=local)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path / "b", tuned, steps=STEPS + 16, ckpt=tmp_path / "ckpts" / "last.ckpt")
    assert tuned.run_id != original.run_id
    assert client.get_experiment(client.get_run(tuned.run_id).info.experiment_id).name == "finetune"
    after = client.get_run(original.run_id)
    assert client.get_metric_history(original.run_id, "loss") == history
    assert (after.info.end_time, after.info.status) == (before.info.end_time, before.info.status)
    [note] = said(caught, "belongs to experiment 'original'")
    assert original.run_id in note and "new run" in note

    # a re-signed checkpoint naming a run the server does not have
    forged = resigned(tmp_path / "ckpts" / "last.ckpt", tmp_path / "forged.ckpt", run_id="f" * 32)
    other = MLFlowLogger(experiment_name="finetune", save_dir=local)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path / "c", other, steps=STEPS + 2, ckpt=forged)
    assert other.run_id not in (original.run_id, tuned.run_id, "f" * 32)
    assert said(caught, f"run {'f' * 32} is not on")


def test_a_wandb_resume_from_a_checkpoint_naming_no_run_id_starts_a_new_run(tmp_path):
    wandb = pytest.importorskip("wandb", reason='the W&B tests need wandb: pip install -e ".[test-services]"')
    from surge.loggers import WandbLogger

    fit(tmp_path, WandbLogger(save_dir=tmp_path, offline=True), callbacks=[every_step(tmp_path / "ckpts")])
    forged = resigned(tmp_path / "ckpts" / "last.ckpt", tmp_path / "forged.ckpt", id="*")
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path, logger, steps=STEPS + 2, ckpt=forged)
    assert trainer.state.finished and logger.version != "*"
    assert said(caught, "no W&B run id")
    assert wandb.run is None  # the run was finished, none left active in the process
