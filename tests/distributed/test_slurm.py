"""DDP under SLURM for real: srun and sbatch on a one-node cluster started on this machine.

SLURM, not surge, starts the processes; surge reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
SLURM_NODELIST (MASTER_ADDR: its first host; MASTER_PORT: from the job id) and must train exactly the
model one process trains with the same global batch.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from jobs import (
    MULTINODE_SCRIPT,
    TRAIN_SCRIPT,
    assert_same_weights,
    clean_env,
    job_args,
    reference_run,
    run_group,
)
from slurm_cluster import InstallError, SlurmCluster, require_installed

STEPS = ["--max-steps", "20", "--epochs", "4"]
# Timed (jobs must reach a step, be requeued, end within seconds): never beside another timed test,
# and beside one other test at most (tests/harness/parallel.py).
pytestmark = pytest.mark.timed


@pytest.fixture(scope="module")
def cluster():
    try:
        require_installed()
    except InstallError as err:
        pytest.skip(str(err))
    started = time.monotonic()
    slurm = SlurmCluster.start(timeout=60)
    assert time.monotonic() - started < 60
    yield slurm
    killed = slurm.stop()
    if killed:
        warnings.warn(f"the SLURM cluster left processes behind (killed): {killed}", stacklevel=1)
    shutil.rmtree(slurm.workdir, ignore_errors=True)


@pytest.fixture
def reference(tmp_path_factory) -> dict:
    """One process, batch 8: what two SLURM tasks with batch 4 each must end with (one run a session,
    shared with test_torchrun.py and test_ddp.py)."""
    return reference_run(tmp_path_factory, "--batch-size", "8", *STEPS)


@pytest.fixture
def job_env(cluster):
    """The job's environment: none of this process's launcher variables, surge importable, the cluster's
    SLURM_CONF; the test cancels whatever it left queued or running."""
    yield cluster.env(clean_env())
    cluster.run(["scancel", "--full", "--partition=debug"])


def srun(cluster, tmp_path: Path, env: dict, *argv: str, timeout: float = 60) -> str:
    cmd = ["srun", "--job-name=surge-srun", "--export=ALL", "--time=2", "--kill-on-bad-exit=1", *argv]
    [(code, log)] = run_group([cmd], env=env, cwd=tmp_path, timeout=timeout)
    assert code == 0, f"{log[-4000:]}\n{cluster.logs()}"
    return log


def test_srun_two_tasks_train_one_model(cluster, tmp_path, reference, job_env):
    args, out = job_args(tmp_path, "srun", "--devices", "2", "--batch-size", "4", *STEPS)
    srun(
        cluster,
        tmp_path,
        job_env,
        "-n",
        "2",
        "--ntasks-per-node",
        "2",
        sys.executable,
        str(TRAIN_SCRIPT),
        *args,
    )
    job = torch.load(out, weights_only=True)
    assert job["world_size"] == 2 and job["global_step"] == reference["global_step"] == 20
    assert_same_weights(reference["state_dict"], job["state_dict"])
    assert job["validated"]["val_count"] == 160.0


def test_srun_ranks_come_from_slurm_and_devices_auto_follows(cluster, tmp_path, reference, job_env):
    args, out = job_args(tmp_path, "auto", "--devices", "auto", "--batch-size", "4", *STEPS)
    srun(cluster, tmp_path, job_env, "-n", "2", "--ntasks-per-node", "2", sys.executable, str(MULTINODE_SCRIPT),
         *args, "--ranks-dir", str(tmp_path / "ranks"))  # fmt: skip
    ranks = sorted(
        (json.loads(p.read_text()) for p in (tmp_path / "ranks").glob("rank*.json")),
        key=lambda r: r["global_rank"],
    )
    assert [(r["source"], r["global_rank"], r["local_rank"], r["world_size"]) for r in ranks] == [
        ("slurm", 0, 0, 2), ("slurm", 1, 1, 2),
    ]  # fmt: skip
    job = torch.load(out, weights_only=True)
    assert job["world_size"] == 2
    assert_same_weights(reference["state_dict"], job["state_dict"])


def submit(
    cluster, tmp_path: Path, env: dict, body: str, *, ntasks: int = 2, extra: tuple[str, ...] = ()
) -> str:
    """Write a batch script running `body` and `sbatch` it; the job id."""
    script = tmp_path / "job.sbatch"
    script.write_text(
        "\n".join([
            "#!/bin/bash",
            "#SBATCH --job-name=surge-sbatch",
            f"#SBATCH --ntasks={ntasks}",
            f"#SBATCH --ntasks-per-node={ntasks}",
            "#SBATCH --time=2",
            f"#SBATCH --output={tmp_path}/slurm-%j.out",
            f"#SBATCH --chdir={tmp_path}",
            *(f"#SBATCH {line}" for line in extra),
            "set -euo pipefail",
            body,
            "",
        ])
    )  # fmt: skip
    done = cluster.run(["sbatch", "--parsable", "--export=ALL", str(script)], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def output_of(tmp_path: Path, job_id: str) -> str:
    path = tmp_path / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else "(no output file)"


def _sbatch(cluster, tmp_path: Path, env: dict, body: str, timeout: float = 60) -> tuple[str, str, str]:
    """Submit a batch script, wait for the job to end; (job id, final state, its output)."""
    job_id = submit(cluster, tmp_path, env, body)
    state = wait_for(cluster, job_id, timeout)
    return job_id, state, output_of(tmp_path, job_id)


def wait_for(cluster, job_id: str, timeout: float) -> str:
    """Poll slurmctld until the job has ended; cancel it (and say TIMEOUT) when it runs past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        state = cluster.job_state(job_id)
        if state not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state
        if time.monotonic() > deadline:
            cluster.run(["scancel", job_id])
            return f"still {state} after {timeout} s (cancelled)"
        time.sleep(0.5)


def test_sbatch_job_trains_one_model(cluster, tmp_path, reference, job_env):
    args, out = job_args(tmp_path, "sbatch", "--devices", "2", "--batch-size", "4", *STEPS)
    command = " ".join([sys.executable, str(TRAIN_SCRIPT), *args])
    job_id, state, log = _sbatch(cluster, tmp_path, job_env, f"srun {command}")
    assert state == "COMPLETED", f"job {job_id} ended {state}:\n{log[-4000:]}\n{cluster.logs()}"
    job = torch.load(out, weights_only=True)
    assert job["world_size"] == 2 and job["global_step"] == reference["global_step"] == 20
    assert_same_weights(reference["state_dict"], job["state_dict"])


def test_surge_slurm_submit_runs_the_job_it_writes(cluster, tmp_path, reference, job_env):
    args, out = job_args(tmp_path, "cli", "--devices", "2", "--batch-size", "4", *STEPS)
    script = tmp_path / "surge.sbatch"
    [(code, log)] = run_group(
        [[sys.executable, "-m", "surge", "slurm", "--tasks-per-node", "2", "--time", "00:05:00",
          "--job-name", "surge-cli", "--output", str(script), "--submit", str(TRAIN_SCRIPT), *args]],
        env=job_env, cwd=tmp_path, timeout=30,
    )  # fmt: skip
    assert code == 0, log
    [job_id] = re.findall(r"submitted job (\d+)", log)
    state = wait_for(cluster, job_id, 60)
    output = tmp_path / f"surge-{job_id}.out"
    assert state == "COMPLETED", f"{script.read_text()}\n{output.read_text() if output.exists() else ''}"
    job = torch.load(out, weights_only=True)
    assert job["world_size"] == 2
    assert_same_weights(reference["state_dict"], job["state_dict"])


def test_python_without_srun_in_a_batch_script_does_not_hang(cluster, tmp_path, reference, job_env):
    """`python train.py --devices 2` straight in a 2-task batch script, without srun.

    The batch step has SLURM_PROCID=0 and SLURM_NTASKS=2 but is one process (srun would set
    SLURM_STEP_ID too). Right: surge either starts the second process itself (its own launcher) and
    trains the same model, or stops at once saying to use srun. Wrong: rank 0 of 2 waits for a rank 1
    that never comes (30 minutes, the process-group timeout).
    """
    args, out = job_args(tmp_path, "nosrun", "--devices", "2", "--batch-size", "4", *STEPS)
    command = " ".join([sys.executable, str(TRAIN_SCRIPT), *args])
    job_id, state, log = _sbatch(cluster, tmp_path, job_env, command, timeout=30)
    if state == "COMPLETED":
        job = torch.load(out, weights_only=True)
        assert job["world_size"] == 2
        assert_same_weights(reference["state_dict"], job["state_dict"])
    else:
        assert state == "FAILED" and "srun" in log, f"job {job_id}: {state}\n{log[-3000:]}"


PREEMPT_SCRIPT = TRAIN_SCRIPT.parents[1] / "faults" / "preempt_script.py"


def _preempt_and_requeue(cluster, work: Path, job_env) -> tuple[str, str, str]:
    """Start the job, USR1 it at step 5, let its requeued attempt run; (final state, output, details)."""
    work.mkdir()
    marker = work / "marker"
    command = " ".join(
        [sys.executable, str(PREEMPT_SCRIPT), str(work / "run"), str(work / "run.pt"), str(marker)]
    )
    job_id = submit(
        cluster, work, job_env, f'echo "attempt ${{SLURM_RESTART_COUNT:-0}}"\nsrun {command}', ntasks=1,
        extra=("--requeue", "--open-mode=append"),
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not marker.exists():  # the job is at step 5 of 90
        assert time.monotonic() < deadline, f"the job never reached step 5:\n{output_of(work, job_id)}"
        time.sleep(0.02)
    signalled = cluster.run(["scancel", "--signal=USR1", job_id])  # to the job's steps, as --signal does
    assert signalled.returncode == 0, signalled.stderr
    deadline = time.monotonic() + 30
    while "Restarts=1" not in cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout:
        assert time.monotonic() < deadline, f"the job was not requeued:\n{output_of(work, job_id)}"
        time.sleep(0.2)
    # slurmctld holds a requeued job back for a while (BeginTime); let it start again now, once the
    # requeue has put it back to PENDING.
    deadline = time.monotonic() + 30
    while (
        cluster.job_state(job_id) in ("RUNNING", "COMPLETING", "CONFIGURING") and time.monotonic() < deadline
    ):
        time.sleep(0.2)  # the first attempt is still ending; an update now can race the requeue
    # slurmd refuses a job credential issued in the same second as the revocation that ended the
    # first attempt ("Job credential revoked"); a real cluster's requeue delay is far longer.
    time.sleep(2.5)
    cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
    state = wait_for(cluster, job_id, 40)
    log = output_of(work, job_id)
    details = cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout
    for name in ("slurmctld.log", "slurmd.log"):  # what the daemons said about this job
        path = cluster.workdir / name
        lines = [ln for ln in path.read_text().splitlines() if job_id in ln] if path.exists() else []
        details += f"\n--- {name}:\n" + "\n".join(lines[-25:])
    return state, log, details


def test_sigusr1_requeues_the_job_and_it_resumes_to_the_same_weights(cluster, tmp_path, job_env):
    """What `surge slurm` scripts rely on (`--signal=USR1@90 --requeue`), with the signal sent at once.

    The job saves at a step boundary, requeues itself with `scontrol requeue`, and its second run
    resumes from last.ckpt (`ckpt_path="auto"`) to the weights of a run nobody interrupted.
    """
    full = run_group(
        [[sys.executable, str(PREEMPT_SCRIPT), str(tmp_path / "full"), str(tmp_path / "full.pt"),
          str(tmp_path / "full.marker")]],
        env=clean_env(), cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert full[0][0] == 0, full[0][1]
    work = tmp_path / "job"
    state, log, details = _preempt_and_requeue(cluster, work, job_env)
    assert state == "COMPLETED", f"{state}\n{log}\n{details}"
    assert "attempt 0" in log and "attempt 1" in log and "SIGUSR1: saved" in log, log
    # (surge's "SLURM job N requeued" line is not asserted: `scontrol requeue` has the step killed
    # before the line is written.)
    a, b = (
        torch.load(tmp_path / "full.pt", weights_only=True),
        torch.load(work / "run.pt", weights_only=True),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
