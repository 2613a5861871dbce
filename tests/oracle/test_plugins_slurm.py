"""`Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])` in a real one-node SLURM job, under
Lightning and under surge (scripts/plugins_slurm.py): on 1 task and on 2 (DDP, gloo) the same
metrics, checkpoint files and weights (torch.equal); a SIGUSR1 then ends the process under both
(no handler: auto_requeue=False) and the job, submitted with --requeue, is not requeued."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch
from oracle_runs import SCRIPTS, _env, assert_same_weights, command

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
from jobs import clean_env  # noqa: E402
from slurm_cluster import InstallError, SlurmCluster, require_installed  # noqa: E402
from test_slurm import submit, wait_for  # noqa: E402

# Jobs must end within their deadline: never beside another timed test. Four jobs: slow.
pytestmark = [pytest.mark.timed, pytest.mark.slow]
FRAMEWORKS = ("lightning", "surge")


@pytest.fixture(scope="module")
def cluster():
    try:
        require_installed()
    except InstallError as err:
        pytest.skip(str(err))
    slurm = SlurmCluster.start(timeout=60)
    yield slurm
    slurm.run(["scancel", "--full", "--partition=debug"])
    killed = slurm.stop()
    if killed:
        warnings.warn(f"the SLURM cluster left processes behind (killed): {killed}", stacklevel=1)
    shutil.rmtree(slurm.workdir, ignore_errors=True)


def submit_job(cluster, root: Path, framework: str, tasks: int, *args: str) -> tuple[Path, str]:
    """Submit the script as an sbatch job (--requeue) of `tasks` tasks; its folder and job id."""
    cwd = root / f"{framework}-{tasks}"
    cwd.mkdir()
    argv = " ".join(command(framework, SCRIPTS / "plugins_slurm.py", (str(tasks), *args)))
    env = cluster.env({**clean_env(), **_env(framework, cwd, None)})
    return cwd, submit(cluster, cwd, env, f"srun {argv}", ntasks=tasks, extra=("--requeue",))


def finished_job(cluster, cwd: Path, job_id: str) -> dict:
    """A submitted job once it ended: its record, state, output, restarts."""
    state = wait_for(cluster, job_id, 240)
    out = (cwd / f"slurm-{job_id}.out").read_text()
    show = cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout
    record = json.loads((cwd / "record.json").read_text()) if (cwd / "record.json").exists() else {}
    return {"cwd": cwd, "record": record, "state": state, "out": out, "restarts": "Restarts=0" not in show}


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """The four jobs, submitted together (SLURM runs them side by side as the node's CPUs allow)."""
    root = tmp_path_factory.mktemp("slurm-plugins")
    submitted = {
        (f, tasks): submit_job(cluster, root, f, tasks, *(("signal",) if tasks == 1 else ()))
        for tasks in (1, 2)
        for f in FRAMEWORKS
    }
    return {key: finished_job(cluster, *job) for key, job in submitted.items()}


@pytest.mark.parametrize("tasks", [1, 2])
def test_the_same_run_as_lightning_under_slurm(jobs, tasks):
    lightning, surge = (jobs[(f, tasks)] for f in FRAMEWORKS)
    for run in (lightning, surge):
        assert run["record"], f"{run['cwd']}: no record ({run['state']}):\n{run['out'][-4000:]}"
    assert lightning["record"]["ranks"] == surge["record"]["ranks"] == [0, tasks]
    for key in ("global_step", "callback_metrics", "files"):
        assert lightning["record"][key] == surge["record"][key], key
    a, b = (torch.load(run["cwd"] / "weights" / "final.pt", weights_only=True) for run in (lightning, surge))
    assert_same_weights(a, b)
    if tasks == 2:
        assert lightning["state"] == surge["state"] == "COMPLETED", surge["out"][-4000:]


def test_sigusr1_with_auto_requeue_off_ends_the_process_and_does_not_requeue(jobs):
    lightning, surge = (jobs[(f, 1)] for f in FRAMEWORKS)
    for run in (lightning, surge):
        assert run["state"] == "FAILED", f"{run['state']}:\n{run['out'][-3000:]}"
        assert not run["restarts"], run["out"][-3000:]
        assert "the fit went on after SIGUSR1" not in run["out"]
        assert "requeue" not in run["out"].lower(), run["out"][-3000:]
        assert not (run["cwd"] / "second" / "checkpoints").exists() or not any(
            p.name == "last.ckpt" or p.name.startswith("hpc_ckpt") for p in (run["cwd"] / "second").rglob("*")
        )
