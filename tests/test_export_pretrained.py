"""`surge export --module NAME`: one submodule's weights, named as its own state_dict names them, so a
Hugging Face model trained inside a surge.Module loads back with `from_pretrained` (no key surgery)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import fast_trainer
from surge.cli import main

transformers = pytest.importorskip(
    "transformers", reason='the Hugging Face case needs transformers: pip install -e ".[test-services]"'
)


def tiny_bert_config() -> transformers.BertConfig:
    return transformers.BertConfig(  # built here: nothing is downloaded
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=3,
    )  # fmt: skip


class Classifier(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = transformers.BertForSequenceClassification(tiny_bert_config())

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        return self.model(input_ids=ids, labels=labels).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def token_loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(0, 40, (16, 8), generator=g), torch.randint(0, 3, (16,), generator=g)
    return DataLoader(TensorDataset(ids, labels), batch_size=4)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.manual_seed(0)
    module, trainer = Classifier(), fast_trainer(max_steps=3)
    trainer.fit(module, token_loader())
    ckpt = tmp_path_factory.mktemp("ckpt") / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    return module, trainer, ckpt


def test_the_cli_exports_a_submodule_that_from_pretrained_loads(trained, tmp_path):
    module, _, ckpt = trained
    assert main(["export", str(ckpt), "--to", str(tmp_path / "model.safetensors"), "--module", "model"]) == 0
    module.model.config.save_pretrained(tmp_path)  # config.json beside the weights, as save_pretrained writes
    loaded = transformers.BertForSequenceClassification.from_pretrained(tmp_path)
    trained_state, loaded_state = module.model.state_dict(), loaded.state_dict()
    assert trained_state.keys() == loaded_state.keys()
    assert all(torch.equal(trained_state[k], loaded_state[k]) for k in trained_state)
    ids = torch.randint(0, 40, (2, 8))
    module.model.eval(), loaded.eval()
    assert torch.equal(module.model(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_trainer_export_of_a_nested_submodule_names_its_keys_as_it_does(trained, tmp_path):
    module, trainer, _ = trained
    from safetensors.torch import load_file

    written = load_file(str(trainer.export(tmp_path / "bert.safetensors", module="model.bert")))
    assert written.keys() == module.model.bert.state_dict().keys()
    transformers.BertModel(tiny_bert_config()).load_state_dict(written, strict=True)


def test_an_unknown_submodule_is_refused_naming_what_there_is(trained, tmp_path, capsys):
    _, _, ckpt = trained
    assert main(["export", str(ckpt), "--to", str(tmp_path / "x.safetensors"), "--module", "modle"]) == 1
    err = capsys.readouterr().err
    assert "modle" in err and "'model'" in err and "--module" in err
    assert not (tmp_path / "x.safetensors").exists()
