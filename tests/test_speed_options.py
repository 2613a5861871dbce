"""Speed options on CPU: compile keeps checkpoint keys clean, channels_last, flags, placement."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import CompiledWatch
from surge.strategies.base import _spans_devices


class Conv(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.head = torch.nn.Linear(4 * 6 * 6, 2)
        self.formats: list[bool] = []

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.formats.append(x.is_contiguous(memory_format=torch.channels_last))
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 2, (32,), generator=g)),
        batch_size=8,
    )


def _trainer(tmp_path, **kw) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **kw,
    )


def test_compile_trains_and_keeps_checkpoint_keys_clean(tmp_path):
    torch._dynamo.reset()
    model = Conv()
    eager = Conv()
    eager.load_state_dict(model.state_dict())
    watch = CompiledWatch()
    trainer = _trainer(tmp_path, max_steps=4, compile=True, callbacks=[watch])
    trainer.fit(model, _data())
    _trainer(tmp_path / "eager", max_steps=4).fit(eager, _data())
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
    keys = list(torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)["state_dict"])
    assert keys == list(Conv().state_dict())
    assert watch.compiled == {""}  # the module's own call ran compiled during the fit
    assert not [name for name, m in model.named_modules() if "_compiled_call_impl" in vars(m)]  # not after


def test_compile_rejects_unknown_options():
    with pytest.raises(ValueError, match="compile"):
        surge.Trainer(compile={"modee": "max-autotune"})


def test_channels_last_converts_the_module_and_image_batches(tmp_path):
    model = Conv()
    _trainer(tmp_path, max_steps=2, channels_last=True, enable_checkpointing=False).fit(model, _data())
    assert model.formats == [True, True]
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_backend_flags_are_set(tmp_path):
    before = torch.get_float32_matmul_precision()
    try:
        _trainer(
            tmp_path, max_steps=1, matmul_precision="high", benchmark=True, enable_checkpointing=False
        ).fit(Conv(), _data())
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cudnn.benchmark = False


@pytest.mark.parametrize(
    ("arg", "value"), [("matmul_precision", "low"), ("benchmark", "yes"), ("channels_last", 1)]
)
def test_speed_options_are_validated(arg, value):
    with pytest.raises(surge.SurgeError, match=arg):
        surge.Trainer(**{arg: value})


class TwoDevices(surge.Module):
    """Parameters placed by the user on two devices (here cpu and meta, to test the decision only)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(2, 2)
        self.decoder = torch.nn.Linear(2, 2, device="meta")


def test_a_model_spread_over_devices_is_left_where_the_user_put_it():
    model = TwoDevices()
    assert _spans_devices(model)
    surge.strategies.SingleDeviceStrategy().setup_module(model)
    assert model.decoder.weight.device.type == "meta" and model.encoder.weight.device.type == "cpu"
    assert not _spans_devices(torch.nn.Linear(2, 2))


def test_pin_memory_is_turned_on_for_cuda_loaders_only():
    from surge.data.loader_prep import prepare_loader

    assert prepare_loader(_data(), pin_memory=True).pin_memory is True
    assert prepare_loader(_data(), pin_memory=False).pin_memory is False
