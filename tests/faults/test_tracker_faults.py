"""Trackers (MLflow, W&B) under faults: the server killed mid-run for less and for longer than the
client's retries, and down when the fit starts; checkpoint uploads with background writes; a
checkpoint naming another experiment's run (or no run at all).

Every point the logger accepted is on the server afterwards (read back with `MlflowClient`) or
reported as kept in a local file that `python -m surge.loggers.mlflow_kept` sends; training never
stops because of the tracker. The client's retries are shrunk with MLflow's own variables
(`MLFLOW_HTTP_REQUEST_MAX_RETRIES`, `..._BACKOFF_FACTOR`, `..._TIMEOUT`) to keep the tests short.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from servers import RestartableMlflowServer, free_port
from surge.loggers.base import Logger
from surge.rank_zero import SurgeWarning

mlflow = pytest.importorskip(
    "mlflow", reason='the MLflow server tests need mlflow: pip install -e ".[test-services]"'
)
from mlflow.tracking import MlflowClient  # noqa: E402

from surge.loggers import MLFlowLogger, mlflow_outbox  # noqa: E402

STEPS = 96


class Net(surge.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        loss = self.lin(batch[0]).pow(2).mean()
        self.log("loss", loss)
        self.log("twice", loss * 2)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Recorder(Logger):
    """What the Trainer gave the loggers: (key, step) -> value."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, int], float] = {}

    def log_metrics(self, metrics, step):
        self.points.update({(k, step): float(v) for k, v in metrics.items()})


class Outage(surge.callbacks.Callback):
    """Kills the server after step `down` and starts it again after step `up`."""

    def __init__(self, server: RestartableMlflowServer, down: int, up: int) -> None:
        self.server, self.down, self.up = server, down, up

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.down:
            self.server.kill()
            trainer.logger.save()  # the sender tries now, while the server is away
            time.sleep(1.0)
        elif trainer.global_step == self.up:
            self.server.start()


def fit(tmp_path, logger, steps=STEPS, callbacks=(), ckpt=None, **kw) -> tuple[surge.Trainer, Recorder]:
    torch.manual_seed(0)
    recorder = Recorder()
    trainer = surge.Trainer(
        max_steps=steps, log_every_n_steps=1, logger=[logger, recorder], callbacks=list(callbacks),
        default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False, **kw,
    )  # fmt: skip
    loader = DataLoader(TensorDataset(torch.randn(steps, 4)), batch_size=1)
    trainer.fit(Net(), loader, ckpt_path=ckpt)
    return trainer, recorder


def on_server(client: MlflowClient, run_id: str) -> dict[tuple[str, int], float]:
    run = client.get_run(run_id)
    return {(k, m.step): m.value for k in run.data.metrics for m in client.get_metric_history(run_id, k)}


def said(caught, text: str) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SurgeWarning) and text in str(w.message)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = RestartableMlflowServer(tmp_path_factory.mktemp("mlflow"))
    try:
        srv.start()
        yield srv
    finally:
        srv.close()


@pytest.fixture
def fast_client(monkeypatch):
    """A client that gives up at once (the default retries for about 400 s)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


@pytest.mark.slow
def test_an_outage_longer_than_the_client_retries_loses_no_point_and_training_goes_on(
    server, tmp_path, fast_client, monkeypatch
):
    monkeypatch.setattr(mlflow_outbox, "MAX_HELD", 20)  # the outage's points overflow to the spill file
    logger = MLFlowLogger(
        experiment_name="long-outage", tracking_uri=server.uri, save_dir=tmp_path / "mlruns"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, recorder = fit(tmp_path, logger, callbacks=[Outage(server, down=25, up=48)])
    assert trainer.state.finished and trainer.global_step == STEPS
    client = MlflowClient(server.uri)
    got = on_server(client, logger.run_id)
    assert {k: v for k, v in got.items() if k[0] != "epoch"} == {
        k: v for k, v in recorder.points.items() if k[0] != "epoch"
    }
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    assert client.get_run(logger.run_id).data.params == {"width": "4"}
    down = said(caught, "does not answer")
    assert len(down) == 1 and server.uri in down[0], down
    assert logger.kept_files == [] and not said(caught, "did not take everything")


@pytest.mark.slow
def test_an_outage_shorter_than_the_client_retries_is_bridged(server, tmp_path, monkeypatch):
    # The client's own retries (1 + 2 + 4 + 8 s) outlast the restart (about a second)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "4")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")
    logger = MLFlowLogger(
        experiment_name="short-outage", tracking_uri=server.uri, save_dir=tmp_path / "mlruns"
    )
    trainer, recorder = fit(tmp_path, logger, callbacks=[Outage(server, down=25, up=26)])
    assert trainer.state.finished
    got = on_server(MlflowClient(server.uri), logger.run_id)
    assert {k: v for k, v in got.items() if k[0] != "epoch"} == {
        k: v for k, v in recorder.points.items() if k[0] != "epoch"
    }
    assert logger.kept_files == []


@pytest.mark.slow
def test_a_server_down_at_the_start_does_not_block_the_fit_and_what_it_kept_is_sent_later(
    tmp_path, fast_client, capsys, monkeypatch
):
    from surge.loggers.mlflow_kept import main as send_kept_main

    monkeypatch.setattr(mlflow_outbox, "MAX_HELD", 50)  # most points wait in the spill file
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    logger = MLFlowLogger(
        experiment_name="down", tracking_uri=uri, save_dir=tmp_path / "mlruns", send_timeout_s=2
    )
    saves = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=40)
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, recorder = fit(tmp_path, logger, callbacks=[saves])
    took = time.monotonic() - started
    assert trainer.state.finished and trainer.global_step == STEPS
    assert took < 120, took  # bounded: the client's retries never hold the fit (noisy on a loaded machine)
    down = said(caught, "does not answer")
    assert len(down) == 1 and uri in down[0], down
    [kept] = logger.kept_files
    end = said(caught, "did not take everything")
    assert len(end) == 1 and str(kept) in end[0] and "python -m surge.loggers.mlflow_kept" in end[0]

    (tmp_path / "server").mkdir()
    server = RestartableMlflowServer(tmp_path / "server", port)
    try:
        server.start()
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")  # a new store makes its tables first
        assert send_kept_main([str(kept)]) == 0
        run_id = capsys.readouterr().out.strip().split()[-1]
        client = MlflowClient(uri)
        got = on_server(client, run_id)
        assert {k: v for k, v in got.items() if k[0] != "epoch"} == {
            k: v for k, v in recorder.points.items() if k[0] != "epoch"
        }
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED" and run.data.params == {"width": "4"}
        assert client.get_experiment(run.info.experiment_id).name == "down"
        assert not kept.exists() and Path(f"{kept}.sent").exists()
    finally:
        server.close()
