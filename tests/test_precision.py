"""Precision plugins on CPU: bf16/fp16 autocast really run, fp16 loss scaling skips bad steps."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.precision import HalfPrecision, MixedPrecision

FP16_CPU = MixedPrecision(
    torch.float16, "cpu"
)  # "16-mixed" on the CPU is bf16 (as Lightning); the plugin is fp16


def _trainer(tmp_path, **kw) -> surge.Trainer:
    base = dict(
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
    )
    return surge.Trainer(**{**base, **kw})


@pytest.mark.parametrize(
    ("given", "name", "cls"),
    [
        (16, "bf16-mixed", MixedPrecision),  # fp16 autocast on the CPU: bf16, with a warning (as Lightning)
        ("16", "bf16-mixed", MixedPrecision),
        ("bf16", "bf16-mixed", MixedPrecision),
        ("bf16-mixed", "bf16-mixed", MixedPrecision),
        ("16-true", "16-true", HalfPrecision),
        ("bf16-true", "bf16-true", HalfPrecision),
        (32, "32-true", surge.precision.FullPrecision),
        (64, "64-true", surge.precision.DoublePrecision),
    ],
)
def test_precision_names_and_aliases(given, name, cls):
    plugin = surge.Trainer(precision=given, logger=False, accelerator="cpu").precision_plugin
    assert isinstance(plugin, cls) and plugin.name == name


class Probe(surge.Module):
    """Records the dtypes the step saw."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.seen: dict[str, torch.dtype] = {}

    def training_step(self, batch, batch_idx):
        (x,) = batch
        out = self.lin(x)
        self.seen.update(
            input=x.dtype, output=out.dtype, param=self.lin.weight.dtype, created=torch.zeros(1).dtype
        )
        return out.float().pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize(
    ("precision", "param", "output", "created"),
    [
        ("bf16-mixed", torch.float32, torch.bfloat16, torch.float32),
        (FP16_CPU, torch.float32, torch.float16, torch.float32),
        ("bf16-true", torch.bfloat16, torch.bfloat16, torch.bfloat16),
        ("64-true", torch.float64, torch.float64, torch.float64),  # as Lightning: made in the step, float64
    ],
)
def test_each_mode_runs_the_step_in_its_dtypes(tmp_path, precision, param, output, created):
    model = Probe()
    _trainer(tmp_path, precision=precision, max_steps=2).fit(
        model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    )
    assert (
        model.seen["param"] == param and model.seen["output"] == output and model.seen["created"] == created
    )
    assert torch.get_default_dtype() == torch.float32  # restored after the step


class Overflow(surge.Module):
    """Inputs large enough that fp16 gradients overflow at the initial loss scale (65536)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.lin(x).float().pow(2).mean() * 1e-3

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _overflow_data() -> DataLoader:
    return DataLoader(TensorDataset(torch.full((64, 16), 300.0)), batch_size=8)


def test_fp16_skips_overflowing_steps_and_backs_off_the_scale(tmp_path):
    model = Overflow()
    trainer = _trainer(tmp_path, precision=MixedPrecision(torch.float16, "cpu"), max_epochs=1)
    trainer.fit(model, _overflow_data())
    plugin = trainer.precision_plugin
    assert plugin.skipped_steps >= 1
    assert plugin.loss_scale < 65536.0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert trainer.global_step == 8
    # the scheduler advanced only on the steps that were taken
    taken = 8 - plugin.skipped_steps
    assert model.lrs[-1] == pytest.approx(1e-6 / (1 + taken))


def test_fp16_scaler_state_survives_save_and_resume(tmp_path):
    first = _trainer(tmp_path / "a", precision=MixedPrecision(torch.float16, "cpu"), max_steps=6)
    first.fit(Overflow(), _overflow_data())
    saved_scale, saved_skipped = first.precision_plugin.loss_scale, first.precision_plugin.skipped_steps
    ckpt = first.checkpoint_callback.best_model_path
    state = torch.load(ckpt, weights_only=True)
    assert state["precision"]["scaler"]["scale"] == saved_scale
    second = _trainer(tmp_path / "b", precision=MixedPrecision(torch.float16, "cpu"), max_steps=6)
    second.fit(Overflow(), _overflow_data(), ckpt_path=ckpt)  # nothing left to train: only the restore
    assert second.precision_plugin.loss_scale == saved_scale
    assert second.precision_plugin.skipped_steps == saved_skipped


def test_clipping_sees_unscaled_gradients_under_fp16(tmp_path):
    norms: list[float] = []

    class Clipped(Overflow):
        def training_step(self, batch, batch_idx):
            (x,) = batch
            return self.lin(x * 1e-2).float().pow(2).mean()

        def on_before_optimizer_step(self, optimizer):
            norms.append(
                torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.parameters()])).item()
            )

    _trainer(
        tmp_path, precision=MixedPrecision(torch.float16, "cpu"), max_steps=3, gradient_clip_val=1e9
    ).fit(Clipped(), _overflow_data())
    # after unscaling, gradient norms are O(10), not O(scale); an overflowing first step shows inf
    finite = [n for n in norms if n != float("inf")]
    assert finite and max(finite) < 1e3


@pytest.mark.slow
def test_digits_reaches_95_percent_with_bf16_mixed(tmp_path):
    from surge.demo import main

    metrics = main(["--epochs", "6", "--precision", "bf16-mixed", "--root", str(tmp_path)])
    assert metrics["val_acc"] >= 0.95
