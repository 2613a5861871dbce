"""Which MLflow run a logger writes to: the one given, the checkpoint's (only when it belongs to the
same experiment on the same server), or a new one. Used by the logger's sender thread and by
`send_kept` alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..rank_zero import info, warn

# Errors the server gives for what it will never take: sending them again cannot help
REFUSED = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_DOES_NOT_EXIST",
        "INVALID_STATE",
        "BAD_REQUEST",
        "PERMISSION_DENIED",
    }
)


@dataclass
class RunTarget:
    """Where a logger's points go. `run_id`: given by the user, used as is; `resume`: the checkpoint's
    run, continued only when it is in `experiment_name` on `tracking_uri`."""

    tracking_uri: str
    experiment_name: str
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    artifact_location: str | None = None
    run_id: str | None = None
    resume: str | None = None
    resume_step: int = 0


@dataclass
class OpenRun:
    """The run in use; `upto`: when continuing, the last step it holds per metric (not sent again);
    `params`: the parameters it holds (MLflow's cannot change)."""

    run_id: str
    experiment_id: str
    upto: dict[str, int] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


def refused(err: BaseException) -> bool:
    """Whether the server answered that it will not take the request (not: did not answer)."""
    return getattr(err, "error_code", None) in REFUSED  # a lost connection is INTERNAL_ERROR


def open_run(client: Any, target: RunTarget) -> OpenRun:
    """Find or make the run `target` names (one round of requests; raises what the client raises)."""
    if target.run_id is not None:
        return _continue(client, client.get_run(target.run_id), with_history=False)
    if target.resume is not None:
        found = _checkpoint_run(client, target)
        if found is not None:
            info(
                f"MLFlowLogger: continuing run {target.resume} at step {target.resume_step} (steps it holds are not sent again)"
            )
            return _continue(client, found, with_history=True)
    experiment = client.get_experiment_by_name(target.experiment_name)
    if experiment is not None:
        experiment_id = str(experiment.experiment_id)
    else:
        experiment_id = str(
            client.create_experiment(target.experiment_name, artifact_location=target.artifact_location)
        )
    run = client.create_run(experiment_id, run_name=target.run_name, tags=dict(target.tags))
    return OpenRun(run.info.run_id, experiment_id)


def _checkpoint_run(client: Any, target: RunTarget) -> Any:
    """The checkpoint's run if it is in the logger's experiment; else None, and said why."""
    saved = target.resume
    try:
        run = client.get_run(saved)
    except Exception as err:
        if not refused(err):
            raise  # no answer: tried again later
        warn(
            f"MLFlowLogger: the checkpoint's run {saved} is not on {target.tracking_uri}: a new run is started"
        )
        return None
    if run.info.lifecycle_stage == "deleted":  # the server refuses every point a deleted run is sent
        warn(
            f"MLFlowLogger: the checkpoint's run {saved} was deleted on {target.tracking_uri}: a new run is "
            "started (a deleted run takes no points)"
        )
        return None
    experiment = client.get_experiment_by_name(target.experiment_name)
    if experiment is None or str(experiment.experiment_id) != str(run.info.experiment_id):
        theirs = client.get_experiment(run.info.experiment_id).name
        warn(
            f"MLFlowLogger: the checkpoint's run {saved} belongs to experiment {theirs!r}, this logger's is "
            f"{target.experiment_name!r}: a new run is started there (the other experiment's run is left as it is)"
        )
        return None
    return run


def _continue(client: Any, run: Any, with_history: bool) -> OpenRun:
    run_id = run.info.run_id
    if run.info.status != "RUNNING":
        client.update_run(run_id, status="RUNNING")
    upto = {}
    if with_history:
        upto = {
            key: max((m.step for m in client.get_metric_history(run_id, key)), default=-1)
            for key in run.data.metrics
        }
    return OpenRun(run_id, str(run.info.experiment_id), upto, dict(run.data.params))
