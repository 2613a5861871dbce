"""`WandbLogger` in W&B's offline mode, read back from the runs' transaction logs (`run-<id>.wandb`,
what `wandb sync` uploads): every value and step, the config, checkpoints as artifacts, the exit
code; a resume continues the same run id and, over all its processes' logs, the run holds what the
uninterrupted run holds, each step once; no host read per step."""

from __future__ import annotations

import hashlib
import json
import time
from base64 import b64encode
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch

import resume_points as rp
import surge

wandb = pytest.importorskip("wandb", reason='the W&B tests need wandb: pip install -e ".[test-services]"')

from surge.loggers import WandbLogger  # noqa: E402
from surge.loggers.wandb_history import STEP_KEY, finished, history_rows, records, segments  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def offline(tmp_path_factory):
    """W&B offline and quiet, with every folder it writes in a temporary one."""
    home = tmp_path_factory.mktemp("wandb_home")
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB__DISABLE_STATS": "true",
        "WANDB__DISABLE_MACHINE_INFO": "true",
        "WANDB_DISABLE_GIT": "true",
    }
    env.update({f"WANDB_{d}_DIR": str(home / d.lower()) for d in ("CONFIG", "CACHE", "DATA", "ARTIFACT")})
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield


class HNet(rp.Net):
    def __init__(
        self, width: int = 16, note: str = "x", nested: dict | None = None, fail_at: int = -1
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def training_step(self, batch, batch_idx):
        if self.global_step == self.hparams.fail_at:
            raise RuntimeError("a failing step")
        return super().training_step(batch, batch_idx)


def _fit(root, logger, seed=11, callbacks=(), ckpt=None, **hp) -> surge.Trainer:
    model = lambda: HNet(nested={"a": 1, "b": [2, 3]}, **hp)  # noqa: E731
    return rp.fit(root, 1, seed, ckpt, callbacks, model=model, logger=logger)[1]


def run_logs(logger: WandbLogger) -> list[Path]:
    return segments(Path(logger.save_dir) / "wandb", logger.version)


def values(logger: WandbLogger) -> Counter:
    """Every (name, global step, value) the run holds over all its processes' logs, counted."""
    return Counter(
        (k, row[STEP_KEY], v)
        for log in run_logs(logger)
        for row in history_rows(log)
        for k, v in row.items()
        if not k.startswith("_") and k not in (STEP_KEY, "epoch") and not k.startswith("goodput/")
    )  # (goodput/*: wall-clock seconds at the fit's end, tested in tests/test_goodput.py)


def kinds(log: Path, kind: str) -> list:
    return [getattr(r, kind) for r in records(log) if r.WhichOneof("record_type") == kind]


def test_the_log_reader_reads_what_wandb_wrote(tmp_path):
    run = wandb.init(project="reader", dir=tmp_path, mode="offline")
    rows = [{"a": i * 0.5, "big": "x" * 50_000 if i == 3 else i} for i in range(6)]  # one row spans blocks
    for row in rows:
        run.log(row)
    run.finish()
    (log,) = segments(tmp_path / "wandb", run.id)
    deadline = time.monotonic() + 30
    while not finished(log) and time.monotonic() < deadline:  # wandb writes the end after finish()
        time.sleep(0.02)
    assert finished(log)
    got = list(history_rows(log))
    assert [{k: r[k] for k in ("a", "big")} for r in got] == rows
    assert [r["_step"] for r in got] == list(range(6))
    truncated = tmp_path / "cut.wandb"
    truncated.write_bytes(log.read_bytes()[: 32 * 1024 + 100])  # as a killed process leaves it
    assert [r["a"] for r in history_rows(truncated)] == [0.0, 0.5, 1.0]
    assert not finished(truncated)


def test_every_value_step_config_and_checkpoint_is_in_the_run(tmp_path):
    recorder = rp.Recorder()
    logger = WandbLogger(save_dir=tmp_path / "wb", offline=True, project="values", log_model="all")
    saves = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=5, save_top_k=2)
    _fit(tmp_path, [logger, recorder], callbacks=[saves])

    (log,) = run_logs(logger)
    want: dict[str, list] = defaultdict(list)
    for step, key, value in recorder.rows:
        want[key].append((step, value))
    got: dict[str, list] = defaultdict(list)
    for key, step, value in values(logger).elements():
        got[key].append((step, value))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}
    rows = list(history_rows(log))
    assert [r["_step"] for r in rows] == list(range(len(rows)))  # one W&B row per logging call
    assert all("epoch" in r for r in rows if not any(k.startswith("goodput/") for k in r))
    assert kinds(log, "run")[0].project == "values"
    config = {u.key: json.loads(u.value_json) for c in kinds(log, "config") for u in c.update}
    assert {k: config[k] for k in ("width", "note", "nested")} == {
        "width": 16,
        "note": "x",
        "nested": {"a": 1, "b": [2, 3]},
    }
    artifacts = kinds(log, "artifact")
    assert {a.name for a in artifacts} == {f"model-{logger.version}"} and {a.type for a in artifacts} == {
        "model"
    }
    digests = {c.digest for a in artifacts for c in a.manifest.contents}
    saved = sorted((tmp_path / "ckpts").glob("*.ckpt"))
    assert saved and all(b64encode(hashlib.md5(p.read_bytes()).digest()).decode() in digests for p in saved)
    assert [e.exit_code for e in kinds(log, "exit")] == [0]


def test_a_failed_fit_finishes_the_run_with_its_exit_code(tmp_path):
    logger, recorder = WandbLogger(save_dir=tmp_path, offline=True, project="failed"), rp.Recorder()
    with pytest.raises(RuntimeError, match="a failing step"):
        _fit(tmp_path, [logger, recorder], fail_at=3)
    (log,) = run_logs(logger)
    assert [e.exit_code for e in kinds(log, "exit")] == [1]
    assert recorder.rows and Counter(values(logger)) == Counter((k, s, v) for s, k, v in recorder.rows)


def test_a_resume_continues_the_run_and_writes_no_step_twice(tmp_path):
    reference = WandbLogger(save_dir=tmp_path / "wb", offline=True, project="resume")
    _fit(tmp_path / "ref", reference)
    want = values(reference)
    assert want and max(want.values()) == 1

    # A run that went on past its checkpoints (its history runs to the end, as after a late crash):
    # each resume must leave it holding exactly what the uninterrupted run holds.
    n = 14
    saves = [
        surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=4, save_top_k=-1),
        rp.SaveAt(tmp_path / "hooks", batch_ends=[(0, 1), (1, n - 1)], validation_ends=[0]),
    ]
    crashed = WandbLogger(save_dir=tmp_path / "wb", offline=True, project="resume")
    _fit(tmp_path / "run", crashed, callbacks=saves)
    points = sorted((tmp_path / "hooks").glob("*.ckpt")) + sorted((tmp_path / "steps").glob("*.ckpt"))[:2]
    assert len(points) == 5
    for i, ckpt in enumerate(points):
        run = torch.load(ckpt, weights_only=True)["loggers"]["runs"][0]["run"]
        assert run == {"id": crashed.version, "project": "resume"}
        resumed = WandbLogger(save_dir=tmp_path / "wb", offline=True, project="resume")
        _fit(tmp_path / "run", resumed, seed=999, ckpt=ckpt)
        assert resumed.version == crashed.version, ckpt.name
        got = values(crashed)
        assert got == want, (
            f"{ckpt.name}: {sorted((got - want).items())[:3]} {sorted((want - got).items())[:3]}"
        )
        logs = run_logs(crashed)
        assert len(logs) == i + 2  # offline, each process of the run leaves its own log
        rows = [r["_step"] for log in logs for r in history_rows(log)]
        assert rows == sorted(set(rows))  # W&B rows numbered on across the processes


def test_logging_to_wandb_reads_the_host_only_at_intervals(tmp_path, host_reads):
    counts = host_reads
    logger = WandbLogger(save_dir=tmp_path, offline=True, project="reads")
    rp.fit_200_steps(tmp_path, logger, HNet())
    assert counts["item"] == 0
    assert counts["tolist"] <= 200 // 50 + 4 * 4  # log intervals and epoch ends, never per step
    assert sorted(s for k, s, _ in values(logger) if k == "train_loss") == [50, 100, 150, 200]


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"log_model": "some"}, "log_model"),
        ({"prefix": "x"}, "prefix"),
        ({"id": ""}, "id"),
        ({"version": 3}, "version"),
        ({"version": "a", "id": "b"}, "id"),
        ({"save_dir": "a", "dir": "b"}, "dir"),
        ({"offline": True, "mode": "online"}, "mode"),
        ({"entitty": "me"}, "entitty"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, named):
    with pytest.raises(surge.errors.SurgeError, match=rf"WandbLogger\({named}\)"):
        WandbLogger(**kwargs)


def test_nothing_logged_starts_no_run(tmp_path):
    logger = WandbLogger(save_dir=tmp_path, offline=True, id="given", dir=tmp_path)
    logger.finalize("success")
    assert logger.version == "given" and not (tmp_path / "wandb").exists()


def test_log_model_true_logs_the_kept_checkpoints_when_the_fit_ends(tmp_path):
    logger = WandbLogger(save_dir=tmp_path, offline=True, log_model=True, checkpoint_name="net")
    saves = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_top_k=1)
    _fit(tmp_path, logger, callbacks=[saves])
    (log,) = run_logs(logger)
    artifacts = kinds(log, "artifact")
    assert [(a.name, sorted(a.aliases)) for a in artifacts] == [("net", ["best", "latest"])]
    (best,) = (tmp_path / "ckpts").glob("*.ckpt")
    meta = json.loads(artifacts[0].metadata)
    assert meta == {"score": saves.best_model_score, "original_filename": best.name}
    digest = b64encode(hashlib.md5(best.read_bytes()).digest()).decode()
    assert [c.digest for c in artifacts[0].manifest.contents] == [digest]


def test_a_stage_after_the_fit_continues_the_run(tmp_path):
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    trainer = _fit(tmp_path, logger)
    before = values(logger)
    trainer.validate(trainer.lightning_module, rp.loaders()[1])
    added = values(logger) - before
    assert [k for k, _, _ in added] == ["val_loss"]  # at the fit's last step, kept beside the fit's
    assert len(run_logs(logger)) == 2 and [e.exit_code for e in kinds(run_logs(logger)[1], "exit")] == [0]


def test_an_interrupted_run_finishes_with_exit_code_130(tmp_path):
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    logger.log_metrics({"a": 1.0}, step=4)
    logger.finalize("interrupted")
    (log,) = run_logs(logger)
    assert [e.exit_code for e in kinds(log, "exit")] == [130]
    assert [(r["a"], r[STEP_KEY]) for r in history_rows(log)] == [(1.0, 4)]


def test_a_run_already_active_is_not_taken_over(tmp_path):
    mine = wandb.init(project="mine", dir=tmp_path, mode="offline")
    try:
        logger = WandbLogger(save_dir=tmp_path, offline=True)
        with pytest.raises(surge.errors.SurgeError, match=rf"{mine.id}.*reinit=\"create_new\""):
            logger.log_metrics({"a": 1.0}, step=0)
        both = WandbLogger(save_dir=tmp_path, offline=True, reinit="create_new")
        both.log_metrics({"a": 2.0}, step=0)
        assert both.experiment.id != mine.id
        both.finalize("success")
        assert [r["a"] for r in history_rows(run_logs(both)[0])] == [2.0]
        given = WandbLogger(experiment=mine)
        given.log_metrics({"b": 3.0}, step=1)
        given.finalize("success")
        assert given.version == mine.id and given.experiment is mine  # the caller's run, not finished
    finally:
        mine.finish()
