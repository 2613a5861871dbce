"""`MLFlowLogger` against a real MLflow tracking server (SQLite store) started here, read back with
`MlflowClient`: every value, step and parameter; checkpoints as artifacts; a resume continues the
same run with no step written twice, from several save points; no host read per step."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

import resume_points as rp
import surge
from servers import mlflow_server

mlflow = pytest.importorskip(
    "mlflow", reason='the MLflow server tests need mlflow: pip install -e ".[test-services]"'
)
from mlflow.tracking import MlflowClient  # noqa: E402

from surge.loggers import MLFlowLogger  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


class HNet(rp.Net):
    def __init__(self, width: int = 16, note: str = "x", nested: dict | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()


def _fit(root, logger, seed=11, callbacks=(), ckpt=None, **kw) -> surge.Trainer:
    model = lambda: HNet(nested={"a": 1, "b": [2, 3]})  # noqa: E731
    return rp.fit(root, 1, seed, ckpt, callbacks, model=model, logger=logger, **kw)[1]


def history(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    run = client.get_run(run_id)
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        for key in run.data.metrics
        if not key.startswith("goodput/")  # wall-clock seconds at the fit's end: tests/test_goodput.py
    }


def test_every_value_step_and_parameter_reaches_the_server(server, tmp_path):
    recorder = rp.Recorder()
    logger = MLFlowLogger(experiment_name="values", tracking_uri=server, log_model="all", tags={"team": "a"})
    saves = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=5, save_top_k=2)
    _fit(tmp_path, [logger, recorder], callbacks=[saves])

    client = MlflowClient(server)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["team"] == "a"
    assert run.data.params == {"width": "16", "note": "x", "nested/a": "1", "nested/b": "[2, 3]"}
    want: dict[str, list] = defaultdict(list)
    for step, key, value in recorder.rows:
        want[key].append((step, value))
    got = history(client, logger.run_id)
    assert {k: v for k, v in got.items() if k != "epoch"} == {k: sorted(v) for k, v in want.items()}
    assert [s for s, _ in got["epoch"]] == sorted(s for s, _ in got["epoch"])  # epoch at each log point
    uploaded = {a.path.split("/")[-1] for a in client.list_artifacts(logger.run_id, "checkpoints")}
    assert {p.name for p in (tmp_path / "ckpts").glob("*.ckpt")} <= uploaded  # each save, as made


def test_a_resume_continues_the_run_and_writes_no_step_twice(server, tmp_path):
    reference = MLFlowLogger(experiment_name="resume", tracking_uri=server)
    _fit(tmp_path / "ref", reference)
    client = MlflowClient(server)
    want = history(client, reference.run_id)

    # A run that went on past its checkpoints (its history runs to the end, as after a late crash):
    # each resume must leave it holding exactly what the uninterrupted run holds.
    n = 14
    saves = [
        surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=4, save_top_k=-1),
        rp.SaveAt(tmp_path / "hooks", batch_ends=[(0, 1), (1, n - 1)], validation_ends=[0]),
    ]
    crashed = MLFlowLogger(experiment_name="resume", tracking_uri=server)
    _fit(tmp_path / "run", crashed, callbacks=saves)
    points = sorted((tmp_path / "hooks").glob("*.ckpt")) + sorted((tmp_path / "steps").glob("*.ckpt"))[:2]
    assert len(points) == 5
    for ckpt in points:
        assert torch.load(ckpt, weights_only=True)["loggers"]["runs"][0]["run"]["run_id"] == crashed.run_id
        resumed = MLFlowLogger(experiment_name="resume", tracking_uri=server)
        _fit(tmp_path / "run", resumed, seed=999, ckpt=ckpt)
        assert resumed.run_id == crashed.run_id, ckpt.name
        got = history(client, crashed.run_id)
        assert got == want, (
            f"{ckpt.name}: {[(k, got.get(k), want.get(k)) for k in want if got.get(k) != want[k]][:2]}"
        )
        assert client.get_run(crashed.run_id).info.status == "FINISHED"
    runs = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
    assert len(runs) == 2  # the reference and the one continued run: no run per resume


def test_logging_to_mlflow_reads_the_host_only_at_intervals(server, tmp_path, host_reads):
    counts = host_reads
    logger = MLFlowLogger(experiment_name="reads", tracking_uri=server)
    rp.fit_200_steps(tmp_path, logger, HNet())
    assert counts["item"] == 0
    assert counts["tolist"] <= 200 // 50 + 4 * 4  # log intervals and epoch ends, never per step
    assert len(MlflowClient(server).get_metric_history(logger.run_id, "train_loss")) == 4


def test_bad_arguments_are_refused():
    with pytest.raises(surge.errors.SurgeError, match="log_model"):
        MLFlowLogger(log_model="some")
    with pytest.raises(surge.errors.SurgeError, match="prefix"):
        MLFlowLogger(prefix="x")
    with pytest.raises(surge.errors.SurgeError, match="run_id"):
        MLFlowLogger(run_id="")


def test_points_the_server_refuses_are_kept_in_the_file_not_dropped(server, tmp_path):
    from surge.loggers.mlflow_kept import read_kept
    from surge.loggers.mlflow_outbox import Outbox
    from surge.loggers.mlflow_run import RunTarget

    box = Outbox(MlflowClient(server), RunTarget(tracking_uri=server, experiment_name="refuses"), tmp_path)
    box.put_points([("fine", 1.0, 1, 0), ("bad key!", 2.0, 1, 0)])  # MLflow refuses the name
    with pytest.warns(Warning, match="refused"):
        kept = box.close("FINISHED", 60)
    assert kept is not None
    assert ("bad key!", 2.0, 1, 0) in read_kept(kept).points


def test_a_deleted_experiment_is_reported_as_refused_not_as_no_answer(server, tmp_path):
    from surge.loggers.mlflow_outbox import Outbox
    from surge.loggers.mlflow_run import RunTarget

    client = MlflowClient(server)
    client.delete_experiment(client.create_experiment("deleted"))
    box = Outbox(client, RunTarget(tracking_uri=server, experiment_name="deleted"), tmp_path)
    box.put_points([("m", 1.0, 1, 0)])
    with pytest.warns(Warning) as said:
        box.close("FINISHED", 5)
    text = " ".join(str(w.message) for w in said)
    assert "refused a request" in text and "does not answer" not in text, text
