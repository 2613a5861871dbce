"""The optimizers `self.optimizers()` hands out (`LightningOptimizer`, in native surge too) and
`manual_backward`: their API, the hooks they run, and what is refused. Lightning's behaviour for the
same calls is checked against Lightning itself in tests/oracle/test_manual_optimization_oracle.py."""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.errors import MisconfigurationError, SurgeTypeError
from surge.lightning.core.optimizer import LightningOptimizer as LightningName
from surge.optim.manual import LightningOptimizer


def _data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)), 4
    )


def _fit(model: surge.Module, ckpt_path=None, **kwargs) -> surge.Trainer:
    base = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                num_sanity_val_steps=0, max_steps=2)  # fmt: skip
    trainer = surge.Trainer(**{**base, **kwargs})
    trainer.fit(model, _data(), ckpt_path=ckpt_path)
    return trainer


class Auto(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.lin(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class Recorder(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_before_backward(self, trainer, module, loss):
        self.calls.append("before_backward")

    def on_after_backward(self, trainer, module):
        self.calls.append("after_backward")

    def on_before_optimizer_step(self, trainer, module, optimizer):
        assert type(optimizer) is torch.optim.SGD  # the torch optimizer, as Lightning passes it
        self.calls.append(f"before_optimizer_step@{trainer.global_step}")


class Closure(Auto):
    """Steps with `opt.step(closure)`, the closure running the forward and `manual_backward`."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.returned: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(self.lin(batch[0]), batch[1])
            self.manual_backward(loss)
            return loss

        self.returned.append(opt.step(closure=closure))


def test_optimizers_are_lightning_optimizers_of_the_optimizers_class_in_both_modes():
    for model in (Auto(), Closure()):
        trainer = _fit(model)
        opt = model.optimizers()
        assert LightningName is LightningOptimizer
        assert isinstance(opt, LightningOptimizer) and isinstance(opt, torch.optim.SGD)
        assert type(opt).__name__ == "LightningSGD"
        assert opt.optimizer is trainer.optimizers[0] is model.optimizers(use_pl_optimizer=False)
        assert opt.param_groups is opt.optimizer.param_groups and opt.state is opt.optimizer.state
        assert opt.defaults["momentum"] == 0.9


def test_attributes_and_methods_act_on_the_wrapped_optimizer():
    model = Auto()
    _fit(model)
    opt = model.optimizers()
    bare = opt.optimizer
    opt.custom_flag = 1  # written on the optimizer, not on the wrapper
    assert bare.custom_flag == 1
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    saved = opt.state_dict()
    assert saved["state"] and saved == bare.state_dict()
    bare.param_groups[0]["lr"] = 0.5
    opt.load_state_dict(saved)
    assert bare.param_groups[0]["lr"] == 0.1 and "param_groups" not in vars(opt)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})
    assert len(bare.param_groups) == 2
    assert repr(opt).startswith("LightningSGD (")


def test_a_lightning_optimizer_outside_a_fit_steps_its_optimizer():
    param = torch.nn.Parameter(torch.ones(2))
    opt = LightningOptimizer(torch.optim.SGD([param], lr=0.5))
    assert LightningOptimizer(opt).optimizer is opt.optimizer  # a wrapper is not wrapped twice
    param.grad = torch.ones(2)
    opt.step()
    assert torch.equal(param.detach(), torch.full((2,), 0.5))
    with pytest.raises(SurgeTypeError, match="needs a torch.optim.Optimizer"):
        LightningOptimizer(object())
    with pytest.raises(MisconfigurationError, match="the closure must be callable"):
        opt.step(closure=1)


def test_step_with_a_closure_runs_the_hooks_after_it_and_returns_its_loss():
    model, recorder = Closure(), Recorder()
    trainer = _fit(model, callbacks=[recorder])
    assert trainer.global_step == 2
    assert recorder.calls == [
        "before_backward", "after_backward", "before_optimizer_step@0",
        "before_backward", "after_backward", "before_optimizer_step@1",
    ]  # fmt: skip
    assert all(isinstance(loss, torch.Tensor) and loss.ndim == 0 for loss in model.returned)


class Toggling(Auto):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.other = torch.nn.Linear(4, 2)
        self.seen: list[tuple[bool, bool]] = []

    def training_step(self, batch, batch_idx):
        opt_a, opt_b = self.optimizers()
        with opt_a.toggle_model(sync_grad=False):
            self.seen.append((self.lin.weight.requires_grad, self.other.weight.requires_grad))
            loss = F.cross_entropy(self.lin(batch[0]) + self.other(batch[0]), batch[1])
            self.manual_backward(loss)
        assert self.other.weight.grad is None  # toggled off: no gradient computed
        opt_a.step()
        opt_a.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.lin.parameters(), lr=0.1), torch.optim.SGD(
            self.other.parameters(), lr=0.1
        )


def test_toggle_model_freezes_the_other_optimizers_parameters_inside_the_block():
    model = Toggling()
    trainer = _fit(model)
    assert model.seen == [(True, False), (True, False)] and trainer.global_step == 2
    assert model.other.weight.requires_grad  # given back after the block


class BackwardInAutomatic(Auto):
    def training_step(self, batch, batch_idx):
        self.manual_backward(super().training_step(batch, batch_idx))


def test_manual_backward_under_automatic_optimization_is_refused():
    with pytest.raises(MisconfigurationError, match=r"manual_backward\(\) is for manual optimization"):
        _fit(BackwardInAutomatic())


class Norms(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer, module, optimizer):
        grads = [p.grad.float() for g in optimizer.param_groups for p in g["params"]]
        self.norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())


@pytest.mark.parametrize("closure", [False, True])
def test_fp16_loss_scaling_hooks_see_true_scale_gradients(closure):
    """The loss scaler multiplies the loss by 65536 at first: the hook gets the unscaled gradients."""

    class Model(Closure):
        def training_step(self, batch, batch_idx):
            if closure:
                return super().training_step(batch, batch_idx)
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(F.cross_entropy(self.lin(batch[0]), batch[1]))
            opt.step()

    runs = []
    for precision in ("32-true", surge.precision.MixedPrecision(torch.float16, "cpu")):
        torch.manual_seed(0)
        norms = Norms()
        _fit(Model(), precision=precision, accelerator="cpu", callbacks=[norms], max_steps=1)
        runs.append(norms.norms)
    assert len(runs[1]) == 1 and runs[1][0] == pytest.approx(runs[0][0], rel=1e-2)


def test_manual_step_metrics_are_logged_per_batch_and_the_count_resumes(tmp_path):
    class Logged(Closure):
        def training_step(self, batch, batch_idx):
            super().training_step(batch, batch_idx)
            self.log("returned", self.returned[-1])

    logger = surge.loggers.CSVLogger(tmp_path, name="logs", version=0)
    trainer = _fit(Logged(), max_steps=-1, max_epochs=2, logger=logger, log_every_n_steps=2)
    assert trainer.global_step == trainer.fit_loop.manual_batches == 8
    with open(tmp_path / "logs" / "version_0" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if not r.get("goodput/wall_s")]  # goodput's row: fit end
    steps = [int(r["step"]) for r in rows]
    assert steps == [2, 4, 6, 8]
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    resumed = _fit(Logged(), max_steps=-1, max_epochs=3, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.fit_loop.manual_batches == 12 and resumed.global_step == 12
