"""Tensor parallel x FSDP2 on a 2 x 2 mesh of 4 gloo processes (`surge.strategies.ModelParallel`,
mesh_script.py) against one plain process with the whole batch: the weights, the optimizer state,
what each rank's sampler gave it, the epoch metrics, with the blocks checkpointed and compiled, under
the doctor; bf16-mixed. Resuming on this and other meshes: test_mesh_layouts.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, assert_same_weights, clean_env

import script_server
from shared_runs import shared_run

SCRIPT = Path(__file__).with_name("mesh_script.py")
# 80 samples: one process reads batches of 8, each data-parallel rank batches of 4; accumulation 2
# and 2 epochs are 10 AdamW steps, clipped at a norm of 0.5 (a global norm over every shard).
COMMON = ("--epochs", "2", "--accumulate", "2", "--clip", "0.5")
SPEED = ("--checkpointing", "--compile", "regions:eager", "--doctor")

pytestmark = pytest.mark.slow  # 4 processes on 2 cores


def run(folder: Path, name: str, *args: str) -> dict:
    out = folder / f"{name}.pt"
    argv = [str(SCRIPT), "--root", str(folder / name), "--out", str(out), *args]
    proc = script_server.run(sys.executable, argv, cwd=folder, env=clean_env(), preload=PRELOAD, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def shared(tmp_path_factory, *args: str) -> dict:
    return shared_run(
        tmp_path_factory, "mesh_script", args, lambda folder: (folder, run(folder, "run", *args))
    )[1]


@pytest.fixture(scope="module")
def one(tmp_path_factory) -> dict:
    return shared(tmp_path_factory, "--mesh", "1", "--batch-size", "8", *COMMON)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> tuple[Path, dict]:
    """2 x 2; the first block sharded by the script's own fully_shard, the rest by surge; both blocks
    checkpointed and compiled (dynamo with its eager backend: no C++ build), under the doctor: what
    is compared with one process is the mesh with all of it (one launch of 4 processes, not two)."""
    args = ("--mesh", "2,2", "--batch-size", "4", "--user-shard", *COMMON, *SPEED)
    return shared_run(
        tmp_path_factory, "mesh_script", args, lambda folder: (folder, run(folder, "run", *args))
    )


def test_a_2x2_mesh_trains_as_one_process(one, mesh):
    _, four = mesh
    assert four["world_size"] == 4 and one["global_step"] == four["global_step"] == 10
    assert four["checkpointed"] == 2 and four["compiled_graphs"] > 0  # (on each rank, as on rank zero)
    assert_same_weights(one["state_dict"], four["state_dict"])
    for key, state in one["optimizer"]["state"].items():
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(
                state[name], four["optimizer"]["state"][key][name], atol=1e-6, rtol=1e-5
            )


def test_tensor_parallel_ranks_read_the_same_batch_and_data_parallel_ranks_split_it(one, mesh):
    _, four = mesh
    rows = four["rows"]  # per rank: each batch's first feature of each sample
    assert rows[0] == rows[1] and rows[2] == rows[3] and rows[0] != rows[2]
    for whole, halves in zip(one["rows"][0], zip(rows[0], rows[2])):
        assert sorted(whole) == sorted(halves[0] + halves[1])


def test_epoch_metrics_equal_one_process(one, mesh):
    _, four = mesh
    ours, single = four["metrics"], one["metrics"]
    # counts reduced over the data-parallel group only: each sample once (not once per tensor-parallel rank)
    for key in ("seen", "label_sum", "val_seen"):
        assert ours[key] == single[key], key
    assert (ours["seen"], ours["val_seen"]) == (80.0, 80.0)
    for key in ("train_loss", "val_loss"):
        assert ours[key] == pytest.approx(single[key], rel=1e-6, abs=0), key


def test_bf16_mixed_on_a_mesh_stays_with_one_process(tmp_path_factory):
    # bf16 rounds at 2^-8; the mesh's matmuls are split (and its gathers cast) differently from one
    # process's, and AdamW turns those roundings into steps of lr size: 1e-5 cannot hold, the
    # trajectory stays close and the counts are exact.
    one = shared(tmp_path_factory, "--mesh", "1", "--batch-size", "8", "--precision", "bf16-mixed", *COMMON)
    four = shared(
        tmp_path_factory, "--mesh", "2,2", "--batch-size", "4", "--precision", "bf16-mixed", *COMMON
    )
    assert four["global_step"] == 10 and four["metrics"]["seen"] == one["metrics"]["seen"] == 80.0
    assert_same_weights(one["state_dict"], four["state_dict"], tol=5e-2)
    assert four["metrics"]["train_loss"] == pytest.approx(one["metrics"]["train_loss"], abs=5e-3)


def test_the_doctor_counts_tensor_parallel_and_fsdp_collectives_on_a_mesh(mesh):
    mesh = mesh[1]["doctor"]["mesh"]
    assert mesh["steps"] == 8  # the profiled batches
    assert mesh["tensor_parallel"]["per_step"] > 0 and mesh["fsdp"]["per_step"] > 0
    assert mesh["pipeline"]["per_step"] == 0 and "schedule" not in mesh
    assert 0 < mesh["tensor_parallel"]["share"] < 1 and 0 < mesh["fsdp"]["share"] < 1
