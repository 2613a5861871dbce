"""Every argument of Lightning 2.x's `Trainer.__init__` is taken by surge's Trainer, and each is
either honoured or refused by name before any work: none is accepted and ignored."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.arguments.lightning import check_sync_batchnorm

# Lightning 2.x's documented Trainer arguments (lightning.pytorch.Trainer.__init__), as data.
LIGHTNING_TRAINER_ARGS = [
    "accelerator",
    "strategy",
    "devices",
    "num_nodes",
    "precision",
    "logger",
    "callbacks",
    "fast_dev_run",
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "max_time",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
    "val_check_interval",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "log_every_n_steps",
    "enable_checkpointing",
    "enable_progress_bar",
    "enable_model_summary",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
    "benchmark",
    "inference_mode",
    "use_distributed_sampler",
    "profiler",
    "detect_anomaly",
    "barebones",
    "plugins",
    "sync_batchnorm",
    "reload_dataloaders_every_n_epochs",
    "default_root_dir",
    "model_registry",
]

# The ones surge refuses unless left at Lightning's default, with the value that is refused.
REFUSED = {
    "model_registry": "my-model",
}


def test_surge_takes_every_lightning_trainer_argument_with_lightnings_default():
    params = inspect.signature(surge.Trainer.__init__).parameters
    missing = [name for name in LIGHTNING_TRAINER_ARGS if name not in params]
    assert not missing, f"Lightning Trainer arguments surge does not take: {missing}"
    assert params["inference_mode"].default is True and params["min_steps"].default is None
    assert params["sync_batchnorm"].default is False and params["barebones"].default is False


@pytest.mark.parametrize(("name", "value"), sorted(REFUSED.items()))
def test_an_argument_surge_does_not_honour_is_refused_by_name(name, value):
    with pytest.raises(ValueError) as err:
        surge.Trainer(**{name: value})
    assert name in str(err.value) and "not supported" in str(err.value), str(err.value)


class Recorder(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.inference: list[bool] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        self.inference.append(torch.is_inference_mode_enabled())
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data(n: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=8
    )


def _trainer(tmp_path, **kwargs) -> surge.Trainer:
    base = dict(default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                logger=False, enable_checkpointing=False, num_sanity_val_steps=0, max_epochs=1)  # fmt: skip
    return surge.Trainer(**{**base, **kwargs})


@pytest.mark.parametrize("inference", [True, False])
def test_inference_mode_chooses_how_evaluation_turns_gradients_off(tmp_path, inference):
    model = Recorder()
    trainer = _trainer(tmp_path, inference_mode=inference)
    trainer.fit(model, _data(), _data(16))
    trainer.validate(model, _data(16))
    assert model.inference == [inference] * 4  # 2 batches inside fit, 2 in validate()


class StopAtOnce(surge.callbacks.Callback):
    def on_train_epoch_end(self, trainer, module):
        trainer.should_stop = True


def test_min_steps_holds_off_early_stopping_until_reached(tmp_path):
    trainer = _trainer(tmp_path, max_epochs=10, min_steps=10, callbacks=[StopAtOnce()])
    trainer.fit(Recorder(), _data())  # 4 steps an epoch: the stop is taken at step 10, inside epoch 2,
    assert trainer.global_step == 10 and trainer.current_epoch == 3  # which counts as done (Lightning's)
    unbounded = _trainer(tmp_path, max_epochs=10, callbacks=[StopAtOnce()])
    unbounded.fit(Recorder(), _data())
    assert unbounded.global_step == 4  # without min_steps the first epoch's stop is taken


def test_sync_batchnorm_converts_the_batch_norms_and_is_refused_where_torch_cannot_sync(tmp_path):
    model = Recorder()
    _trainer(tmp_path, sync_batchnorm=True).fit(model, _data())
    assert isinstance(model.net[1], torch.nn.SyncBatchNorm)  # one process: it normalises like BatchNorm
    with pytest.raises(ValueError) as err:
        check_sync_batchnorm(True, "cpu", 2)
    assert "sync_batchnorm=True" in str(err.value) and "CUDA" in str(err.value)
    check_sync_batchnorm(True, "cuda", 2)  # allowed there


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"min_steps": -1}, ["min_steps", "-1"]),
        ({"inference_mode": "yes"}, ["inference_mode", "'yes'"]),
        ({"sync_batchnorm": 1}, ["sync_batchnorm", "1"]),
    ],
)
def test_bad_values_are_named(kwargs, words):
    with pytest.raises(ValueError) as err:
        surge.Trainer(**kwargs)
    assert all(word in str(err.value) for word in words), str(err.value)


@pytest.mark.parametrize(
    ("option", "value"), [("rank_zero_only", True), ("sync_dist_group", object()), ("enable_graph", True)]
)
def test_log_options_surge_does_not_honour_are_refused_by_name(tmp_path, option, value):
    class Logs(Recorder):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("loss", loss, metric_attribute="unused", **{option: value})
            return loss

    with pytest.raises(ValueError) as err:
        _trainer(tmp_path).fit(Logs(), _data())
    assert option in str(err.value) and "'loss'" in str(err.value), str(err.value)


def test_barebones_turns_off_what_costs_speed_and_self_log(tmp_path):
    """As Lightning's `Trainer(barebones=True)`: no checkpoint callback, loggers, progress bar or summary,
    no sanity check, `log_every_n_steps` 0, and `self.log` warns and records nothing."""
    trainer = surge.Trainer(barebones=True, default_root_dir=tmp_path, max_epochs=1)
    assert trainer.barebones is True and trainer.loggers == [] and trainer.checkpoint_callback is None
    assert trainer.num_sanity_val_steps == 0 and trainer.log_every_n_steps == 0
    assert trainer.progress_bar_callback is None
    with pytest.warns(UserWarning, match=r"`self.log\(\)` but `Trainer\(barebones=True\)` is configured"):
        trainer.fit(Recorder(), _data(), _data(16))
    assert trainer.callback_metrics == {} and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("enable_checkpointing", True), ("logger", True), ("log_every_n_steps", 1), ("num_sanity_val_steps", 2),
     ("enable_model_summary", True), ("enable_progress_bar", True), ("fast_dev_run", 1),
     ("detect_anomaly", True), ("profiler", "simple")],
)  # fmt: skip
def test_barebones_refuses_a_feature_asked_for_by_name(name, value):
    with pytest.raises(ValueError, match=rf"barebones=True, {name}=.*disabled in barebones mode"):
        surge.Trainer(barebones=True, **{name: value})
