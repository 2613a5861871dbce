"""Checkpoint files: atomic writes, plain torch format, clean keys, corruption and unsafe-pickle refusal."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

import surge
from helpers import TinyModel, fast_trainer, make_loaders, params_of, same_params
from surge.callbacks import ModelCheckpoint
from surge.checkpoint import (
    load_checkpoint,
    remove_stale_temporaries,
    save_atomic,
)
from surge.checkpoint.model_state import apply_model_state, clean_state_dict


def trained(tmp_path, model=None, **kw):
    """Fit a model for 2 epochs and save a checkpoint; returns (trainer, model, path)."""
    model = model if model is not None else TinyModel(**kw)
    train, val = make_loaders()
    trainer = fast_trainer(max_epochs=2)
    trainer.fit(model, train, val)
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    return trainer, model, path


# -- writing ---------------------------------------------------------------------------------


def test_save_atomic_leaves_only_the_file_and_loads_with_plain_torch(tmp_path):
    state = {"weights": torch.arange(10.0), "epoch": 3, "nested": {"a": [1, 2.5, "x"]}}
    target = tmp_path / "sub" / "model.ckpt"
    returned = save_atomic(state, target)
    assert returned == target
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.ckpt"]
    loaded = torch.load(target, weights_only=True)
    assert torch.equal(loaded["weights"], state["weights"])
    assert loaded["epoch"] == 3 and loaded["nested"] == {"a": [1, 2.5, "x"]}
    assert loaded["surge"]["format_version"] == 2  # its digest is a zip record of its own
    assert "surge" not in state  # the caller's dict is not modified
    assert load_checkpoint(target)["epoch"] == 3


def test_save_atomic_replaces_an_existing_file(tmp_path):
    target = tmp_path / "m.ckpt"
    save_atomic({"v": torch.tensor(1.0)}, target)
    save_atomic({"v": torch.tensor(2.0)}, target)
    assert load_checkpoint(target)["v"].item() == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ckpt"]


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "m.ckpt"
    save_atomic({"v": torch.tensor(1.0)}, target)

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(surge.CheckpointError, match="disk full") as info:
        save_atomic({"v": torch.tensor(2.0)}, target)
    assert str(target) in str(info.value)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ckpt"]
    assert load_checkpoint(target)["v"].item() == 1.0


def test_trainer_checkpoint_contents(tmp_path):
    trainer, model, path = trained(tmp_path, scheduler="step_epoch")
    ckpt = torch.load(path, weights_only=True)
    for key in (
        "epoch",
        "global_step",
        "loop",
        "state_dict",
        "optimizer_states",
        "lr_schedulers",
        "callbacks",
        "hyper_parameters",
        "rng",
        "surge",
    ):
        assert key in ckpt, key
    assert ckpt["global_step"] == trainer.global_step == 8
    assert ckpt["epoch"] == trainer.current_epoch == 2
    assert ckpt["loop"]["global_step"] == 8
    assert set(ckpt["rng"]) >= {"python", "numpy", "torch"}
    assert isinstance(ckpt["rng"]["torch"], torch.Tensor)
    assert ckpt["surge"]["version"] == surge.__version__
    assert ckpt["surge"]["torch_version"] == str(torch.__version__)
    assert ckpt["hyper_parameters"] == dict(model.hparams)
    assert ckpt["hyper_parameters"] == {
        "in_dim": 4,
        "hidden": 8,
        "out_dim": 2,
        "lr": 0.1,
        "scripted_val_loss": None,
        "scheduler": "step_epoch",
    }
    assert len(ckpt["optimizer_states"]) == 1 and len(ckpt["lr_schedulers"]) == 1
    assert ckpt["lr_schedulers"][0]["last_epoch"] == 2
    assert same_params(ckpt["state_dict"], params_of(model))


def test_weights_only_checkpoint(tmp_path):
    trainer, model, _ = trained(tmp_path)
    path = tmp_path / "w.ckpt"
    trainer.save_checkpoint(path, weights_only=True)
    ckpt = load_checkpoint(path)
    assert "optimizer_states" not in ckpt and "loop" not in ckpt
    assert same_params(ckpt["state_dict"], params_of(model))


def test_model_checkpoint_state_is_in_the_checkpoint(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path / "c", monitor="val_loss")
    train, val = make_loaders()
    trainer = fast_trainer(enable_checkpointing=True, callbacks=[cb], max_epochs=1)
    trainer.fit(TinyModel(), train, val)
    ckpt = load_checkpoint(cb.best_model_path)
    assert ckpt["callbacks"][cb.state_key]["monitor"] == "val_loss"


def test_trainer_checkpoint_loads_into_the_bare_module(tmp_path):
    _, model, path = trained(tmp_path)
    fresh = TinyModel()
    assert not same_params(params_of(fresh), params_of(model))
    fresh.load_state_dict(torch.load(path, weights_only=True)["state_dict"])  # strict
    assert same_params(params_of(fresh), params_of(model))


# -- key prefixes ----------------------------------------------------------------------------


def test_clean_state_dict_strips_wrapper_prefixes():
    cleaned = clean_state_dict(
        {
            "module.x": 1,
            "_orig_mod.y": 2,
            "module._orig_mod.z": 3,
            "_orig_mod.module.w": 4,
            "net._orig_mod.weight": 5,
            "plain.bias": 6,
        }
    )
    assert cleaned == {"x": 1, "y": 2, "z": 3, "w": 4, "net.weight": 5, "plain.bias": 6}


def test_clean_state_dict_of_a_compiled_module_matches_the_bare_one():
    bare = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    compiled = torch.compile(bare)  # wrapping only; nothing is compiled until it is called
    assert any(k.startswith("_orig_mod.") for k in compiled.state_dict())
    assert list(clean_state_dict(compiled.state_dict())) == list(bare.state_dict())


class WrappedSubmodule(TinyModel):
    """TinyModel whose layers sit inside DataParallel (a no-op wrapper on CPU)."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.DataParallel(self.net)


def test_checkpoint_keys_have_no_wrapper_prefixes_when_a_submodule_is_wrapped(tmp_path):
    wrapped = WrappedSubmodule()
    assert any(".module." in k for k in wrapped.state_dict())
    _, model, path = trained(tmp_path, model=wrapped)
    keys = list(torch.load(path, weights_only=True)["state_dict"])
    assert keys == list(TinyModel().state_dict()), keys
    # ...so the weights load into the same model written without the wrapper
    bare = TinyModel()
    bare.load_state_dict(load_checkpoint(path)["state_dict"])
    assert torch.equal(bare.net[0].weight, model.net.module[0].weight)


def test_wrapped_submodule_checkpoint_restores_into_the_wrapped_model(tmp_path):
    _, model, path = trained(tmp_path, model=WrappedSubmodule())
    again = WrappedSubmodule()
    problems = apply_model_state(again, load_checkpoint(path)["state_dict"], strict=True, source=str(path))
    assert problems == []
    assert same_params(params_of(again), params_of(model))


def test_checkpoint_of_a_dataparallel_wrapped_model_loads_into_the_bare_one(tmp_path):
    model = TinyModel()
    state = {"state_dict": clean_state_dict(torch.nn.DataParallel(model).state_dict())}
    save_atomic(state, tmp_path / "dp.ckpt")
    bare = TinyModel()
    bare.load_state_dict(load_checkpoint(tmp_path / "dp.ckpt")["state_dict"])
    assert same_params(params_of(bare), params_of(model))


# -- corrupt and unsafe files ----------------------------------------------------------------


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.ckpt"
    path.write_bytes(b"")
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "empty" in str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.ckpt"
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated_file(tmp_path, keep):
    path = tmp_path / "t.ckpt"
    save_atomic({"w": torch.arange(50_000, dtype=torch.float32), "epoch": 1}, path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "corrupt" in str(info.value)


def test_flipped_byte_in_tensor_data(tmp_path):
    path = tmp_path / "f.ckpt"
    weights = torch.arange(200_000, dtype=torch.float32)  # a known pattern; dominates the file
    save_atomic({"state_dict": {"w": weights}, "epoch": 1}, path)
    data = bytearray(path.read_bytes())
    start = bytes(data).find(weights.numpy().tobytes())
    mid = len(data) // 2
    assert start >= 0 and start <= mid < start + weights.numel() * 4, "the middle byte is not tensor data"
    data[mid] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "corrupt" in str(info.value)


def test_flipped_byte_is_caught_by_the_trainer_too(tmp_path):
    big = TinyModel(hidden=4096)
    trainer = fast_trainer(max_epochs=1)
    train, val = make_loaders()
    trainer.fit(big, train, val)
    path = tmp_path / "big.ckpt"
    trainer.save_checkpoint(path)
    data = bytearray(path.read_bytes())
    weight = big.net[0].weight.detach().contiguous().numpy().tobytes()
    start = bytes(data).find(weight)
    assert start >= 0
    data[start + len(weight) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(surge.CheckpointError) as info:
        trainer.test(big, val, ckpt_path=path)
    assert str(path) in str(info.value)


class Payload:
    """Unpickling this calls open(marker, "w"), which creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, writer):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    payload = {"state_dict": {}, "epoch": 0, "x": Payload(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(payload, f)
    assert not marker.exists()
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert "refusing" in str(info.value)
    assert not marker.exists()


def test_malicious_pickle_via_trainer_ckpt_path(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "loop": {}, "x": Payload(marker)}, path)
    train, val = make_loaders()
    with pytest.raises(surge.CheckpointError):
        fast_trainer().fit(TinyModel(), train, val, ckpt_path=path)
    assert not marker.exists()


def test_force_no_weights_only_env_makes_load_refuse(tmp_path, monkeypatch):
    path = tmp_path / "ok.ckpt"
    save_atomic({"w": torch.ones(3)}, path)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(surge.CheckpointError) as info:
        load_checkpoint(path)
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" in str(info.value) and str(path) in str(info.value)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0")
    assert torch.equal(load_checkpoint(path)["w"], torch.ones(3))


def test_non_dict_checkpoint(tmp_path):
    path = tmp_path / "list.ckpt"
    torch.save([torch.ones(1)], path)
    with pytest.raises(surge.CheckpointError, match="not a surge checkpoint"):
        load_checkpoint(path)


def test_resume_from_weights_only_checkpoint_is_refused(tmp_path):
    trainer, model, _ = trained(tmp_path)
    path = tmp_path / "w.ckpt"
    trainer.save_checkpoint(path, weights_only=True)
    train, val = make_loaders()
    with pytest.raises(surge.CheckpointError, match="weights only"):
        fast_trainer(max_epochs=3).fit(TinyModel(), train, val, ckpt_path=path)


# -- stale temporaries -----------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_remove_stale_temporaries(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = tmp_path / f".x.ckpt.tmp-{dead_pid()}-abcdef12"
        mine = tmp_path / f".x.ckpt.tmp-{os.getpid()}-abcdef12"
        other_live = tmp_path / f".y.ckpt.tmp-{live.pid}-0123abcd"
        unrelated = [tmp_path / "x.ckpt", tmp_path / ".x.ckpt.tmp-notapid-abcdef12", tmp_path / "notes.txt"]
        for p in [dead, mine, other_live, *unrelated]:
            p.write_bytes(b"partial")
        removed = remove_stale_temporaries(tmp_path)
        assert removed == [dead]
        assert not dead.exists()
        assert mine.exists() and other_live.exists()
        assert all(p.exists() for p in unrelated)
    finally:
        live.kill()
        live.wait()


def test_remove_stale_temporaries_on_a_missing_dir(tmp_path):
    assert remove_stale_temporaries(tmp_path / "nope") == []


def test_remove_stale_temporaries_with_a_pid_past_a_c_int(tmp_path):
    """os.kill refuses such a pid (OverflowError): no process has it, its temporary is a dead one's."""
    huge = tmp_path / f".x.ckpt.tmp-{2**31}-abcdef12"
    huge.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == [huge]


def test_model_checkpoint_setup_removes_stale_temporaries(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    stale = directory / f".epoch=0-step=4.ckpt.tmp-{dead_pid()}-deadbeef"
    stale.write_bytes(b"half")
    cb = ModelCheckpoint(dirpath=directory)
    train, val = make_loaders()
    fast_trainer(enable_checkpointing=True, callbacks=[cb]).fit(TinyModel(), train, val)
    assert not stale.exists()
    assert sorted(p.name for p in directory.iterdir()) == ["epoch=0-step=4.ckpt"]


# -- applying weights ------------------------------------------------------------------------


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 3)
        self.b = torch.nn.Linear(3, 1)


def mismatched_state() -> dict[str, torch.Tensor]:
    src = Two().state_dict()
    return {
        "a.weight": torch.zeros(4, 2),  # wrong shape
        "a.bias": torch.full((3,), 7.0),
        "b.weight": torch.full((1, 3), 5.0),
        # "b.bias" missing
        "c.weight": torch.ones(2),  # unexpected
        **{k: v for k, v in src.items() if k not in ("a.weight", "a.bias", "b.weight", "b.bias")},
    }


def test_apply_model_state_strict_names_every_problem():
    model = Two()
    before = params_of(model)
    with pytest.raises(surge.CheckpointError) as info:
        apply_model_state(model, mismatched_state(), strict=True, source="my.ckpt")
    message = str(info.value)
    for phrase in (
        "my.ckpt",
        "Two",
        "missing keys",
        "b.bias",
        "unexpected keys",
        "c.weight",
        "shape mismatches",
        "a.weight",
        "(4, 2)",
        "(3, 2)",
    ):
        assert phrase in message, (phrase, message)
    assert same_params(before, params_of(model)), "strict failure must not load anything"


def test_apply_model_state_non_strict_loads_what_matches():
    model = Two()
    before = params_of(model)
    problems = apply_model_state(model, mismatched_state(), strict=False, source="my.ckpt")
    assert torch.equal(model.a.bias, torch.full((3,), 7.0))
    assert torch.equal(model.b.weight, torch.full((1, 3), 5.0))
    assert torch.equal(model.a.weight, before["a.weight"])  # shape mismatch: left as it was
    assert torch.equal(model.b.bias, before["b.bias"])  # missing: left as it was
    joined = " ".join(problems)
    assert "b.bias" in joined and "c.weight" in joined and "a.weight" in joined


def test_apply_model_state_strips_prefixes_from_the_checkpoint():
    src = Two()
    model = Two()
    wrapped = {f"module._orig_mod.{k}": v for k, v in src.state_dict().items()}
    assert apply_model_state(model, wrapped, strict=True, source="x") == []
    assert same_params(params_of(model), params_of(src))


def test_load_from_checkpoint_rebuilds_from_hparams_and_reports_a_partial_load(tmp_path):
    from helpers import TinyModel, fast_trainer, make_loaders

    trainer = fast_trainer(max_steps=2, default_root_dir=tmp_path)
    model = TinyModel(hidden=6, lr=0.3)
    trainer.fit(model, make_loaders()[0])
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = TinyModel.load_from_checkpoint(tmp_path / "m.ckpt")
    assert loaded.hparams.hidden == 6 and loaded.lr == 0.3
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key])
    with pytest.raises(surge.errors.CheckpointError, match="shape mismatches.*net.0.weight"):
        TinyModel.load_from_checkpoint(tmp_path / "m.ckpt", hidden=5)
    with pytest.warns(UserWarning, match="loaded what matched.*shape mismatches.*net.0.weight"):
        partial = TinyModel.load_from_checkpoint(tmp_path / "m.ckpt", hidden=5, strict=False)
    assert torch.equal(partial.net[2].bias, model.net[2].bias)  # what matched was loaded


def test_strict_loading_false_resumes_with_a_report(tmp_path):
    from helpers import TinyModel, fast_trainer, make_loaders

    trainer = fast_trainer(max_steps=2, default_root_dir=tmp_path)
    trainer.fit(TinyModel(), make_loaders()[0])
    trainer.save_checkpoint(tmp_path / "m.ckpt")

    class Extra(TinyModel):
        strict_loading = False

        def __init__(self):
            super().__init__()
            self.extra = torch.nn.Linear(2, 2)

    with pytest.warns(UserWarning, match="strict_loading=False.*missing keys.*extra.weight"):
        fast_trainer(max_steps=3, default_root_dir=tmp_path).validate(
            Extra(), make_loaders()[1], ckpt_path=tmp_path / "m.ckpt"
        )


def test_deleting_a_plain_checkpoint_does_not_read_it(tmp_path, monkeypatch):
    # ModelCheckpoint deletes the previous epoch's file every epoch by default; only a folder named
    # like a shard folder beside it can make a checkpoint name shards, so only then is it read.
    from surge.checkpoint import shard_files

    reads = []
    monkeypatch.setattr(shard_files, "load_checkpoint", lambda path, verify: reads.append(path) or {})
    plain = tmp_path / "epoch=0.ckpt"
    save_atomic({"epoch": 0}, plain)
    shard_files.remove_checkpoint(plain)
    assert not plain.exists() and reads == []
    (tmp_path / "epoch=1.ckpt.shards-123-0123abcd").mkdir()
    save_atomic({"epoch": 1}, tmp_path / "epoch=1.ckpt")
    shard_files.remove_checkpoint(tmp_path / "epoch=1.ckpt")
    assert reads == [tmp_path / "epoch=1.ckpt"]  # a shard folder beside it: read, to know
