"""Checkpoints of a 2 x 2 tensor-parallel x FSDP2 mesh (4 gloo processes, layouts_script.py): resumed
on the same mesh bit for bit, on 4 x 1, 1 x 2, FSDP and one plain process with the saved state exactly and
the run that never stopped's losses; FSDP's and one process's checkpoints resumed on a mesh;
SIGTERM, kill -9 in a save and async checkpointing on the mesh; the shards exported as one
.safetensors file; a layer sized by the layout refused on another layout.

Across layouts the continued losses and weights agree to 1e-6, not bitwise: the sums inside a
step (the data-parallel gradient average, a row-parallel layer's partial products, the clipping
norm) are added in another order on another layout, which moves float32 results by an ulp or so.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env
from safetensors.torch import load_file

import script_server
from surge.checkpoint import load_checkpoint
from surge.checkpoint.shard_files import remove_orphan_shards, shard_dir
from surge.checkpoint.sharded import read_weights
from surge.cli import main
from surge.errors import CheckpointError

SCRIPT = Path(__file__).with_name("layouts_script.py")
STEP1, STEP2, STEP4 = "epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"
TOL = 1e-6  # across layouts: the same sums in another order (module docstring)

pytestmark = pytest.mark.slow  # 4 processes on 2 cores


def launch(folder: Path, mode: str) -> tuple[int, str]:
    argv = [str(SCRIPT), mode, str(folder), str(folder / f"{mode}.pt")]
    proc = script_server.run(sys.executable, argv, cwd=folder, env=clean_env(), preload=PRELOAD, timeout=400)
    return proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("layouts")
    code, out = launch(folder, "sigterm")
    assert code == 143 and "SIGTERM: saved" in out, out
    code, out = launch(folder, "mesh")
    assert code == -9, out  # its last fit was killed inside a save, as planned
    for mode in ("one", "two"):  # "two" resumes a checkpoint of "one"
        code, out = launch(folder, mode)
        assert code == 0, out
    found: dict = {}
    for mode in ("mesh", "two", "one"):
        found.update(torch.load(folder / f"{mode}.pt", weights_only=True))
    return folder, found


def global_losses(run: dict) -> torch.Tensor:
    """Each step's loss over the global batch: the mean of the data-parallel ranks' (equal) batches."""
    ranks = torch.stack([losses.double() for losses in run["losses"]])
    return ranks[:: len(ranks) // run["data_parallel"]].mean(0)


def assert_states(a: dict, b: dict, tol: float = 0.0) -> None:
    """Weights and optimizer state equal (tol 0: bitwise)."""
    assert a["weights"].keys() == b["weights"].keys()
    pairs = [(k, a["weights"][k], b["weights"][k]) for k in a["weights"]]
    assert a["optim"]["state"].keys() == b["optim"]["state"].keys()
    for key, state in a["optim"]["state"].items():
        pairs += [((key, name), value, b["optim"]["state"][key][name]) for name, value in state.items()]
    for key, x, y in pairs:
        if tol:
            torch.testing.assert_close(x, y, atol=tol, rtol=0, msg=lambda m, key=key: f"{key}: {m}")
        else:
            assert torch.equal(x, y), key


def test_a_one_process_checkpoint_resumes_on_a_mesh(runs):
    _, found = runs
    one, moved = found["one"], found["one_to_mesh"]  # a whole state dict (not sharded), saved at step 4
    assert_states(one["at4"], moved["loaded"])  # each rank took its shards of it
    assert len(moved["losses"][0]) == 1  # step 5: "one" trained steps 3-5 (resumed at 2)
    torch.testing.assert_close(global_losses(moved), global_losses(one)[-1:], atol=TOL, rtol=0)
    assert_states(one["end"], moved["end"], tol=TOL)


def test_sigterm_on_a_mesh_saves_at_a_step_and_the_requeued_run_finds_it(runs):
    folder, found = runs
    saved = load_checkpoint(folder / "sigterm" / "checkpoints" / "last.ckpt")
    assert saved["global_step"] == 3 and saved["mesh"] == [2, 2]  # rank zero was signalled after step 3
    assert len(found["requeued"]["losses"][0]) == 2  # ckpt_path="auto" resumed it: steps 4 and 5 left


def test_a_resume_on_the_same_mesh_is_bit_exact(runs):
    _, found = runs
    straight, requeued = found["straight"], found["requeued"]
    assert straight["global_step"] == requeued["global_step"] == 5
    assert_states(straight["at3"], requeued["loaded"])
    for whole, resumed in zip(straight["losses"], requeued["losses"]):  # every rank's own losses
        assert torch.equal(whole[3:], resumed)
    assert_states(straight["end"], requeued["end"])


@pytest.mark.parametrize(
    "layout", ["dp4", "two", "one", "to_fsdp"], ids=["to-4x1", "to-1x2", "to-one-process", "to-fsdp"]
)
def test_a_mesh_checkpoint_resumes_on_another_layout(runs, layout):
    _, found = runs
    straight, moved = found["straight"], found[layout]
    assert (
        moved["global_step"] == 5
        and moved["data_parallel"] == {"dp4": 4, "two": 1, "one": 1, "to_fsdp": 4}[layout]
    )
    assert_states(straight["at2"], moved["loaded"])  # resharded, not recomputed: exactly the saved state
    torch.testing.assert_close(global_losses(moved), global_losses(straight)[2:], atol=TOL, rtol=0)
    assert_states(straight["end"], moved["end"], tol=TOL)


def test_an_fsdp_checkpoint_resumes_on_a_mesh(runs):
    _, found = runs
    fsdp, moved = found["fsdp"], found["fsdp_to_mesh"]
    assert_states(fsdp["at3"], moved["loaded"])
    torch.testing.assert_close(global_losses(moved), global_losses(fsdp)[3:], atol=TOL, rtol=0)
    assert_states(fsdp["end"], moved["end"], tol=TOL)


def test_kill_9_during_a_mesh_save_leaves_the_previous_checkpoint_whole(runs):
    folder, found = runs
    saved = folder / "killed" / "checkpoints"
    last = load_checkpoint(saved / "last.ckpt")  # the commit of step 2 never happened
    assert last["global_step"] == 1 and not (saved / STEP2).exists()
    weights = read_weights(saved / "last.ckpt")  # every shard verified against its digest
    assert all(torch.equal(weights[k], v) for k, v in found["straight"]["at1"]["weights"].items())
    debris = {p for p in saved.iterdir() if p.is_dir()} - {shard_dir(last, saved / "last.ckpt")}
    assert len(debris) == 1 and next(iter(debris)).name.startswith(f"{STEP2}.shards-")
    assert set(remove_orphan_shards(saved)) == debris  # what the next fit's start clears
    assert read_weights(saved / STEP1).keys() == weights.keys()


def test_async_checkpoints_on_a_mesh_equal_the_sync_ones(runs):
    folder, _ = runs
    sync, background = folder / "straight" / "checkpoints" / STEP4, folder / "sigterm" / "checkpoints" / STEP4
    a, b = load_checkpoint(sync), load_checkpoint(background)
    assert b["mesh"] == [2, 2] and a["global_step"] == b["global_step"] == 4
    data = {name: digest for name, digest in a["sharded"]["files"].items() if name.endswith(".distcp")}
    assert (
        len(data) == 4 and data.items() <= b["sharded"]["files"].items()
    )  # each rank's shards: the same bytes
    weights = read_weights(background)  # verified and loadable
    assert all(torch.equal(weights[k], v) for k, v in read_weights(sync).items())


def test_a_mesh_checkpoint_exports_one_safetensors_file(runs, tmp_path):
    folder, found = runs
    out = tmp_path / "model.safetensors"
    assert main(["export", str(folder / "straight" / "checkpoints" / STEP2), "--to", str(out)]) == 0
    weights = load_file(str(out))
    saved = found["straight"]["at2"]["weights"]
    assert weights.keys() == saved.keys() and all(torch.equal(weights[k], saved[k]) for k in saved)


def test_trainer_export_on_a_mesh_gathers_the_shards(runs):
    folder, found = runs
    weights = load_file(str(folder / "straight" / "model.safetensors"))
    trained = found["straight"]["end"]["weights"]
    assert weights.keys() == trained.keys() and all(torch.equal(weights[k], trained[k]) for k in trained)


def test_a_flipped_bit_in_any_mesh_shard_is_refused(runs, tmp_path):
    folder, _ = runs
    source = folder / "straight" / "checkpoints"
    shutil.copy(source / STEP2, tmp_path / STEP2)
    ckpt = load_checkpoint(tmp_path / STEP2)
    shards = shard_dir(ckpt, source / STEP2)
    files = sorted(p.name for p in shards.iterdir())
    assert len([f for f in files if f.endswith(".distcp")]) == 4  # one a rank
    for name in files:
        shutil.rmtree(tmp_path / shards.name, ignore_errors=True)
        shutil.copytree(shards, tmp_path / shards.name)
        data = bytearray((tmp_path / shards.name / name).read_bytes())
        data[len(data) // 2] ^= 1
        (tmp_path / shards.name / name).write_bytes(bytes(data))
        with pytest.raises(CheckpointError, match="checksum"):
            read_weights(tmp_path / STEP2)


def test_a_layer_sized_by_the_layout_is_refused_on_another_naming_both(runs):
    _, found = runs
    message = found["refused"]  # saved on 1 x 2, resumed on 2 x 1 (layouts_script.py's PerRank)
    assert "part.weight: checkpoint (8, 16) vs model (16, 16)" in message
    assert "saved on a mesh of data_parallel=1 x tensor_parallel=2 and this run is a mesh of " in message
    assert (
        "data_parallel=2 x tensor_parallel=1" in message
        and "Resume on the layout it was saved with" in message
    )
