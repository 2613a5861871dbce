"""DDP for real: 1, 2 and 3 gloo processes on 127.0.0.1, started by surge's own launcher."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env, reference_run

import script_server

SCRIPT = Path(__file__).with_name("train_script.py")


def run(tmp_path: Path, name: str, *args: str, timeout: float = 120) -> dict:
    out = tmp_path / f"{name}.pt"
    env = clean_env()  # the environment of the other jobs' servers (tests/harness/script_server.py)
    argv = [str(SCRIPT), "--root", str(tmp_path / name), "--out", str(out), *args]
    # every rank is forked from a server that imported torch and surge
    proc = script_server.run(sys.executable, argv, cwd=tmp_path, env=env, preload=PRELOAD, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def _close(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=tol, rtol=tol)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_processes_with_batch_b_equal_one_with_batch_2b(tmp_path, tmp_path_factory, accumulate):
    steps = str(20)
    # one process (accumulate=1: the run test_torchrun.py and test_slurm.py compare with, made once)
    one = reference_run(tmp_path_factory, "--batch-size", "8", "--max-steps", steps, "--epochs", "4",
                        *(["--accumulate", str(accumulate)] if accumulate > 1 else []))  # fmt: skip
    two = run(tmp_path, "two", "--devices", "2", "--batch-size", "4", "--max-steps", steps, "--epochs", "4",
              "--accumulate", str(accumulate), "--count-allreduce")  # fmt: skip
    assert one["global_step"] == two["global_step"] == 20 and two["world_size"] == 2
    _close(one["state_dict"], two["state_dict"])
    # Gradients cross the network once per optimizer step, not once per micro-batch (one bucket
    # here; DDP's very first backward may run before its buckets are built).
    assert two["allreduces"] in (19, 20)


@pytest.mark.slow  # 3 ranks: they share the cores with the other workers (no timing asserted)
def test_epoch_metrics_are_identical_for_world_sizes_1_2_3(tmp_path):
    results = [
        run(
            tmp_path,
            f"ws{n}",
            "--devices",
            str(n),
            "--samples",
            "10",
            "--batch-size",
            "2",
            "--max-steps",
            "0",
        )
        for n in (1, 2, 3)
    ]
    for res in results[1:]:
        for key in ("val_loss", "val_acc", "val_x", "val_count"):
            assert res["validated"][key] == pytest.approx(results[0]["validated"][key], rel=1e-6, abs=1e-7), (
                key
            )
    assert results[0]["validated"]["val_count"] == 10.0
    for res in results:  # predict: each sample once, in dataset order, on rank zero
        assert torch.allclose(res["predictions"], results[0]["predictions"])
        assert res["predictions"].shape == (10,)


@pytest.mark.slow  # 3 ranks: they share the cores with the other workers (no timing asserted)
def test_train_epoch_metrics_count_every_sample_once(tmp_path):
    # 12 samples in batches of 2 on 3 ranks: 2 batches per rank, no padding needed.
    one = run(tmp_path, "one", "--devices", "1", "--samples", "12", "--batch-size", "6", "--epochs", "1")
    three = run(tmp_path, "three", "--devices", "3", "--samples", "12", "--batch-size", "2", "--epochs", "1")
    assert three["metrics"]["train_x"] == pytest.approx(one["metrics"]["train_x"], rel=1e-6)


def test_checkpoints_move_between_world_sizes(tmp_path):
    ddp = run(tmp_path, "ddp", "--devices", "2", "--epochs", "1", "--shuffle")
    resumed_single = run(
        tmp_path, "single", "--devices", "1", "--epochs", "2", "--shuffle", "--ckpt", ddp["last_ckpt"]
    )
    assert resumed_single["global_step"] == ddp["global_step"] + 40
    single = run(tmp_path, "first", "--devices", "1", "--epochs", "1")
    resumed_ddp = run(tmp_path, "resumed", "--devices", "2", "--epochs", "2", "--ckpt", single["last_ckpt"])
    assert resumed_ddp["global_step"] == single["global_step"] + 20
    assert Path(resumed_ddp["log_dir"]).name == "version_0"


def test_the_launcher_passes_ranks_explicitly_and_leaves_rank_zeros_environment_alone(tmp_path):
    two = run(tmp_path, "two", "--devices", "2", "--samples", "16", "--max-steps", "2")
    assert two["world_size"] == 2 and two["global_step"] == 2
    # Rank zero learns its place from the launcher's return value, not a round trip through
    # os.environ; only the started ranks are given variables (they are separate processes).
    assert two["launch_vars"] == dict.fromkeys(two["launch_vars"], "")


@pytest.mark.slow
def test_ddp_interrupted_mid_epoch_resumes_bit_for_bit(tmp_path):
    import random

    # 160 samples, batch 4 on 2 ranks: 20 steps per epoch; stop at a random step inside epochs 1-2.
    stop = random.Random(2026).randrange(21, 59)
    stop += stop % 20 == 0
    common = ("--devices", "2", "--epochs", "3", "--shuffle", "--workers", "2")
    straight = run(tmp_path, "straight", *common)
    stopped = run(tmp_path, "stopped", *common, "--max-steps", str(stop))
    assert stopped["global_step"] == stop
    resumed = run(tmp_path, "resumed", *common, "--ckpt", stopped["last_ckpt"])
    assert resumed["global_step"] == straight["global_step"] == 60
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    assert resumed["metrics"] == straight["metrics"]


@pytest.mark.slow
def test_the_profiler_times_gradient_communication(tmp_path):
    import json

    out = run(tmp_path, "profiled", "--devices", "2", "--epochs", "2", "--profile")
    report = json.loads(out["doctor"])
    assert report["world_size"] == 2 and report["summary"]["steps"] >= 30
    assert 0 < report["summary"]["comm_s"] < report["summary"]["step_s"]


@pytest.mark.slow
def test_ddp_async_checkpoints_resume_bit_for_bit(tmp_path):
    from surge.checkpoint import load_checkpoint

    common = ("--devices", "2", "--epochs", "2", "--shuffle")
    straight = run(tmp_path, "straight", *common)
    stopped = run(tmp_path, "stopped", *common, "--max-steps", "27", "--async-checkpoint", "--every-step")
    folder = Path(stopped["last_ckpt"]).parent
    assert sorted(p.name for p in folder.iterdir()) == [
        "epoch=1-step=26.ckpt",
        "epoch=1-step=27.ckpt",
        "last.ckpt",
    ]
    assert load_checkpoint(folder / "last.ckpt")["global_step"] == 27  # rank zero's writes, all durable
    resumed = run(tmp_path, "resumed", *common, "--async-checkpoint", "--ckpt", stopped["last_ckpt"])
    assert resumed["global_step"] == straight["global_step"] == 40
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    assert resumed["metrics"] == straight["metrics"]
