"""FSDP (FSDP2 `fully_shard`) for real: gloo processes on 127.0.0.1, sharded checkpoints between world sizes."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, assert_same_weights, clean_env

import script_server
import surge
from shared_runs import shared_run
from surge.errors import CheckpointError

SCRIPT = Path(__file__).with_name("fsdp_script.py")


def run(tmp_path: Path, name: str, *args: str, timeout: float = 180) -> dict:
    out = tmp_path / f"{name}.pt"
    argv = [str(SCRIPT), "--root", str(tmp_path / name), "--out", str(out), *args]
    # the first process is forked from a server that imported torch and surge (its launcher's ranks too)
    proc = script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def fsdp(tmp_path: Path, name: str, *args: str, devices: int = 2) -> dict:
    return run(tmp_path, name, "--devices", str(devices), "--strategy", "fsdp", *args)


def shared(tmp_path_factory, *args: str) -> dict:
    """`run(...)` made once a test session for these arguments; the tests only read it."""
    return shared_run(tmp_path_factory, "fsdp_script", args, lambda folder: run(folder, "run", *args))


@pytest.mark.slow
@pytest.mark.parametrize("shard", ["block", "size"])
def test_fsdp_two_processes_equal_one_process_with_twice_the_batch(tmp_path, tmp_path_factory, shard):
    # AdamW, accumulation 2 (the first micro-batch of each window skips the reduce-scatter) and
    # gradient clipping (a norm over shards) must all agree with one plain process.
    common = ("--max-steps", "6", "--epochs", "3", "--accumulate", "2", "--clip", "0.5")
    one = shared(tmp_path_factory, "--devices", "1", "--batch-size", "8", *common)  # both shardings
    two = fsdp(tmp_path, "two", "--batch-size", "4", "--shard", shard, *common)
    assert (
        two["strategy"] == "fsdp" and two["world_size"] == 2 and one["global_step"] == two["global_step"] == 6
    )
    assert_same_weights(one["state_dict"], two["state_dict"])
    for key, state in one["optimizer"]["state"].items():
        torch.testing.assert_close(
            state["exp_avg"], two["optimizer"]["state"][key]["exp_avg"], atol=1e-6, rtol=1e-5
        )


@pytest.fixture
def two_process_run(tmp_path_factory) -> tuple[Path, dict]:
    """One epoch on 2 FSDP processes, made once a session; the tests copy what they damage."""
    return shared_run(
        tmp_path_factory,
        "fsdp_saved",
        (),
        lambda tmp: (tmp, fsdp(tmp, "saved", "--epochs", "1", "--shuffle")),
    )


@pytest.fixture
def straight_two_epochs(tmp_path_factory) -> dict:
    """Two epochs on 2 FSDP processes without a stop: what the resumed runs must equal."""
    return shared(tmp_path_factory, "--devices", "2", "--strategy", "fsdp", "--epochs", "2", "--shuffle")


@pytest.mark.slow  # 3 ranks: they share the cores with the other workers (no timing asserted)
def test_a_checkpoint_saved_by_two_processes_loads_with_three(two_process_run, tmp_path):
    tmp, saved = two_process_run
    ckpt = saved["last_ckpt"]
    # Resume at the saved step with nothing left to train: the whole state must come back exactly.
    three = fsdp(tmp_path, "three", "--epochs", "1", "--ckpt", str(tmp / ckpt), devices=3)
    assert three["world_size"] == 3 and three["global_step"] == saved["global_step"]
    for key, value in saved["state_dict"].items():
        assert torch.equal(value, three["state_dict"][key]), key
    for key, state in saved["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, three["optimizer"]["state"][key][name]), (key, name)


@pytest.mark.slow
def test_fsdp_resume_continues_bit_for_bit(two_process_run, straight_two_epochs, tmp_path):
    tmp, saved = two_process_run
    straight = straight_two_epochs
    resumed = fsdp(tmp_path, "resumed", "--epochs", "2", "--shuffle", "--ckpt", str(tmp / saved["last_ckpt"]))
    assert resumed["global_step"] == straight["global_step"] == 2 * saved["global_step"]
    assert resumed["losses"] == straight["losses"][saved["global_step"] :]
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key


@pytest.mark.slow
def test_checkpoints_move_between_fsdp_and_one_process(two_process_run, tmp_path):
    tmp, saved = two_process_run
    # FSDP -> one plain process: weights and optimizer state load without FSDP.
    single = run(
        tmp_path, "single", "--devices", "1", "--epochs", "1", "--ckpt", str(tmp / saved["last_ckpt"])
    )
    for key, value in saved["state_dict"].items():
        assert torch.equal(value, single["state_dict"][key]), key
    torch.testing.assert_close(single["optimizer"]["state"], saved["optimizer"]["state"], atol=0, rtol=0)
    # One plain process -> FSDP: each rank takes its shards of the whole state.
    first = run(tmp_path, "first", "--devices", "1", "--epochs", "1")
    resumed = fsdp(tmp_path, "resumed", "--epochs", "1", "--ckpt", str(tmp_path / first["last_ckpt"]))
    for key, value in first["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    torch.testing.assert_close(resumed["optimizer"]["state"], first["optimizer"]["state"], atol=0, rtol=0)


def _copy_checkpoint(tmp: Path, ckpt: str, dest: Path) -> Path:
    import shutil

    source = tmp / ckpt
    folder = surge.checkpoint.load_checkpoint(source)["sharded"]["dir"]
    dest.mkdir()
    shutil.copy(source, dest / source.name)
    shutil.copytree(source.parent / folder, dest / folder)
    return dest / source.name


def _net():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from fsdp_script import Net
    finally:
        sys.path.pop(0)
    return Net()


@pytest.mark.slow
def test_a_flipped_bit_in_any_shard_is_caught_before_loading(two_process_run, tmp_path):
    tmp, saved = two_process_run
    path = _copy_checkpoint(tmp, saved["last_ckpt"], tmp_path / "copy")
    strategy = surge.strategies.SingleDeviceStrategy()
    ckpt = strategy.load_checkpoint(path)  # intact: loads
    weights = strategy.restore_model(_net(), ckpt, path)
    assert weights == []
    folder = path.parent / ckpt["sharded"]["dir"]
    for shard in sorted(folder.iterdir()):
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x10
        shard.write_bytes(bytes(data))
        with pytest.raises(CheckpointError, match=f"{shard.name}.*checksum"):
            strategy.load_checkpoint(path)
        data[len(data) // 2] ^= 0x10
        shard.write_bytes(bytes(data))
    strategy.load_checkpoint(path)


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


@pytest.mark.slow
def test_a_hostile_dcp_metadata_never_runs(two_process_run, tmp_path):
    from surge.checkpoint.sharded import read_metadata

    tmp, saved = two_process_run
    path = _copy_checkpoint(tmp, saved["last_ckpt"], tmp_path / "copy")
    folder = path.parent / surge.checkpoint.load_checkpoint(path)["sharded"]["dir"]
    _Payload.marker = tmp_path / "pwned"
    (folder / ".metadata").write_bytes(pickle.dumps(_Payload()))
    with pytest.raises(CheckpointError, match="could run code"):
        read_metadata(folder)
    # Even with the manifest's digest made to match, loading refuses and nothing ran.
    state = torch.load(path, weights_only=True)
    from surge.checkpoint.shard_files import file_digest

    state["sharded"]["files"][".metadata"] = file_digest(folder / ".metadata")
    state["surge"].pop("digest", None)
    surge.checkpoint.save_atomic(state, path)
    strategy = surge.strategies.SingleDeviceStrategy()
    with pytest.raises(CheckpointError, match="could run code"):
        strategy.restore_model(_net(), strategy.load_checkpoint(path), path)
    assert not _Payload.marker.exists()


@pytest.mark.slow
def test_a_sharded_checkpoint_consolidates_into_one_file(two_process_run, tmp_path):
    from surge.checkpoint.sharded import consolidate

    tmp, saved = two_process_run
    out = consolidate(tmp / saved["last_ckpt"], tmp_path / "whole.ckpt")
    state = torch.load(out, weights_only=True)
    assert state["global_step"] == saved["global_step"] and "sharded" not in state
    for key, value in saved["state_dict"].items():
        assert torch.equal(state["state_dict"][key], value), key
    net = _net()
    assert (
        surge.strategies.SingleDeviceStrategy().restore_model(net, surge.checkpoint.load_checkpoint(out), out)
        == []
    )


@pytest.mark.slow
def test_a_sharded_checkpoint_exports_to_safetensors(two_process_run, tmp_path):
    from safetensors.torch import load_file

    tmp, saved = two_process_run
    out = surge.export_safetensors(tmp / saved["last_ckpt"], tmp_path / "model.safetensors")
    weights = load_file(out)
    net = _net()
    net.load_state_dict(weights, strict=True)
    for key, value in saved["state_dict"].items():
        assert torch.equal(weights[key], value), key


@pytest.mark.slow
def test_async_sharded_checkpoints_equal_the_sync_ones_and_resume_bit_for_bit(
    two_process_run, straight_two_epochs, tmp_path
):
    from surge.checkpoint.sharded import read_weights

    tmp, saved = two_process_run
    written = fsdp(tmp_path, "async", "--epochs", "1", "--shuffle", "--async-checkpoint", "--every-step")
    sync_file, async_file = tmp / saved["last_ckpt"], tmp_path / written["last_ckpt"]
    assert async_file.name == "last.ckpt" and written["global_step"] == saved["global_step"]
    sync_weights, async_weights = read_weights(sync_file), read_weights(async_file)  # shards verified
    assert sync_weights.keys() == async_weights.keys()
    assert all(torch.equal(sync_weights[k], async_weights[k]) for k in sync_weights)
    folder = async_file.parent
    assert len(list(folder.glob("epoch=*.ckpt"))) == 2  # top 2 kept, older ones and their shards removed
    assert len(list(folder.glob("*.shards-*"))) == 2
    straight = straight_two_epochs
    # From the epoch's last step, saved before its validation: the resume validates before any
    # training step (FSDP evaluates under no_grad: parameters gathered under inference_mode could
    # not be updated in place afterwards).
    inside = folder / "epoch=0-step=8.ckpt"
    resumed = fsdp(
        tmp_path,
        "resumed",
        "--epochs",
        "2",
        "--shuffle",
        "--async-checkpoint",
        "--every-step",
        "--ckpt",
        str(inside),
    )
    assert resumed["losses"] == straight["losses"][8:]
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
