"""`Trainer(activation_checkpointing=...)`: matched blocks recompute their activations in backward,
and training is otherwise exactly the same (weights, dropout masks, checkpoint keys)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import fast_trainer, params_of
from surge.speed.activation_checkpointing import is_checkpointed

SCRIPT = Path(__file__).parent / "distributed" / "ac_script.py"


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return x + self.drop(torch.tanh(self.lin(x)))


class Unused(nn.Module):
    pass


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.Sequential(Block(), Block(), Block())
        self.head = nn.Linear(16, 3)
        self.saved: list[int] = []

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        with torch.autograd.graph.saved_tensors_hooks(self._count, lambda t: t):
            return F.cross_entropy(self(x), y)

    def _count(self, t: torch.Tensor) -> torch.Tensor:
        self.saved[-1] += t.numel()  # what autograd keeps for backward in this step
        return t

    def on_train_batch_start(self, batch, batch_idx):
        self.saved.append(0)
        self.wrapped = {name for name, m in self.named_modules() if is_checkpointed(m)}  # during the fit

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 6, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()), batch_size=4)


def train(ac, **kwargs) -> Net:
    surge.seed_everything(0)
    model = Net()
    fast_trainer(max_steps=4, activation_checkpointing=ac, **kwargs).fit(model, loader())
    return model


@pytest.mark.parametrize("accumulate", [1, 3])
def test_weights_after_training_equal_the_run_without_it(accumulate):
    plain = train(None, accumulate_grad_batches=accumulate)
    checkpointed = train([Block], accumulate_grad_batches=accumulate)
    assert checkpointed.wrapped == {"blocks.0", "blocks.1", "blocks.2"} and plain.wrapped == set()
    assert not any(is_checkpointed(m) for m in checkpointed.modules())  # the hooks went with the fit
    a, b = params_of(plain), params_of(checkpointed)
    assert a.keys() == b.keys()
    for key in a:  # dropout draws the same masks in the recomputation: bit for bit
        assert torch.equal(a[key], b[key]), key
    # and the memory is saved: the blocks keep only their inputs for backward
    assert max(checkpointed.saved) < max(plain.saved)


def test_a_policy_callable_selects_the_modules():
    model = train(lambda m: isinstance(m, nn.Linear) and m.out_features == 16)
    assert model.wrapped == {"inp", "blocks.0.lin", "blocks.1.lin", "blocks.2.lin"}  # not the head


def test_the_outermost_match_is_wrapped_once_and_reported_once(caplog):
    with caplog.at_level(logging.INFO, logger="surge"):
        model = Net()
        trainer = fast_trainer(max_steps=2, activation_checkpointing=[Block, nn.Linear])
        trainer.fit(model, loader())
        first = set(model.wrapped)
        trainer.fit(model, loader())  # the first fit's hooks are gone: the second one's own, once
    reports = [r.getMessage() for r in caplog.records if "activation_checkpointing" in r.getMessage()]
    assert (
        reports
        == ["activation_checkpointing: 5 modules recompute their activations in backward (2 Linear, 3 Block)"]
        * 2
    ), reports  # once per fit
    assert first == model.wrapped == {"inp", "head", "blocks.0", "blocks.1", "blocks.2"}
    assert "blocks.0.lin" not in model.wrapped  # inside a checkpointed block: not twice
    for block in model.modules():  # nor anything left on the modules after the fit
        assert "forward" not in vars(block) and not block._forward_pre_hooks and not block._forward_hooks


def test_checkpoint_keys_are_unchanged_and_load_both_ways(tmp_path):
    plain, checkpointed = Net(), Net()
    with_ac = fast_trainer(max_steps=2, activation_checkpointing=[Block])
    with_ac.fit(checkpointed, loader())
    with_ac.save_checkpoint(tmp_path / "ac.ckpt")
    without = fast_trainer(max_steps=2)
    without.fit(plain, loader())
    without.save_checkpoint(tmp_path / "plain.ckpt")
    saved = torch.load(tmp_path / "ac.ckpt", weights_only=True)["state_dict"]
    assert list(saved) == list(torch.load(tmp_path / "plain.ckpt", weights_only=True)["state_dict"])
    fresh = Net()
    fresh.load_state_dict(saved)  # strict: into a model without checkpointing
    assert all(torch.equal(v, saved[k]) for k, v in fresh.state_dict().items())
    resumed = Net()
    fast_trainer(max_steps=3, activation_checkpointing=[Block]).fit(
        resumed, loader(), ckpt_path=tmp_path / "plain.ckpt"
    )  # a plain run's checkpoint resumes with checkpointing on


@pytest.mark.slow
def test_it_composes_with_compile():
    plain = train(None, compile={"backend": "aot_eager"})
    checkpointed = train([Block], compile={"backend": "aot_eager"})
    for key, value in params_of(plain).items():
        torch.testing.assert_close(params_of(checkpointed)[key], value, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([Block, int], "nn.Module subclasses"),
        ([], "at least one"),
        ("Block", "allowed"),
        (int, "allowed"),
    ],
)
def test_bad_values_are_refused_when_the_trainer_is_built(value, words):
    with pytest.raises(TypeError) as err:
        surge.Trainer(activation_checkpointing=value)
    assert "activation_checkpointing=" in str(err.value) and words in str(err.value), str(err.value)


def test_a_class_the_model_does_not_use_is_named():
    with pytest.raises(ValueError, match=r"activation_checkpointing names \['Unused'\]"):
        train([Block, Unused])


def test_a_policy_that_matches_nothing_or_answers_badly_is_refused():
    with pytest.raises(ValueError, match="matches no submodule of Net"):
        train(lambda m: False)
    with pytest.raises(TypeError, match="must return True or False"):
        train(lambda m: 1)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_processes_train_the_same_weights_with_it(tmp_path, strategy, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from jobs import PRELOAD, clean_env

    import script_server

    def run(name: str, *extra: str) -> dict:
        out = tmp_path / f"{name}.pt"
        argv = [
            str(SCRIPT),
            "--strategy",
            strategy,
            "--root",
            str(tmp_path / name),
            "--out",
            str(out),
            *extra,
        ]
        # the first process is forked from a server that imported torch and surge (its launcher's ranks too)
        proc = script_server.run(
            sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=180
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return torch.load(out, weights_only=True)

    plain, checkpointed = run("plain"), run("ac", "--ac")
    assert plain["global_step"] == checkpointed["global_step"] == 3
    assert (plain["wrapped"], checkpointed["wrapped"]) == (0, 3)
    assert plain["state_dict"].keys() == checkpointed["state_dict"].keys()
    for key, value in plain["state_dict"].items():
        assert torch.equal(value, checkpointed["state_dict"][key]), key
