"""What a user sees of ModelCheckpoint and EarlyStopping beside the training: their state keys,
`dirpath` as given, the errors (and the words users match on) for arguments they refuse, the
`save_last` annotation a CLI parses, then a fit with `save_last="link"`: the files, where
last.ckpt points, the calls to `trainer.save_checkpoint`, `to_yaml`, and a state loaded by a
callback with another dirpath."""

import datetime
import inspect
import os
import re
import warnings
from pathlib import Path
from unittest import mock

import lightning.pytorch as pl
import record
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from regressor import Regressor, loader


class PatientStopping(EarlyStopping):
    pass


record.put(
    "state_keys",
    [
        ModelCheckpoint(monitor="val_loss").state_key,
        ModelCheckpoint(monitor="step", mode="max", every_n_train_steps=5).state_key,
        ModelCheckpoint(train_time_interval=datetime.timedelta(minutes=1)).state_key,
        EarlyStopping(monitor="val_loss", mode="max").state_key,
        PatientStopping(monitor="train_loss").state_key,
    ],
)

for given in ("~/ckpt-dir", Path("~/ckpt-dir"), "./~/ckpt-dir"):
    dirpath = ModelCheckpoint(dirpath=given).dirpath
    record.append(
        "dirpaths", [type(dirpath).__name__, dirpath == os.path.realpath(os.path.expanduser(given))]
    )

REFUSED = [  # (arguments, what users match in the message)
    (dict(save_top_k=-3), r"Must be >= -1"),
    (dict(every_n_epochs=-3), r"Must be >= 0"),
    (dict(every_n_train_steps=-3), r"Must be >= 0"),
    (dict(every_n_train_steps=1, every_n_epochs=2), r"Combination of parameters every_n_train_steps"),
    (dict(train_time_interval=datetime.timedelta(minutes=1), every_n_epochs=2), r"Combination of parameters"),
    (dict(mode="sideways"), r"`mode` can be .* but got sideways"),
    (dict(save_top_k=3), r"ModelCheckpoint\(save_top_k=3, monitor=None\) is not a valid"),
]
for kwargs, words in REFUSED:
    try:
        ModelCheckpoint(**kwargs)
        record.append("refused", [sorted(kwargs), None])
    except MisconfigurationException as err:
        record.append("refused", [sorted(kwargs), bool(re.search(words, str(err)))])
try:
    EarlyStopping(monitor="val_loss", mode="sideways")
except MisconfigurationException as err:
    record.put("early_stopping_mode", bool(re.search(r"`mode` can be .* got sideways", str(err))))

try:
    pl.Trainer(enable_checkpointing=False, callbacks=[ModelCheckpoint()], logger=False)
except MisconfigurationException as err:
    record.put("checkpointing_off", "`enable_checkpointing=False` but found `ModelCheckpoint`" in str(err))

parser = ArgumentParser()
parser.add_argument("--save_last", type=inspect.signature(ModelCheckpoint).parameters["save_last"].annotation)
record.put(
    "save_last_parsed", [parser.parse_args(["--save_last", v]).save_last for v in ("yes", "false", "link")]
)

pl.seed_everything(5)
callback = ModelCheckpoint(
    dirpath="ckpts", monitor="step", mode="max", save_top_k=2, every_n_train_steps=2, save_last="link"
)
trainer = pl.Trainer(
    max_epochs=2, enable_progress_bar=False, enable_model_summary=False, logger=False, callbacks=[callback]
)
with mock.patch.object(trainer, "save_checkpoint", wraps=trainer.save_checkpoint) as save:
    trainer.fit(Regressor(), loader(16, 0), loader(8, 1))
record.put("save_calls", [[Path(c.args[0]).name, *c.args[1:], sorted(c.kwargs)] for c in save.call_args_list])
record.put("files", sorted(p.name for p in Path("ckpts").iterdir()))
last = Path("ckpts/last.ckpt")
record.put("last_is_link", last.is_symlink())
record.put("last_points_to", os.readlink(last) if last.is_symlink() else None)
callback.to_yaml()
with open("ckpts/best_k_models.yaml") as f:
    record.put("yaml", {Path(k).name: v for k, v in yaml.safe_load(f).items()})

elsewhere = ModelCheckpoint(dirpath="elsewhere", monitor="step", save_top_k=-1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    elsewhere.load_state_dict(callback.state_dict())
record.put("moved_warning", any("The dirpath has changed from" in str(w.message) for w in caught))
record.put("state_dirpath_is_str", isinstance(callback.state_dict()["dirpath"], str))
