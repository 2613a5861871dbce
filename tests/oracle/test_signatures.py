"""Every parameter of Lightning's public API, read from real Lightning's signatures (the oracle's
environment), is taken by surge's Lightning names, and surge runs with Lightning's default values:
the Trainer and its entry points, `self.log`/`log_dict`/`save_hyperparameters`,
`LightningDataModule.from_datasets`, every callback of `lightning.pytorch.callbacks` surge provides
(the others are refused by name), and `CSVLogger`/`TensorBoardLogger`."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
from functools import cache
from typing import Any

import pytest
import torch
from oracle_runs import lightning_prints
from torch.utils.data import DataLoader

import surge.lightning as L
from surge.errors import MisconfigurationError
from surge.lightning import callbacks as surge_callbacks
from surge.lightning import loggers as surge_loggers
from surge.lightning import strategies as surge_strategies
from surge.lightning.demos.boring_classes import BoringModel, RandomDataset
from surge.lightning.refuse import LightningNameError
from surge.lightning.tuner import Tuner

NO_DEFAULT = "<required>"
DUMP = """
import inspect, json, warnings
warnings.simplefilter("ignore")
import lightning.pytorch as pl
from lightning.pytorch import callbacks, loggers

targets = {
    "Trainer": pl.Trainer.__init__, "fit": pl.Trainer.fit, "validate": pl.Trainer.validate,
    "test": pl.Trainer.test, "predict": pl.Trainer.predict, "log": pl.LightningModule.log,
    "log_dict": pl.LightningModule.log_dict, "save_hyperparameters": pl.LightningModule.save_hyperparameters,
    "from_datasets": pl.LightningDataModule.from_datasets,
    "CSVLogger": loggers.CSVLogger.__init__, "TensorBoardLogger": loggers.TensorBoardLogger.__init__,
    "Tuner.lr_find": pl.tuner.Tuner.lr_find, "Tuner.scale_batch_size": pl.tuner.Tuner.scale_batch_size,
}
from lightning.pytorch import strategies
targets.update({f"strategies.{n}": getattr(strategies, n).__init__ for n in ("DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy")})
targets.update({f"callbacks.{name}": getattr(callbacks, name).__init__ for name in callbacks.__all__})
out = {}
for key, fn in targets.items():
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        default = "<required>" if p.default is inspect.Parameter.empty else repr(p.default)
        params.append([p.name, p.kind.name, default])
    out[key] = params
print(json.dumps(out))
"""
# The callbacks whose arguments belong to another part of the work (ModelCheckpoint and EarlyStopping):
# expected to fail on this branch until it lands; strict, so a pass is noticed.
# Defaults that are not literals, or name a place: what surge is given instead.
SUBSTITUTE = {
    ("CSVLogger", "save_dir"): "logs",
    ("TensorBoardLogger", "save_dir"): "logs",
    ("callbacks.BackboneFinetuning", "backbone_initial_lr"): None,
}


@cache
def lightning_signatures() -> dict[str, list[list[str]]]:
    return json.loads(lightning_prints(DUMP).strip().splitlines()[-1])


def literal_defaults(key: str) -> dict[str, Any]:
    """Lightning's default of each keyword parameter of `key` that is a literal (or substituted)."""
    found = {}
    for name, kind, default in lightning_signatures()[key]:
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        if (key, name) in SUBSTITUTE:
            found[name] = SUBSTITUTE[(key, name)]
            continue
        if default == NO_DEFAULT:
            continue
        try:
            found[name] = ast.literal_eval(default)
        except (ValueError, SyntaxError):
            continue  # a class or a function as default: its name is checked, not the value
    return found


def defaults_but(key: str, *given: str) -> dict[str, Any]:
    return {k: v for k, v in literal_defaults(key).items() if k not in given}


def surge_target(key: str) -> Any:
    if key.startswith("callbacks."):
        return getattr(surge_callbacks, key.split(".", 1)[1]).__init__
    if key.startswith("strategies."):
        return getattr(surge_strategies, key.split(".", 1)[1]).__init__
    objects = {
        "Trainer": L.Trainer.__init__, "fit": L.Trainer.fit, "validate": L.Trainer.validate,
        "test": L.Trainer.test, "predict": L.Trainer.predict, "log": L.LightningModule.log,
        "log_dict": L.LightningModule.log_dict, "save_hyperparameters": L.LightningModule.save_hyperparameters,
        "from_datasets": L.LightningDataModule.from_datasets, "CSVLogger": surge_loggers.CSVLogger.__init__,
        "TensorBoardLogger": surge_loggers.TensorBoardLogger.__init__, "Tuner.lr_find": Tuner.lr_find,
        "Tuner.scale_batch_size": Tuner.scale_batch_size,
    }  # fmt: skip
    return objects[key]


def provided(key: str) -> bool:
    try:
        surge_target(key)
    except LightningNameError:
        return False
    return True


KEYS = [
    "Trainer", "fit", "validate", "test", "predict", "log", "log_dict", "save_hyperparameters", "from_datasets",
    "CSVLogger", "TensorBoardLogger", "Tuner.lr_find", "Tuner.scale_batch_size",
]  # fmt: skip
STRATEGIES = ["strategies.DDPStrategy", "strategies.FSDPStrategy", "strategies.SingleDeviceStrategy"]
KEYS += STRATEGIES
CALLBACKS = sorted(
    [
        "callbacks." + name
        for name in __import__("surge.lightning.callbacks").lightning.callbacks.LIGHTNING_CALLBACKS
    ]
)


@pytest.mark.parametrize("key", KEYS + CALLBACKS)
def test_surge_takes_every_parameter_lightning_has(key):
    if key not in lightning_signatures():
        pytest.skip(f"{key} is not in this Lightning's lightning.pytorch.callbacks")
    if not provided(key):
        pytest.skip(f"{key} is refused by name (test_unprovided_callbacks_are_refused_by_name)")
    ours = inspect.signature(surge_target(key)).parameters
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
    missing = []
    for name, kind, _ in lightning_signatures()[key]:
        if kind == "VAR_KEYWORD":
            if not var_keyword:
                missing.append(f"**{name}")
        elif kind != "VAR_POSITIONAL" and name not in ours:
            missing.append(name)
    assert not missing, f"{key}: Lightning's parameters surge does not take: {missing}"


@pytest.mark.parametrize("key", STRATEGIES)
def test_strategies_have_lightnings_signature_exactly(key):
    """Names, order, kinds and defaults (by repr: `default_pg_timeout` is torch's timedelta)."""
    ours = [
        [p.name, p.kind.name, NO_DEFAULT if p.default is inspect.Parameter.empty else repr(p.default)]
        for p in inspect.signature(surge_target(key)).parameters.values()
        if p.name != "self"
    ]
    assert ours == lightning_signatures()[key]


def test_unprovided_callbacks_are_refused_by_name():
    refused = [k for k in CALLBACKS if k in lightning_signatures() and not provided(k)]
    for key in refused:
        name = key.split(".", 1)[1]
        with pytest.raises(LightningNameError, match=name):
            getattr(surge_callbacks, name)
    assert set(lightning_signatures()) - set(KEYS) <= set(CALLBACKS), (
        "a Lightning callback missing from the list"
    )


@pytest.mark.parametrize("key", [k for k in CALLBACKS if k != "callbacks.Callback"])
def test_each_callback_builds_with_lightnings_defaults(key, tmp_path):
    if key not in lightning_signatures() or not provided(key):
        pytest.skip(f"{key} is not provided")
    required = [n for n, kind, d in lightning_signatures()[key] if d == NO_DEFAULT and "VAR" not in kind]
    if required:
        pytest.skip(f"{key} has required arguments {required}")
    name = key.split(".", 1)[1]
    if name.startswith("Rich") and importlib.util.find_spec("rich") is None:
        with pytest.raises((ImportError, MisconfigurationError), match="rich"):  # refused, naming the package
            getattr(surge_callbacks, name)(**literal_defaults(key))
        return
    getattr(surge_callbacks, name)(**literal_defaults(key))


@pytest.mark.parametrize("key", ["CSVLogger", "TensorBoardLogger"])
def test_loggers_build_with_lightnings_defaults(key, tmp_path):
    logger = getattr(surge_loggers, key)(**literal_defaults(key))
    assert logger.name == "lightning_logs" and str(logger.version) in ("0", "None")


class Logs(BoringModel):
    """Logs with every default of `self.log`/`log_dict` and saves hyper-parameters with theirs."""

    def __init__(self, size: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters(**literal_defaults("save_hyperparameters"))

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("loss", out["loss"], **literal_defaults("log"))
        self.log_dict({"again": out["loss"]}, **literal_defaults("log_dict"))
        return out

    def validation_step(self, batch, batch_idx):
        self.log("val", self.step(batch), **literal_defaults("log"))

    def test_step(self, batch, batch_idx):
        self.log("metric", self.step(batch), **literal_defaults("log"))


def test_a_run_with_every_lightning_default(tmp_path, capsys):
    # Every Trainer default of Lightning's (None for most), then the stage limits a test can afford.
    trainer = L.Trainer(
        **{**literal_defaults("Trainer"), "default_root_dir": tmp_path},
    )
    assert trainer.min_epochs == 0 and trainer.limit_val_batches == 1.0 and trainer.num_sanity_val_steps == 2
    short = L.Trainer(
        **{**literal_defaults("Trainer"), "default_root_dir": tmp_path, "max_steps": 2, "limit_val_batches": 1,
           "limit_test_batches": 2, "limit_predict_batches": 1, "enable_progress_bar": False},
    )  # fmt: skip
    model = Logs()
    assert model.hparams == {"size": 32}
    short.fit(model, **literal_defaults("fit"))
    assert short.global_step == 2 and short.state.finished and short.state.fn == "fit"
    assert set(short.callback_metrics) >= {"loss", "again"}
    assert (tmp_path / "surge_logs" / "version_0").is_dir()  # outside the mode: surge's name
    capsys.readouterr()
    validated = short.validate(model, **defaults_but("validate", "model"))
    tested = short.test(model, **defaults_but("test", "model"))
    printed = capsys.readouterr().out
    assert "Validate metric" in printed and "Test metric" in printed and "metric" in printed  # verbose=True
    assert set(validated[0]) == {"val"} and set(tested[0]) == {"metric"}
    predictions = short.predict(model, **defaults_but("predict", "model"))
    assert len(predictions) == 1 and predictions[0].shape == (1, 2)  # BoringModel: batches of 1
    dm = L.LightningDataModule.from_datasets(
        RandomDataset(32, 8), **defaults_but("from_datasets", "train_dataset")
    )
    assert len(dm.train_dataloader()) == 8 and isinstance(dm.train_dataloader(), DataLoader)
    assert torch.is_tensor(next(iter(dm.train_dataloader())))
