"""Ranks started from inside fit() (`DDPStrategy(start_method="fork"|"spawn")`): 2 real gloo ranks on
127.0.0.1; what the main process holds after each stage, a failing rank, and the ranks' ends."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env, free_port

import script_server

SCRIPT = Path(__file__).with_name("spawn_script.py")


def job(folder: Path, name: str, *args: str) -> dict:
    out = folder / f"{name}.pt"
    argv = [str(SCRIPT), "--out", str(out), "--root", str(folder / name), *args]
    # a port reserved for the job (tests/harness/ports.py): the launcher's own pick, bind(0) then
    # close, can be taken by another test's connection while spawned ranks import torch
    env = clean_env({"MASTER_PORT": str(free_port())})
    proc = script_server.run(sys.executable, argv, cwd=folder, env=env, preload=PRELOAD, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {**torch.load(out, weights_only=False), "output": proc.stdout + proc.stderr}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("spawn")
    every = ("--stages", "fit,validate,test,predict")
    return {
        "popen": job(folder, "popen", "--start", "popen", *every),
        "fork": job(folder, "fork", "--start", "fork", *every),
        "spawn": job(folder, "spawn", "--start", "spawn"),  # a new interpreter a rank: fit only
        "failing": job(folder, "failing", "--start", "fork", "--fail-rank", "1"),
    }


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_the_main_process_ends_fit_with_rank_zeros_weights_and_metrics(runs, start):
    ref, got = runs["popen"], runs[start]  # under popen the main process is rank zero itself
    assert ref["weights"].keys() == got["weights"].keys()
    assert all(torch.equal(ref["weights"][k], got["weights"][k]) for k in ref["weights"])
    assert got["fit"]["callback_metrics"] == ref["fit"]["callback_metrics"]
    assert set(got["fit"]["callback_metrics"]) == {
        "train_loss",
        "train_loss_step",
        "train_loss_epoch",
        "val_loss",
    }
    best = got["fit"]["best_model_path"]
    assert Path(best).name == Path(ref["fit"]["best_model_path"]).name and os.path.isfile(best)
    assert got["fit"]["state"] == ref["fit"]["state"] and "FINISHED" in got["fit"]["state"]
    # As Lightning: the loop ran in the ranks; the main process's counters did not move.
    assert ref["fit"]["global_step"] == 8 and got["fit"]["global_step"] == 0


def test_validate_test_and_predict_return_rank_zeros_results(runs):
    ref, got = runs["popen"], runs["fork"]
    for stage in ("validate", "test"):
        assert got[stage]["result"] == ref[stage]["result"] and len(got[stage]["result"]) == 1
        assert got[stage]["state"] == ref[stage]["state"]
    assert torch.equal(got["predict"], ref["predict"]) and got["predict"].shape == (32, 1)
    # callback_metrics after each stage are merged into the main process's (as Lightning's spawn)
    assert got["test"]["callback_metrics"]["test_loss"] == ref["test"]["callback_metrics"]["test_loss"]
    assert (
        "train_loss" in got["test"]["callback_metrics"]
        and "train_loss" not in ref["test"]["callback_metrics"]
    )


def test_a_failing_rank_is_raised_in_the_main_process_with_its_traceback_and_no_rank_survives(runs):
    error = runs["failing"]["error"]
    assert error["type"] == "RankFailedError"
    assert {"ProcessRaisedException", "SurgeError", "RuntimeError"} <= set(error["bases"])
    assert "rank 1 failed in fit() ('fork')" in error["message"]
    assert "ValueError: training_step failed on purpose in rank 1" in error["message"]
    assert "in training_step" in error["message"]  # the rank's own traceback
    pids = runs["failing"]["rank_pids"]
    assert len(pids) == 2 and runs["failing"]["main_pid"] not in pids
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]  # ended and reaped
