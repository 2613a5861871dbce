"""Lightning's Trainer arguments, trainer attributes, manual optimization and Module helpers, with
the values Lightning's documented semantics give (Lightning itself is not needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
import surge.callbacks


def _data(n: int = 16, batch_size: int = 4, shuffle: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle, generator=g)


def _trainer(tmp_path, **kwargs) -> surge.Trainer:
    base = dict(default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                logger=False, enable_checkpointing=False, num_sanity_val_steps=0)  # fmt: skip
    return surge.Trainer(**{**base, **kwargs})


class GAN(surge.Module):
    """Two optimizers stepped by hand every batch; a scheduler the module steps at each epoch's end."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.gen, self.disc = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
        self.lrs: list[float] = []

    def training_step(self, batch):  # no batch_idx, as Lightning allows
        x, y = batch
        g_opt, d_opt = self.optimizers()
        for opt, net in ((d_opt, self.disc), (g_opt, self.gen)):
            self.toggle_optimizer(opt)
            out = self.disc(self.gen(x)) if net is self.gen else self.disc(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            self.untoggle_optimizer(opt)
        if self.trainer.is_last_batch:
            self.lr_schedulers().step()
            self.lrs.append(g_opt.param_groups[0]["lr"])

    def configure_optimizers(self):
        g = torch.optim.SGD(self.gen.parameters(), lr=0.1)
        d = torch.optim.SGD(self.disc.parameters(), lr=0.1)
        return [g, d], [torch.optim.lr_scheduler.StepLR(g, step_size=1, gamma=0.5)]


def test_manual_optimization_counts_optimizer_steps_and_leaves_schedulers_alone(tmp_path):
    model = GAN()
    trainer = _trainer(tmp_path, max_epochs=4)
    trainer.fit(model, _data(n=100, batch_size=4))  # 25 batches x 4 epochs = 100 batches
    assert trainer.global_step == 200  # two optimizer steps per batch
    # stepped once per epoch by the module only: 0.1 * 0.5**4 (surge stepping it too would give 0.1 * 0.5**8)
    assert model.lrs == pytest.approx([0.05, 0.025, 0.0125, 0.00625])


def test_manual_max_steps_and_checkpoint_names_count_optimizer_steps(tmp_path):
    trainer = _trainer(tmp_path, max_steps=10, enable_checkpointing=True)
    trainer.fit(GAN(), _data(n=100, batch_size=4))
    assert trainer.global_step == 10 and trainer.fit_loop.batches_done == 5
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")] == ["epoch=0-step=10.ckpt"]


def test_toggle_optimizer_freezes_the_other_optimizers_parameters(tmp_path):
    model = GAN()
    trainer = _trainer(tmp_path, max_steps=2)
    trainer.fit(model, _data())
    g_opt, d_opt = model.optimizers()
    model.gen.bias.requires_grad_(False)  # a setting of the user's own is kept through a toggle
    model.toggle_optimizer(d_opt)
    assert not any(p.requires_grad for p in model.gen.parameters())
    assert all(p.requires_grad for p in model.disc.parameters())
    model.untoggle_optimizer(d_opt)
    assert model.gen.weight.requires_grad and not model.gen.bias.requires_grad


class Steps(surge.Module):
    """training_step/validation_step/test_step/predict_step without batch_idx."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.seen: list[torch.Tensor] = []
        self.val_batches = 0

    def training_step(self, batch):
        self.seen.append(batch[0].clone())
        return F.cross_entropy(self.lin(batch[0]), batch[1])

    def validation_step(self, batch):
        self.val_batches += 1
        self.log("val_loss", F.cross_entropy(self.lin(batch[0]), batch[1]))

    def test_step(self, batch):
        self.log("test_loss", F.cross_entropy(self.lin(batch[0]), batch[1]))

    def predict_step(self, batch):
        return self.lin(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_steps_without_batch_idx_run_in_every_stage(tmp_path):
    model = Steps()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(model, _data(), _data())
    assert len(model.seen) == 4 and model.val_batches == 4
    assert "test_loss" in trainer.test(model, _data())[0]
    assert len(trainer.predict(model, _data())) == 4


def test_fast_dev_run_runs_n_batches_and_writes_nothing(tmp_path):
    model = Steps()
    trainer = surge.Trainer(
        default_root_dir=tmp_path, fast_dev_run=2, max_epochs=5, enable_progress_bar=False
    )
    trainer.fit(model, _data(n=40), _data(n=40))
    assert len(model.seen) == 2 and model.val_batches == 2  # 2 train + 2 val batches, no sanity check
    assert trainer.global_step == 2 and trainer.fast_dev_run == 2
    assert (
        trainer.logger is None and trainer.checkpoint_callback.best_model_path == ""
    )  # kept, as Lightning's
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.csv"))
    assert not (tmp_path / "checkpoints").exists()  # its folder not even made
    assert trainer.test(model, _data(n=40)) and trainer.limit_test_batches == 2


def test_fast_dev_run_skips_the_users_own_checkpoint_callback(tmp_path):
    ck = surge.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=1)
    trainer = surge.Trainer(
        default_root_dir=tmp_path, fast_dev_run=True, callbacks=[ck], enable_progress_bar=False
    )
    trainer.fit(Steps(), _data())
    assert trainer.global_step == 1 and not list((tmp_path / "ck").glob("*.ckpt"))


def test_overfit_batches_trains_the_same_batches_every_epoch(tmp_path):
    model = Steps()
    trainer = _trainer(tmp_path, max_epochs=3, overfit_batches=2)
    trainer.fit(model, _data(n=32, shuffle=True), _data(n=32))
    assert len(model.seen) == 6 and model.val_batches == 6  # 2 per epoch, val limited the same
    epochs = [torch.cat(model.seen[i : i + 2]) for i in (0, 2, 4)]
    assert torch.equal(epochs[0], epochs[1]) and torch.equal(epochs[0], epochs[2])
    x = _data(n=32).dataset.tensors[0]
    assert torch.equal(epochs[0], x[:8])  # the first batches, in order: shuffling is off
    assert trainer.limit_train_batches == trainer.limit_val_batches == 2


class Slow(Steps):
    def training_step(self, batch):
        import time

        time.sleep(0.02)
        return super().training_step(batch)


def test_max_time_stops_at_a_step_boundary_and_checkpoints(tmp_path):
    model = Slow()
    trainer = _trainer(tmp_path, max_time={"seconds": 0.2}, enable_checkpointing=True)
    trainer.fit(model, _data(n=400, batch_size=4))
    assert trainer.max_epochs == -1 and trainer.max_time == timedelta(seconds=0.2)
    assert 5 <= trainer.global_step < 60  # stopped early, far before the 100 batches of an epoch
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")] == [
        f"epoch=0-step={trainer.global_step}.ckpt"
    ]


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("00:01:30:05", 5405), ({"minutes": 2}, 120), (timedelta(hours=1), 3600)],
)
def test_max_time_forms(tmp_path, given, seconds):
    assert _trainer(tmp_path, max_time=given).max_time == timedelta(seconds=seconds)


class Anomaly(Steps):
    def training_step(self, batch):
        return (self.lin(batch[0]) * 0).sqrt().sum()  # sqrt'(0) = inf: backward gives NaN


def test_detect_anomaly_stops_at_the_backward_that_made_nan(tmp_path):
    with pytest.raises(RuntimeError, match="returned nan values"):
        _trainer(tmp_path, max_steps=1, detect_anomaly=True).fit(Anomaly(), _data())
    assert not torch.is_anomaly_enabled()


def test_module_helpers(tmp_path):
    model = Steps()
    assert model.logger is None and model.loggers == [] and not model.on_gpu
    model.freeze()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    model.unfreeze()
    assert model.training and all(p.requires_grad for p in model.parameters())
    trainer = surge.Trainer(default_root_dir=tmp_path, max_steps=1, enable_progress_bar=False)
    trainer.fit(model, _data())
    assert model.logger is trainer.logger and model.loggers == trainer.loggers
    # max_steps stopped inside epoch 0: it counts as done, as in Lightning
    assert model.global_rank == 0 and model.local_rank == 0 and model.current_epoch == 1


def test_clip_gradients_by_norm_and_value(tmp_path):
    model = Steps()
    _trainer(tmp_path, max_steps=1).fit(model, _data())
    opt = model.optimizers()
    model.lin.weight.grad = torch.full_like(model.lin.weight, 3.0)
    model.lin.bias.grad = torch.full_like(model.lin.bias, -3.0)
    model.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="value")
    assert model.lin.weight.grad.max() == 0.5 and model.lin.bias.grad.min() == -0.5
    model.clip_gradients(opt, gradient_clip_val=1.0)  # norm by default
    norm = torch.cat([model.lin.weight.grad.flatten(), model.lin.bias.grad]).norm()
    assert norm == pytest.approx(1.0, rel=1e-4)
    model.clip_gradients(opt)  # no value: nothing clipped
    assert norm == pytest.approx(1.0, rel=1e-4)


class Flags(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def _note(self, trainer, where):
        self.seen.append(
            (where, trainer.training, trainer.validating, trainer.fitting, trainer.sanity_checking)
        )

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append(("batch_end", batch_idx, trainer.is_last_batch))

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.append(("batch_start", batch_idx, trainer.is_last_batch))

    def on_validation_start(self, trainer, module):
        self._note(trainer, "val")

    def on_train_start(self, trainer, module):
        self._note(trainer, "train")

    def on_test_start(self, trainer, module):
        self.seen.append(("test", trainer.testing, trainer.fitting, trainer.evaluating))


def test_trainer_attributes_as_lightning_names_them(tmp_path):
    flags = Flags()
    trainer = _trainer(
        tmp_path, max_epochs=1, callbacks=[flags], num_sanity_val_steps=1, gradient_clip_val=0.5,
        gradient_clip_algorithm="value", val_check_interval=2, limit_val_batches=0.5, precision="bf16-mixed",
    )  # fmt: skip
    assert trainer.precision == "bf16-mixed" and trainer.gradient_clip_val == 0.5
    assert trainer.gradient_clip_algorithm == "value" and trainer.val_check_interval == 2
    assert trainer.check_val_every_n_epoch == 1 and trainer.num_sanity_val_steps == 1
    assert trainer.limit_val_batches == 0.5 and trainer.limit_train_batches == 1.0
    assert trainer.num_nodes == 1 and trainer.num_devices == 1 and trainer.device_ids == [0]
    assert trainer.min_epochs == 0 and trainer.max_time is None and trainer.overfit_batches == 0
    assert trainer.ckpt_path is None and not trainer.interrupted and not trainer.received_sigterm
    model = Steps()
    trainer.fit(model, _data(), _data())
    ends = [s for s in flags.seen if s[0] == "batch_end"]
    assert ends == [
        ("batch_end", 0, False),
        ("batch_end", 1, False),
        ("batch_end", 2, False),
        ("batch_end", 3, True),
    ]
    starts = [s for s in flags.seen if s[0] == "batch_start"]
    assert [s[2] for s in starts] == [False, False, False, True]
    # (where, training, validating, fitting, sanity_checking)
    notes = [s for s in flags.seen if s[0] in ("val", "train")]
    assert notes[0] == ("val", False, False, True, True)  # the sanity check
    assert notes[1] == ("train", True, False, True, False)
    assert notes[2] == ("val", False, True, True, False)  # validation inside fit
    trainer.test(model, _data())
    assert flags.seen[-1] == ("test", True, False, True)
    assert not trainer.testing and trainer.state.finished and trainer.state.fn == "test"
