"""Portable weights: `.safetensors` files that a plain nn.Module loads strictly, with no surge involved."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

import surge
from helpers import TinyModel, fast_trainer, make_loaders
from surge.checkpoint import save_atomic
from surge.cli import main


def plain_net() -> torch.nn.Sequential:
    """The bare architecture of TinyModel.net, as someone without surge would write it."""
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


class Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = plain_net()


def trained_checkpoint(tmp_path):
    model = TinyModel()
    trainer = fast_trainer(max_steps=3)
    trainer.fit(model, *make_loaders())
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    return model, trainer, path


def test_export_loads_strictly_into_a_plain_module_with_equal_outputs(tmp_path):
    model, _, ckpt = trained_checkpoint(tmp_path)
    out = surge.export_safetensors(ckpt, tmp_path / "w.safetensors")
    weights = load_file(str(out))
    plain = Plain()
    plain.load_state_dict(weights, strict=True)
    x = torch.randn(5, 4)
    assert torch.equal(plain.net(x), model(x))
    assert all(t.is_contiguous() for t in weights.values())


def test_trainer_export_and_the_cli_write_the_same_weights(tmp_path):
    _, trainer, ckpt = trained_checkpoint(tmp_path)
    trainer.export(tmp_path / "api.safetensors")
    assert main(["export", str(ckpt), "--to", str(tmp_path / "cli.safetensors")]) == 0
    a, b = load_file(str(tmp_path / "api.safetensors")), load_file(str(tmp_path / "cli.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_wrapper_prefixes_are_stripped(tmp_path):
    state = {f"module._orig_mod.net.{k}": v for k, v in plain_net().state_dict().items()}
    save_atomic({"state_dict": state}, tmp_path / "ddp.ckpt")
    weights = load_file(str(surge.export_safetensors(tmp_path / "ddp.ckpt", tmp_path / "w.safetensors")))
    assert sorted(weights) == ["net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight"]
    Plain().load_state_dict(weights, strict=True)


def test_tied_and_non_contiguous_tensors_are_written_once_per_name(tmp_path):
    emb = torch.nn.Embedding(6, 4)
    head = torch.nn.Linear(4, 6, bias=False)
    head.weight = emb.weight  # tied, as language models do
    tied = torch.nn.ModuleDict({"emb": emb, "head": head})
    state = {**tied.state_dict(), "extra": torch.randn(4, 6).t()}
    weights = load_file(str(surge.export_safetensors(state, tmp_path / "tied.safetensors")))
    assert torch.equal(weights["emb.weight"], weights["head.weight"])
    assert torch.equal(weights["extra"], state["extra"])


@pytest.mark.parametrize("problem", ["missing", "corrupt"])
def test_cli_names_a_bad_checkpoint(tmp_path, capsys, problem):
    ckpt = tmp_path / f"{problem}.ckpt"
    if problem == "corrupt":
        ckpt.write_bytes(b"not a checkpoint at all")
    assert main(["export", str(ckpt), "--to", str(tmp_path / "w.safetensors")]) == 1
    err = capsys.readouterr().err
    assert str(ckpt) in err and "Traceback" not in err
    assert not (tmp_path / "w.safetensors").exists()


def test_a_changed_checkpoint_fails_its_checksum(tmp_path):
    _, _, ckpt = trained_checkpoint(tmp_path)
    state = torch.load(ckpt, weights_only=True)
    state["state_dict"]["net.0.bias"] += 1.0
    torch.save(state, ckpt)
    with pytest.raises(surge.CheckpointError, match="checksum"):
        surge.export_safetensors(ckpt, tmp_path / "w.safetensors")
