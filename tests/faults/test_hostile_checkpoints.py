"""Checkpoints that pass every safety check yet lie: what they name is never read or deleted outside
the run, damage can not switch verification off, and every damaged file is a CheckpointError."""

from __future__ import annotations

import io
import pickle
import re
import threading
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

import surge
from helpers import TinyModel, fast_trainer, make_loaders
from surge.callbacks import ModelCheckpoint
from surge.checkpoint import content_digest, load_checkpoint, save_atomic
from surge.checkpoint.shard_files import remove_checkpoint
from surge.checkpoint.sharded import read_metadata, save_sharded
from surge.cli import main
from surge.errors import CheckpointError, SurgeError
from surge.rank_zero import SurgeWarning

STRATEGY = surge.strategies.SingleDeviceStrategy


def _one_process(state: dict, path: Path) -> Path:
    """A real sharded checkpoint (DCP), written by this one process."""
    # torch warns once per process that no process group exists; whether this call is the first is
    # up to the test order, so the warning is neither required nor shown
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process")
        return save_sharded(
            state,
            path,
            rank=0,
            world_size=1,
            broadcast=lambda x: x,
            gather=lambda x: [x],
            barrier=lambda: None,
        )


def _sharded(path: Path) -> Path:
    return _one_process({"state_dict": {"w": torch.arange(6.0), "b": torch.ones(2)}, "epoch": 0}, path)


def _naming(path: Path, source: Path, **shards) -> Path:
    """A digest-valid checkpoint at `path`: `source`'s content with its "sharded" entry changed."""
    state = load_checkpoint(source)
    state["sharded"] = {**state["sharded"], **shards}
    return save_atomic(state, path)


def _victims(tmp: Path) -> tuple[Path, Path]:
    thesis = tmp / "elsewhere" / "thesis.txt"
    precious = tmp / "elsewhere" / "data"
    precious.mkdir(parents=True)
    thesis.write_text("four years")
    (precious / "raw.bin").write_bytes(b"x")
    return thesis, precious


# -- 1: nothing a checkpoint says makes surge delete or read outside the run ------------------
def test_resuming_a_hostile_checkpoint_deletes_nothing_outside_the_run(tmp_path):
    thesis, precious = _victims(tmp_path)
    train, val = make_loaders()

    def trainer(epochs: int) -> surge.Trainer:
        cb = ModelCheckpoint(dirpath="checkpoints", save_top_k=1)  # relative, as most runs write it
        return fast_trainer(
            max_epochs=epochs, enable_checkpointing=True, callbacks=[cb], default_root_dir=tmp_path
        )

    first = trainer(1)
    first.fit(TinyModel(), train, val)
    saved = Path(first.checkpoint_callback.best_model_path)
    companion = _naming(
        Path("checkpoints/companion.ckpt"), _sharded(tmp_path / "s" / "s.ckpt"), dir=str(precious)
    )
    state = load_checkpoint(saved)
    (key,) = state["callbacks"]
    state["callbacks"][key]["recent"] = [
        str(thesis),
        str(companion),
        "checkpoints/../../elsewhere/x.ckpt",
        str(saved),
    ]
    save_atomic(state, saved)  # every check passes: a real, digest-valid checkpoint

    with pytest.warns(SurgeWarning, match="thesis.txt"):
        trainer(3).fit(TinyModel(), train, val, ckpt_path=saved)
    assert thesis.read_text() == "four years" and (precious / "raw.bin").exists()
    assert not companion.exists()  # a surge checkpoint in the run's own folder: its to delete


@pytest.mark.parametrize("named", ["absolute", "parent"])
def test_removing_a_checkpoint_never_removes_a_folder_it_names_outside(tmp_path, named):
    _, precious = _victims(tmp_path)
    run = tmp_path / "run"
    folder = str(precious) if named == "absolute" else "../elsewhere/data"
    path = _naming(run / "a.ckpt", _sharded(run / "real.ckpt"), dir=folder)
    remove_checkpoint(path)
    assert not path.exists() and (precious / "raw.bin").exists()


@pytest.mark.parametrize("lie", ["absolute-dir", "parent-dir", "file-outside"])
def test_shards_are_never_read_from_outside_the_checkpoint_folder(tmp_path, lie):
    real = _sharded(tmp_path / "elsewhere" / "real.ckpt")
    folder = load_checkpoint(real)["sharded"]["dir"]
    run = tmp_path / "run"
    run.mkdir()
    if lie == "absolute-dir":
        path = _naming(run / "a.ckpt", real, dir=str(real.parent / folder))
    elif lie == "parent-dir":
        path = _naming(run / "a.ckpt", real, dir=f"../elsewhere/{folder}")
    else:
        (run / folder).mkdir()
        files = load_checkpoint(real)["sharded"]["files"]
        files = {f"../../elsewhere/{folder}/{name}": digest for name, digest in files.items()}
        path = _naming(run / "a.ckpt", real, files=files)
    with pytest.raises(CheckpointError, match="a.ckpt"):
        STRATEGY().load_checkpoint(path)
    assert STRATEGY().load_checkpoint(real)["epoch"] == 0  # the honest one still loads


# -- 2: one flipped bit cannot switch verification off ----------------------------------------
def _flip(path: Path, at: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


def test_a_damaged_marker_cannot_switch_the_checksum_off(tmp_path):
    weights = torch.arange(64, dtype=torch.float32)
    path = save_atomic({"state_dict": {"w": weights}, "epoch": 1}, tmp_path / "m.ckpt")
    data = path.read_bytes()
    _flip(path, data.index(b"surge"))  # the key that marks a surge checkpoint: "rurge"
    _flip(path, data.index(weights.numpy().tobytes()) + 9)  # and a weight
    with pytest.raises(CheckpointError, match="m.ckpt"):
        load_checkpoint(path)


def test_a_surge_checkpoint_without_its_digest_record_is_refused(tmp_path):
    path = save_atomic({"state_dict": {"w": torch.ones(3)}}, tmp_path / "m.ckpt")
    _flip(path, path.read_bytes().rindex(b"surge_digest"))  # the record's name, in the zip directory
    with pytest.raises(CheckpointError, match="m.ckpt.*digest record is missing"):
        load_checkpoint(path)


def test_plain_torch_weights_and_format_1_checkpoints_still_load(tmp_path):
    model = TinyModel()
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": {"hidden": 8}}, tmp_path / "foreign.ckpt"
    )
    loaded = TinyModel.load_from_checkpoint(tmp_path / "foreign.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    content = {"state_dict": {"w": torch.arange(4.0)}, "epoch": 1}
    old = {**content, "surge": {"format_version": 1, "digest": content_digest(content, version=1)}}
    torch.save(old, tmp_path / "v1.ckpt")
    assert load_checkpoint(tmp_path / "v1.ckpt")["epoch"] == 1
    old["state_dict"]["w"][0] = 9.0
    torch.save(old, tmp_path / "v1.ckpt")
    with pytest.raises(CheckpointError, match="v1.ckpt failed its checksum"):
        load_checkpoint(tmp_path / "v1.ckpt")


# -- 3: damage that used to escape as another error -------------------------------------------
def test_damaged_zip_end_records_are_a_checkpoint_error(tmp_path):
    good = save_atomic({"state_dict": {"w": torch.arange(8.0)}, "epoch": 2}, tmp_path / "g.ckpt")
    data, path = good.read_bytes(), tmp_path / "d.ckpt"
    for at in range(len(data) - 120, len(data)):
        for mask in (0x01, 0xFF):
            path.write_bytes(data)
            _flip(path, at, mask)
            try:
                state = load_checkpoint(path)
            except CheckpointError as err:
                assert "d.ckpt" in str(err)
                continue
            assert torch.equal(state["state_dict"]["w"], torch.arange(8.0)) and state["epoch"] == 2


def test_a_damaged_stride_is_a_checkpoint_error(tmp_path):
    path = save_atomic({"t": torch.tensor([5.0])}, tmp_path / "s.ckpt")
    data = path.read_bytes()
    # _rebuild_tensor_v2(storage, offset 0, size (1,), stride (1,), ...): make the stride 0
    match = re.search(rb"K\x00K\x01\x85(?:q.|\x94)K\x01\x85", data, re.DOTALL)
    assert match, "the tensor's size and stride were not found in the pickle"
    _flip(path, match.end() - 2)
    with pytest.raises(CheckpointError, match="s.ckpt"):
        load_checkpoint(path)


# -- 4: a checkpoint that vanishes while "auto" looks ---------------------------------------
def test_find_checkpoint_skips_checkpoints_that_vanish_meanwhile(tmp_path):
    from surge.trainer.run_state import newest_checkpoints

    trainer = fast_trainer(default_root_dir=tmp_path)
    keep = save_atomic({"epoch": 0}, tmp_path / "keep.ckpt")
    names = [tmp_path / f"top-{i}.ckpt" for i in range(300)]
    stop = threading.Event()

    def other_run() -> None:  # another run's top-k: writes checkpoints and deletes them again
        while not stop.is_set():
            for name in names:
                name.write_bytes(b"x")
            for name in names:
                name.unlink()

    worker = threading.Thread(target=other_run)
    worker.start()
    try:
        for _ in range(150):
            assert keep in newest_checkpoints(Path(trainer.default_root_dir), trainer.checkpoint_callback)
    finally:
        stop.set()
        worker.join()


# -- 5: the smaller findings ------------------------------------------------------------------
def test_export_refuses_to_overwrite_its_own_checkpoint(tmp_path, capsys):
    path = save_atomic({"state_dict": {"w": torch.ones(2)}}, tmp_path / "x.ckpt")
    (tmp_path / "link.ckpt").hardlink_to(path)
    for target in (path, tmp_path / "." / "x.ckpt", tmp_path / "link.ckpt"):
        assert main(["export", str(path), "--to", str(target)]) == 1
        assert "--to" in capsys.readouterr().err
        with pytest.raises(SurgeError, match="x.ckpt"):
            surge.export_safetensors(path, target)
    assert torch.equal(load_checkpoint(path)["state_dict"]["w"], torch.ones(2))


class _Payload:
    def __reduce__(self):
        return (print, ("ran",))


def test_a_hostile_pickle_is_refused_by_the_name_of_its_global(tmp_path):
    torch.save({"state_dict": {}, "x": _Payload()}, tmp_path / "evil.ckpt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "evil.ckpt")
    message = str(info.value)
    assert re.search(r"global (builtins\.)?print\b", message) and "evil.ckpt" in message
    assert "weights_only" not in message and "will likely succeed" not in message


def _dcp_folder(tmp_path: Path) -> Path:
    path = _sharded(tmp_path / "run" / "m.ckpt")
    return path.parent / load_checkpoint(path)["sharded"]["dir"]


def test_a_truncated_dcp_metadata_is_called_corrupt_not_hostile(tmp_path):
    meta = _dcp_folder(tmp_path) / ".metadata"
    meta.write_bytes(meta.read_bytes()[: meta.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as info:
        read_metadata(meta.parent)
    assert "could run code" not in str(info.value)


def test_dcp_metadata_cannot_build_allocating_objects(tmp_path):
    meta = _dcp_folder(tmp_path) / ".metadata"
    # torch.distributed.checkpoint.filesystem imports Tensor: torch.Tensor(2**30) would take 4 GiB
    meta.write_bytes(b"\x80\x02ctorch.distributed.checkpoint.filesystem\nTensor\nJ\x00\x00\x00@\x85R.")
    with pytest.raises(CheckpointError, match="filesystem.Tensor is not allowed"):
        read_metadata(meta.parent)


def test_dcp_metadata_sizes_are_bounded_by_the_shard_files(tmp_path):
    from surge.checkpoint.shard_files import file_digest
    from surge.checkpoint.sharded import full_model_state

    folder = _dcp_folder(tmp_path)
    path = folder.parent / "m.ckpt"
    meta = read_metadata(folder)
    meta.state_dict_metadata["state_dict.w"].size = torch.Size([2**40, 4])  # 16 TiB
    meta.storage_meta = None
    (folder / ".metadata").write_bytes(pickle.dumps(meta))
    state = load_checkpoint(path)
    state["sharded"]["files"][".metadata"] = file_digest(folder / ".metadata")
    save_atomic(state, path)  # a consistent, digest-valid lie
    ckpt = STRATEGY().load_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"state_dict\.w.*more than"):
        full_model_state(ckpt, path)


def test_the_digest_record_is_a_zip_record_plain_torch_ignores(tmp_path):
    path = save_atomic({"w": torch.ones(2)}, tmp_path / "m.ckpt")
    with zipfile.ZipFile(path) as archive:
        assert any(n.endswith("/.data/surge_digest") for n in archive.namelist())
    assert torch.equal(torch.load(io.BytesIO(path.read_bytes()), weights_only=True)["w"], torch.ones(2))
