"""`Trainer(devices=N)` runs the script again from its start in each new rank: ranks that reach
different Trainers fail fast, naming each rank's Trainer, instead of pairing their collectives wrongly
(a hang, or a run that trains on with another Trainer's model); too many CPU ranks are warned about."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from jobs import HERE, PRELOAD, SRC, clean_env

import script_server
import surge
from surge.launch.host import cpu_count

SCRIPT = HERE / "two_trainers_script.py"
LINES = SCRIPT.read_text().splitlines()
FIRST = 1 + next(i for i, line in enumerate(LINES) if "devices=first" in line)  # the script's Trainer lines
SECOND = 1 + next(i for i, line in enumerate(LINES) if "devices=2" in line)


def run_script(tmp_path, first: str) -> subprocess.CompletedProcess:
    # rank zero is forked from a server that imported torch and surge (its launcher's rank too)
    env = clean_env({"PYTHONPATH": f"{SRC}:{HERE.parent}"})
    return script_server.run(
        sys.executable, [str(SCRIPT), "--first", first], cwd=tmp_path, env=env, preload=PRELOAD, timeout=240
    )


def test_ranks_at_different_trainers_fail_naming_each_ones_line(tmp_path):
    # Rank 0 trains the devices="auto" Trainer alone (one CPU), then starts rank 1 at the 2-process one;
    # rank 1, re-running the script, reaches the first Trainer, which under the launch is a 2-rank DDP job.
    proc = run_script(tmp_path, "auto")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "the ranks are at different Trainers of the script" in out, out[-3000:]
    assert "rank 0: " in out and f"{SCRIPT}:{SECOND} (Trainer #1" in out, out[-3000:]
    assert "rank 1: " in out and f"{SCRIPT}:{FIRST} (Trainer #1" in out, out[-3000:]
    assert "finished fit" not in out


def test_a_rank_at_a_one_device_trainer_is_told_the_script_runs_again(tmp_path):
    proc = run_script(tmp_path, "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "expects 1 processes, but the surge environment says WORLD_SIZE=2" in out, out[-3000:]
    assert "runs the script again from its start" in out


def test_ranks_that_reach_the_same_trainers_in_order_run_them_all(tmp_path):
    proc = run_script(tmp_path, "2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    done = sorted(
        re.findall(r"rank \d finished fit \d", proc.stdout)
    )  # the ranks share stdout: lines may run together
    assert done == sorted(f"rank {r} finished fit {a}" for a in (0, 1) for r in (0, 1))


def test_more_cpu_ranks_than_cores_are_warned_about():
    many = cpu_count() + 1
    with pytest.warns(
        UserWarning, match=rf"devices={many}\) on the CPU runs {many} processes .* use devices<={cpu_count()}"
    ):
        surge.Trainer(accelerator="cpu", devices=many, logger=False)


def test_as_many_cpu_ranks_as_cores_are_not_warned_about(recwarn):
    surge.Trainer(accelerator="cpu", devices=cpu_count(), logger=False)
    assert not [w for w in recwarn if "processes on a machine" in str(w.message)]
