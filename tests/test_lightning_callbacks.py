"""Lightning's callbacks on surge, checked against Lightning's documented semantics: SWA and
backbone finetuning against the same training written by hand in plain PyTorch."""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader

import surge
from helpers import FAST_DEFAULTS, TinyModel, fast_trainer, make_dataset
from surge.callbacks import (
    BackboneFinetuning,
    BatchSizeFinder,
    DeviceStatsMonitor,
    GradientAccumulationScheduler,
    LearningRateFinder,
    OnExceptionCheckpoint,
    RichProgressBar,
    StochasticWeightAveraging,
    Timer,
)
from surge.errors import MisconfigurationError, SurgeError


def loader(n: int = 32, batch_size: int = 8) -> DataLoader:
    return DataLoader(make_dataset(n), batch_size=batch_size)


class BNModel(surge.Module):
    """Linear -> BatchNorm -> ReLU -> Linear, plain SGD: a model whose SWA needs a BatchNorm pass."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


# -- StochasticWeightAveraging ---------------------------------------------------------------


def swa_by_hand(
    model: nn.Module, data: DataLoader, epochs: int, swa_start: int, swa_lr: float, anneal: int
) -> nn.Module:
    """Lightning's SWA in plain PyTorch: from epoch `swa_start` (0-based) SWALR replaces the rate and
    the weights at the start of each epoch join the average; at the end the module takes the
    average and BatchNorm statistics are recomputed over the training data."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    averaged = AveragedModel(model)
    scheduler = None
    for epoch in range(epochs):
        if epoch >= swa_start:
            if scheduler is None:
                for group in opt.param_groups:
                    group["initial_lr"] = swa_lr
                scheduler = SWALR(
                    opt, swa_lr=swa_lr, anneal_epochs=anneal, anneal_strategy="cos", last_epoch=epochs
                )
            averaged.update_parameters(model)
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        if scheduler is not None:
            scheduler.step()
    update_bn(data, averaged)
    return averaged.module


def test_swa_matches_the_same_averaging_by_hand():
    torch.manual_seed(0)
    model = BNModel()
    reference = swa_by_hand(copy.deepcopy(model), loader(), epochs=5, swa_start=2, swa_lr=0.05, anneal=2)
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3, annealing_epochs=2)
    fast_trainer(max_epochs=5, callbacks=[swa]).fit(model, loader())
    assert swa.swa_start == 2 and swa.swa_end == 4 and int(swa.n_averaged) == 3
    got, want = model.state_dict(), reference.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        assert torch.allclose(got[name].float(), want[name].float(), atol=1e-6), name
    assert model.net[1].momentum == 0.1  # restored after the BatchNorm pass


def test_swa_replaces_the_scheduler_and_takes_a_fraction_of_max_epochs():
    torch.manual_seed(0)
    model = TinyModel(scheduler="step_epoch")
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=0.5, annealing_epochs=1)
    trainer = fast_trainer(max_epochs=4, callbacks=[swa])
    trainer.fit(model, loader())
    assert swa.swa_start == 1  # int(4 * 0.5) = 2, counted from 1
    assert type(trainer.lr_scheduler_configs[0].scheduler).__name__ == "SWALR"
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"swa_lrs": -0.1}, "swa_lrs"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "annealing_strategy": "step"}, "annealing_strategy"),
        ({"swa_lrs": 0.1, "avg_fn": 3}, "avg_fn"),
    ],
)
def test_swa_refuses_bad_arguments(kwargs, named):
    with pytest.raises(SurgeError, match=named):
        StochasticWeightAveraging(**kwargs)


# -- BackboneFinetuning ----------------------------------------------------------------------


class BackboneModel(surge.Module):
    """A backbone and a head; the optimizer holds only what requires grad (Lightning's recipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1, momentum=0.9)


def finetune_by_hand(
    model: BackboneModel, data: DataLoader, epochs: int, unfreeze_at: int, clip: float | None = None
) -> list[float]:
    """Lightning's BackboneFinetuning schedule in plain PyTorch; the backbone's rate per epoch."""
    for p in model.backbone.parameters():
        p.requires_grad = False
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1, momentum=0.9)
    backbone_lr, rates = 0.0, []
    for epoch in range(epochs):
        if epoch == unfreeze_at:
            for p in model.backbone.parameters():
                p.requires_grad = True
            backbone_lr = 0.1 * 0.1  # the head's rate x backbone_initial_ratio_lr
            opt.add_param_group({"params": list(model.backbone.parameters()), "lr": backbone_lr})
        elif epoch > unfreeze_at:
            backbone_lr = min(2.0 * backbone_lr, 0.1)  # lambda_func = x2, aligned to the head's rate
            opt.param_groups[-1]["lr"] = backbone_lr
        rates.append(backbone_lr)
        for x, y in data:
            F.cross_entropy(model(x), y).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], clip)
            opt.step()
            opt.zero_grad()
    return rates


def test_backbone_finetuning_matches_the_schedule_by_hand():
    torch.manual_seed(0)
    model = BackboneModel()
    reference = copy.deepcopy(model)
    rates = finetune_by_hand(reference, loader(), epochs=5, unfreeze_at=1)
    assert rates == pytest.approx([0.0, 0.01, 0.02, 0.04, 0.08])
    seen: list[float] = []

    class Watch(surge.callbacks.Callback):
        def on_train_epoch_end(self, trainer, module):
            groups = trainer.optimizers[0].param_groups
            seen.append(groups[1]["lr"] if len(groups) > 1 else 0.0)

    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    trainer = fast_trainer(max_epochs=5, callbacks=[finetuning, Watch()])
    trainer.fit(model, loader())
    assert seen == pytest.approx(rates)
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.allclose(got, want, atol=1e-6), name
    assert finetuning.previous_backbone_lr == pytest.approx(0.08)


def test_gradient_clipping_covers_the_param_groups_finetuning_adds():
    torch.manual_seed(0)
    model = BackboneModel()
    reference = copy.deepcopy(model)
    finetune_by_hand(reference, loader(), epochs=3, unfreeze_at=1, clip=0.05)
    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    fast_trainer(max_epochs=3, callbacks=[finetuning], gradient_clip_val=0.05).fit(model, loader())
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.allclose(got, want, atol=1e-6), name


def test_backbone_finetuning_needs_a_backbone():
    with pytest.raises(MisconfigurationError, match="backbone"):
        fast_trainer(callbacks=[BackboneFinetuning()]).fit(TinyModel(), loader())


# -- GradientAccumulationScheduler -----------------------------------------------------------


class CountSteps(surge.callbacks.Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.start = 0

    def on_train_epoch_start(self, trainer, module):
        self.start = trainer.global_step

    def on_train_epoch_end(self, trainer, module):
        self.steps.append(trainer.global_step - self.start)


def test_accumulation_scheduler_sets_the_optimizer_steps_per_epoch():
    # 10 batches per epoch; Lightning steps at each window's end and at the epoch's last batch.
    counts = CountSteps()
    scheduler = GradientAccumulationScheduler({1: 2, 3: 4})
    fast_trainer(max_epochs=4, callbacks=[scheduler, counts]).fit(TinyModel(), loader(n=40, batch_size=4))
    assert scheduler.scheduling == {0: 1, 1: 2, 3: 4}
    assert counts.steps == [10, 5, 5, 3]


def test_accumulation_scheduler_steps_like_one_big_batch():
    # factor 2 on batches of 4 = factor 1 on batches of 8, for the mean loss
    torch.manual_seed(0)
    a = TinyModel()
    b = copy.deepcopy(a)
    fast_trainer(max_epochs=2, callbacks=[GradientAccumulationScheduler({1: 2})]).fit(
        a, loader(n=16, batch_size=4)
    )
    by_hand = torch.optim.SGD(b.parameters(), lr=0.1)
    for batch_size in (4, 8):
        for x, y in loader(n=16, batch_size=batch_size):
            F.cross_entropy(b(x), y).backward()
            by_hand.step()
            by_hand.zero_grad()
    for got, want in zip(a.parameters(), b.parameters()):
        assert torch.allclose(got, want, atol=1e-6)


def test_accumulation_scheduler_refuses_a_trainer_accumulation_and_bad_schedules():
    with pytest.raises(MisconfigurationError, match="accumulate_grad_batches"):
        trainer = fast_trainer(accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({1: 2})])
        trainer.fit(TinyModel(), loader())
    with pytest.raises(MisconfigurationError, match="factors"):
        GradientAccumulationScheduler({0: 0})
    with pytest.raises(MisconfigurationError, match="epochs"):
        GradientAccumulationScheduler({-1: 2})
    with pytest.raises(SurgeError, match="scheduling"):
        GradientAccumulationScheduler({})


# -- Timer -----------------------------------------------------------------------------------


class Slow(TinyModel):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        import time

        time.sleep(0.02)
        return super().training_step(batch, batch_idx)


def test_timer_stops_training_when_the_time_is_spent():
    timer = Timer(duration={"seconds": 0.1})
    trainer = fast_trainer(max_epochs=100, callbacks=[timer])
    trainer.fit(Slow(), loader(n=64, batch_size=4))
    assert trainer.should_stop
    assert 0 < trainer.global_step < 16  # stopped inside the first epoch (16 batches)
    assert 0.1 <= timer.time_elapsed("train") < 5
    assert timer.time_remaining() <= 0


def test_timer_epoch_interval_and_restored_offset():
    timer = Timer(duration="00:00:00:01", interval="epoch")
    timer.load_state_dict({"time_elapsed": {"train": 2.0}})  # a resumed run already spent its time
    trainer = fast_trainer(max_epochs=5, callbacks=[timer])
    trainer.fit(TinyModel(), loader())
    assert trainer.current_epoch == 0 and trainer.global_step == 0  # stopped before any work
    assert timer.state_dict()["time_elapsed"]["train"] >= 2.0


@pytest.mark.parametrize(
    ("kwargs", "named"), [({"duration": "1:00"}, "duration"), ({"interval": "batch"}, "interval")]
)
def test_timer_refuses_bad_arguments(kwargs, named):
    with pytest.raises(MisconfigurationError, match=named):
        Timer(**kwargs)


# -- OnExceptionCheckpoint -------------------------------------------------------------------


class FailsAt(TinyModel):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.at:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_on_exception_checkpoint_writes_a_loadable_checkpoint(tmp_path):
    model = FailsAt(at=6)
    cb = OnExceptionCheckpoint(dirpath=tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match="boom"):
        fast_trainer(max_epochs=3, callbacks=[cb]).fit(model, loader())
    assert cb.ckpt_path == str(tmp_path / "ckpt" / "on_exception.ckpt")
    restored = FailsAt.load_from_checkpoint(cb.ckpt_path, at=-1)
    for got, want in zip(restored.parameters(), model.parameters()):
        assert torch.equal(got, want)
    resumed = fast_trainer(max_epochs=3)
    resumed.fit(FailsAt(at=-1), loader(), ckpt_path=cb.ckpt_path)  # resumes from step 6
    assert resumed.global_step == 12


def test_on_exception_checkpoint_is_removed_after_a_fit_that_ends_well(tmp_path):
    cb = OnExceptionCheckpoint(dirpath=tmp_path, filename="crash")
    (tmp_path / "crash.ckpt").write_bytes(b"left over")
    fast_trainer(callbacks=[cb]).fit(TinyModel(), loader())
    assert not (tmp_path / "crash.ckpt").exists()


# -- LearningRateFinder and BatchSizeFinder --------------------------------------------------


def test_learning_rate_finder_applies_its_suggestion():
    torch.manual_seed(0)
    model = TinyModel(lr=0.5)
    finder = LearningRateFinder(min_lr=1e-4, max_lr=1.0, num_training_steps=20, early_stop_threshold=None)
    seen: list[float] = []

    class Watch(surge.callbacks.Callback):
        def on_train_start(self, trainer, module):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    fast_trainer(max_epochs=5, callbacks=[finder, Watch()]).fit(model, loader())  # 5 epochs of 4 batches
    suggestion = finder.optimal_lr.suggestion()
    assert suggestion is not None and len(finder.optimal_lr.lrs) == 20
    assert model.lr == suggestion and seen == [suggestion]  # the module's attribute and the optimizer


def test_learning_rate_finder_stays_within_the_fit_epochs():
    # as Lightning's: the range test is the fit's first steps, so its epochs (limit_train_batches x
    # max_epochs) bound it below num_training_steps, and each epoch restarts the loader
    seen: list[float] = []

    class Counting(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            seen.append(float(batch[0].sum()))  # which batch it is
            return super().training_step(batch, batch_idx)

    finder = LearningRateFinder(num_training_steps=50, early_stop_threshold=None)
    trainer = fast_trainer(max_epochs=3, limit_train_batches=2, callbacks=[finder])
    trainer.fit(Counting(lr=0.1), loader())
    first, second = seen[0], seen[1]
    assert len(finder.optimal_lr.lrs) == 6 and seen[:6] == [first, second] * 3 and first != second


def test_learning_rate_finder_needs_an_attribute_to_update():
    class NoLr(BNModel):
        def __init__(self) -> None:
            super().__init__()
            del self.lr

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(AttributeError, match="attr_name"):
        fast_trainer(callbacks=[LearningRateFinder(num_training_steps=5)]).fit(NoLr(), loader())
    with pytest.raises(MisconfigurationError, match="mode"):
        LearningRateFinder(mode="cosine")


class HookModel(TinyModel):
    """Builds its own train loader from `self.batch_size`, as the finder expects."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.batch_size = 2
        self.n = n
        self.loader_sizes: list[int] = []

    def train_dataloader(self) -> DataLoader:
        self.loader_sizes.append(self.batch_size)
        return DataLoader(make_dataset(self.n), batch_size=self.batch_size)


# As Lightning's: doubling stops at the first size that reaches the dataset's length (64 >= 48);
# binsearch then takes Lightning's default margin of 5%: int(64 * 0.95) = 60.
@pytest.mark.parametrize(("mode", "expected"), [("power", 64), ("binsearch", 60)])
def test_batch_size_finder_sets_the_attribute_and_rebuilds_the_loader(mode, expected):
    model = HookModel(n=48)  # on the CPU a tiny model fits any batch: the dataset's length caps it
    finder = BatchSizeFinder(mode=mode, steps_per_trial=1)
    trainer = fast_trainer(callbacks=[finder])
    trainer.fit(model)
    assert finder.optimal_batch_size == expected and model.batch_size == expected
    assert model.loader_sizes == [2, expected]  # train_dataloader() called again with the result
    assert trainer.train_dataloader.batch_size == expected
    assert trainer.num_training_batches == -(-48 // expected)


def test_batch_size_finder_refuses_loaders_passed_to_fit_and_a_missing_attribute():
    with pytest.raises(MisconfigurationError, match="train_dataloader"):
        fast_trainer(callbacks=[BatchSizeFinder()]).fit(HookModel(n=8), loader())
    with pytest.raises(MisconfigurationError, match="batch_arg_name='bs'"):
        fast_trainer(callbacks=[BatchSizeFinder(batch_arg_name="bs")]).fit(HookModel(n=8))


# -- DeviceStatsMonitor and RichProgressBar ---------------------------------------------------


def test_device_stats_monitor_logs_at_log_intervals(tmp_path):
    from surge.loggers import CSVLogger

    pytest.importorskip("psutil")
    logger = CSVLogger(tmp_path)
    trainer = fast_trainer(max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[DeviceStatsMonitor()])
    # 10 steps: the batches whose step count (steps before them, plus one) is even log, at the steps
    # before them (Lightning's points: 1, 3, ..., 9)
    trainer.fit(TinyModel(), loader(n=40, batch_size=4))
    logger.save()
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    key = "DeviceStatsMonitor.on_train_batch_end/cpu_percent"
    steps = sorted({int(r["step"]) for r in rows if r.get(key)})
    assert steps == [1, 3, 5, 7, 9]
    # to the loggers only, as Lightning's: neither callback_metrics nor logged_metrics hold them
    assert not [
        k for k in {**trainer.callback_metrics, **trainer.logged_metrics} if k.startswith("DeviceStats")
    ]


def test_rich_progress_bar_draws_with_rich_or_names_the_install():
    try:
        import rich  # noqa: F401
    except ImportError:
        with pytest.raises(MisconfigurationError, match="pip install rich"):
            RichProgressBar()
        return
    import io

    from rich.console import Console  # noqa: F401

    out = io.StringIO()
    bar = RichProgressBar(leave=True, console_kwargs={"file": out, "force_terminal": True, "width": 120})
    trainer = surge.Trainer(**{**FAST_DEFAULTS, "enable_progress_bar": True, "callbacks": [bar]})
    trainer.fit(TinyModel(), loader())
    assert trainer.progress_bar_callback is bar
    assert "Epoch 0" in out.getvalue()
