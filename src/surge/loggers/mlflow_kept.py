"""What an `MLFlowLogger` could not send before its fit ended, in a file, and how to send it later.

The file is JSON lines: a header (the run's server, experiment, run id when it was opened,
parameters, checkpoints, the run's end) and one `[key, value, timestamp_ms, step]` a line. Sending
it again is safe: MLflow keeps one copy of a point sent twice.

    python -m surge.loggers.mlflow_kept FILE [FILE ...] [--tracking-uri URI]

or `surge.loggers.mlflow_kept.send_kept(FILE)`; a file sent whole is renamed `FILE.sent`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rank_zero import warn
from .mlflow_run import RunTarget, open_run

_FORMAT = "surge-mlflow-kept/1"


@dataclass
class Kept:
    target: RunTarget
    run_id: str | None
    points: list[tuple[str, float, int, int]] = field(default_factory=list)
    params: list[tuple[str, str]] = field(default_factory=list)
    artifacts: list[tuple[str, str]] = field(default_factory=list)
    status: str | None = None
    refused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{len(self.points)} metric points", f"{len(self.params)} parameters"]
        parts.append(f"{len(self.artifacts)} checkpoints")
        if self.status:
            parts.append(f"the run's end ({self.status})")
        if self.refused:
            parts.append(f"{len(self.refused)} requests the server refused")
        run = self.run_id or f"a new run of experiment {self.target.experiment_name!r}"
        return f"run {run}: " + ", ".join(parts)


def write_kept(folder: Path, kept: Kept) -> Path:
    """Write `kept` to a new file in `folder` (via a temporary file and a rename: whole or absent)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"unsent-{kept.run_id or 'new-run'}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    return _write(folder / name, kept)


def _write(path: Path, kept: Kept) -> Path:
    head = {
        "format": _FORMAT,
        "target": dataclasses.asdict(kept.target),
        "run_id": kept.run_id,
        "params": kept.params,
        "artifacts": kept.artifacts,
        "status": kept.status,
        "refused": kept.refused,
    }
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(head) + "\n")
        f.writelines(json.dumps(list(p)) + "\n" for p in kept.points)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_kept(path: str | Path) -> Kept:
    with open(path) as f:
        head = json.loads(f.readline())
        if head.get("format") != _FORMAT:
            raise ValueError(f"{path} is not a file of points kept by MLFlowLogger")
        points = [(k, float(v), int(t), int(s)) for k, v, t, s in map(json.loads, f)]
    return Kept(
        target=RunTarget(**head["target"]),
        run_id=head["run_id"],
        points=points,
        params=[(k, v) for k, v in head["params"]],
        artifacts=[(p, d) for p, d in head["artifacts"]],
        status=head["status"],
        refused=list(head["refused"]),
    )


def send_kept(path: str | Path, tracking_uri: str | None = None) -> str:
    """Send what `path` keeps to its run (on `tracking_uri` if given, else the one it names),
    opening the run as the logger would have; returns the run id. The file is renamed `.sent`."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    kept = read_kept(path)
    target = kept.target
    if tracking_uri is not None:
        target = dataclasses.replace(target, tracking_uri=tracking_uri)
    client = MlflowClient(tracking_uri=target.tracking_uri)
    if kept.run_id is not None:
        _check_own_run(client, target, kept.run_id)
        target = dataclasses.replace(target, run_id=kept.run_id, resume=None)
    run = open_run(client, target)
    if kept.run_id is None:  # recorded before anything else is sent: a retry continues this run
        kept.run_id = str(run.run_id)
        _write(Path(path), kept)
    params = [Param(k, v) for k, v in kept.params if k not in run.params]
    for i in range(0, len(params), 100):
        client.log_batch(run.run_id, params=params[i : i + 100])
    metrics = [Metric(k, v, t, s) for k, v, t, s in kept.points if s > run.upto.get(k, -1)]
    for i in range(0, len(metrics), 1000):
        client.log_batch(run.run_id, metrics=metrics[i : i + 1000])
    for file, folder in kept.artifacts:
        if _own_checkpoint(Path(file)):
            client.log_artifact(run.run_id, file, folder)
    client.set_terminated(run.run_id, kept.status or "FINISHED")
    os.replace(path, f"{path}.sent")
    return str(run.run_id)


def _check_own_run(client: Any, target: RunTarget, run_id: str) -> None:
    """Refuse a run that is deleted or in another experiment than the file's (an edited file)."""
    run = client.get_run(run_id)
    if run.info.lifecycle_stage == "deleted":
        raise ValueError(f"run {run_id} was deleted on {target.tracking_uri}: it takes no points")
    experiment = client.get_experiment_by_name(target.experiment_name)
    if experiment is None or str(experiment.experiment_id) != str(run.info.experiment_id):
        theirs = client.get_experiment(run.info.experiment_id).name
        raise ValueError(
            f"run {run_id} belongs to experiment {theirs!r}, the file's experiment is "
            f"{target.experiment_name!r}: nothing is sent to another experiment's run"
        )


def _own_checkpoint(file: Path) -> bool:
    """Whether `file` is a checkpoint the logger itself kept (a surge checkpoint with a .ckpt
    suffix); any other file an edited kept file names is refused, naming it."""
    from ..checkpoint import is_surge_checkpoint

    if not file.is_file():
        warn(f"mlflow_kept: checkpoint {file} is gone: not uploaded")
        return False
    if file.suffix != ".ckpt" or not is_surge_checkpoint(file):
        warn(f"mlflow_kept: {file} is not a surge checkpoint (.ckpt) the logger kept: not uploaded")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m surge.loggers.mlflow_kept",
        description="Send what MLFlowLogger kept while its server was away.",
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--tracking-uri", default=None, help="send to this server instead of the one each file names"
    )
    args = parser.parse_args(argv)
    failed = 0
    for file in args.files:
        try:
            run_id = send_kept(file, args.tracking_uri)
        except Exception as err:
            failed += 1
            print(f"{file}: not sent ({type(err).__name__}: {err})", file=sys.stderr)
        else:
            print(f"{file}: sent to run {run_id}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
