"""Every bad input in the docs' table (docs/reliability.md) gets a clear error: one test per row.

A row: an id (also in the docs), what is tried, the error type, and words the message must hold
(the argument, the value, what is allowed).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel, make_loaders
from surge import callbacks
from surge.callbacks import ModelCheckpoint
from surge.checkpoint import load_checkpoint, save_atomic
from surge.errors import CheckpointError, SurgeError


def loader() -> DataLoader:
    return make_loaders()[0]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def _quiet(**kwargs) -> surge.Trainer:
    base = dict(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                logger=False, num_sanity_val_steps=0)  # fmt: skip
    return surge.Trainer(**{**base, **kwargs})


class Returns(TinyModel):
    """training_step returns `value(loss)` instead of the loss."""

    def __init__(self, value) -> None:
        super().__init__()
        self.value = value

    def training_step(self, batch, batch_idx):
        return self.value(super().training_step(batch, batch_idx))


class Optimizers(TinyModel):
    def __init__(self, value) -> None:
        super().__init__()
        self.value = value

    def configure_optimizers(self):
        return self.value(self)


class Logs(TinyModel):
    def __init__(self, **log) -> None:
        super().__init__()
        self.log_args = log

    def training_step(self, batch, batch_idx):
        self.log(**self.log_args)
        return super().training_step(batch, batch_idx)


def _fit(model, data=None, **kwargs):
    return lambda tmp: _quiet(default_root_dir=tmp, **kwargs).fit(
        model, data if data is not None else loader()
    )


class _StatefulStream(torch.utils.data.IterableDataset):
    """An IterableDataset that keeps its position (state_dict/load_state_dict)."""

    def __init__(self) -> None:
        self.pos = 0

    def __iter__(self):
        return iter(loader().dataset)

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.pos = state["pos"]


class _AdamForeach(TinyModel):
    """Adam(foreach=True) with a scheduler: under compile="step" its lr becomes a tensor."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=0.01, foreach=True)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]


def _trainer(**kwargs):
    return lambda tmp: surge.Trainer(default_root_dir=tmp, **kwargs)


def _ckpt(content: bytes | None):
    def run(tmp):
        path = tmp / "bad.ckpt"
        path.write_bytes(content if content is not None else b"")
        _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=path)

    return run


def _flipped(tmp):
    trainer = _quiet(default_root_dir=tmp, max_steps=2)
    trainer.fit(TinyModel(), loader())
    path = tmp / "good.ckpt"
    trainer.save_checkpoint(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=path)


def _mismatch(tmp):
    trainer = _quiet(default_root_dir=tmp, max_steps=2)
    trainer.fit(TinyModel(hidden=8), loader())
    trainer.save_checkpoint(tmp / "m.ckpt")
    _quiet(default_root_dir=tmp).fit(TinyModel(hidden=5), loader(), ckpt_path=tmp / "m.ckpt")


def _pickled(tmp):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp / 'pwned'}",))

    torch.save({"state_dict": {}, "payload": Payload()}, tmp / "evil.ckpt")
    try:
        _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=tmp / "evil.ckpt")
    finally:
        assert not (tmp / "pwned").exists()


def _env(**env):
    def run(tmp):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            surge.Trainer(default_root_dir=tmp, accelerator="cpu", devices=2)
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)

    return run


def _unsafe_env(tmp):
    trainer = _quiet(default_root_dir=tmp, max_steps=1)
    trainer.fit(TinyModel(), loader())
    trainer.save_checkpoint(tmp / "ok.ckpt")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=tmp / "ok.ckpt")
    finally:
        del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]


def _loop_edited(**change):
    """A checkpoint whose training position was changed (and re-saved with a valid digest)."""

    def run(tmp):
        from surge.checkpoint import load_checkpoint, save_atomic

        trainer = _quiet(default_root_dir=tmp, max_steps=2)
        trainer.fit(TinyModel(), loader())
        path = tmp / "loop.ckpt"
        trainer.save_checkpoint(path)
        state = load_checkpoint(path)
        state["loop"].update(change)
        save_atomic(state, path)
        _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=path)

    return run


class DetachesLater(TinyModel):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss.detach() if batch_idx == 2 else loss


class _Corrupt(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i):
        if i == 5:
            raise ValueError(f"sample {i} is corrupt")
        return torch.randn(4), 0


def _saved(tmp, change, model=None, name="edited.ckpt"):
    """A checkpoint of a short real fit, re-saved after `change(state)` edits it (checksum redone)."""
    trainer = _quiet(default_root_dir=tmp, max_steps=2)
    trainer.fit(model if model is not None else TinyModel(), loader())
    trainer.save_checkpoint(tmp / "good.ckpt")
    state = load_checkpoint(tmp / "good.ckpt")
    del state["surge"]
    change(state)
    save_atomic(state, tmp / name)
    return tmp / name


def _resume_edited(change, model=None, name="edited.ckpt"):
    def run(tmp):
        path = _saved(tmp, change, model, name)
        _quiet(default_root_dir=tmp, max_steps=4).fit(TinyModel(), loader(), ckpt_path=path)

    return run


def _load_edited(change, name="edited.ckpt"):
    return lambda tmp: TinyModel.load_from_checkpoint(_saved(tmp, change, name=name))


class AdamModel(TinyModel):
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


@contextlib.contextmanager
def _read_only_dir(path: Path, stale: bool):
    """A real read-only tmpfs at `path` (needs root; skips where it cannot mount), holding a writer's
    leftover temporary when `stale` (its pid above pid_max, so no such process)."""
    path.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        if stale:
            (path / ".epoch=0-step=4.ckpt.tmp-4194399-0123abcd").write_bytes(b"half a checkpoint")
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _ckpt_dir_read_only(tmp):
    with _read_only_dir(tmp / "ro", stale=True) as ro:
        _quiet(default_root_dir=tmp, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=ro)]).fit(
            TinyModel(), loader()
        )


def _root_dir_read_only(tmp):
    with _read_only_dir(tmp / "ro", stale=False) as ro:
        _quiet(default_root_dir=ro, logger=True).fit(TinyModel(), loader())


def _a_file(tmp):
    (tmp / "a_file").write_text("not a directory")
    return tmp / "a_file"


def _dangling(tmp):
    (tmp / "gone").symlink_to(tmp / "nowhere")
    return tmp / "gone"


def _checkpoint_to(filename=None, dirpath=None, **kwargs):
    return lambda tmp: _quiet(
        default_root_dir=tmp, enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=dirpath(tmp) if dirpath else tmp / "ck", filename=filename, **kwargs)],
    ).fit(TinyModel(), loader())  # fmt: skip


class ManualTiny(TinyModel):
    """TinyModel with automatic_optimization=False (steps its optimizer itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="l3")
        opt.step()


_EMPTY = DataLoader(TensorDataset(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)), batch_size=2)

ROWS = [
    # Trainer arguments
    ("max_epochs-negative", _trainer(max_epochs=-2), ValueError, ["max_epochs", "-2"]),
    ("precision-unknown", _trainer(precision="fp8"), ValueError, ["precision", "fp8", "bf16-mixed"]),
    ("accelerator-unknown", _trainer(accelerator="tpu"), ValueError, ["accelerator", "tpu", "cpu"]),
    ("devices-zero", _trainer(accelerator="cpu", devices=0), ValueError, ["devices", "0"]),
    ("accumulate-zero", _trainer(accumulate_grad_batches=0), ValueError, ["accumulate_grad_batches", "0"]),
    ("clip-negative", _trainer(gradient_clip_val=-1.0), ValueError, ["gradient_clip_val", "-1.0"]),
    ("clip-algorithm", _trainer(gradient_clip_algorithm="l1"), ValueError, ["gradient_clip_algorithm", "l1"]),
    (
        "limit-batches-negative",
        _trainer(limit_train_batches=-0.5),
        ValueError,
        ["limit_train_batches", "-0.5"],
    ),
    ("strategy-unknown", _trainer(strategy="horovod"), ValueError, ["strategy", "horovod", "ddp"]),
    (
        "on-nonfinite-unknown",
        _trainer(on_nonfinite="ignore"),
        ValueError,
        ["on_nonfinite", "ignore", "raise"],
    ),
    ("num-nodes-zero", _trainer(num_nodes=0), ValueError, ["num_nodes", "0"]),
    ("profiler-unknown", _trainer(profiler="fancy"), ValueError, ["profiler", "fancy", "simple"]),
    ("dp-without-cuda", _trainer(strategy="dp", accelerator="cpu"), ValueError, ["strategy='dp'", "cpu"]),
    (
        "nodes-without-launcher",
        _trainer(accelerator="cpu", num_nodes=2),
        ValueError,
        ["num_nodes=2", "torchrun"],
    ),
    (
        "val-interval-too-large",
        _fit(TinyModel(), val_check_interval=1000),
        ValueError,
        ["`val_check_interval` (1000)", "training batches (4)"],  # Lightning's words, value and limit
    ),
    # what the module's hooks return
    (
        "step-returns-none-with-fp16",  # (32-bit and bf16 skip the batch's backward, as Lightning)
        _fit(Returns(lambda loss: None), precision=surge.precision.MixedPrecision(torch.float16, "cpu")),
        ValueError,
        ["training_step returned None at batch 0", "precision='16-mixed'"],
    ),
    (
        "step-dict-without-loss",
        _fit(Returns(lambda loss: {"l": loss})),
        ValueError,
        ["without a 'loss' key", "['l']"],
    ),
    (
        "step-loss-not-scalar",
        _fit(Returns(lambda loss: loss.repeat(3))),
        ValueError,
        ["shape (3,)", "scalar"],
    ),
    (
        "step-loss-detached",
        _fit(Returns(lambda loss: loss.detach())),
        RuntimeError,
        ["does not require grad"],
    ),
    ("step-returns-string", _fit(Returns(lambda loss: "loss")), ValueError, ["returned str", "batch 0"]),
    (
        "step-loss-detached-later",
        _fit(DetachesLater()),
        RuntimeError,
        ["batch 2 of epoch 0", "does not require grad"],
    ),
    ("optimizers-none", _fit(Optimizers(lambda m: None)), SurgeError, ["configure_optimizers"]),
    ("optimizers-string", _fit(Optimizers(lambda m: "adam")), SurgeError, ["configure_optimizers", "str"]),
    (
        "scheduler-dict-key",
        _fit(
            Optimizers(
                lambda m: {
                    "optimizer": torch.optim.SGD(m.parameters(), 0.1),
                    "lr_scheduler": {
                        "scheduler": torch.optim.lr_scheduler.StepLR(torch.optim.SGD(m.parameters(), 0.1), 1),
                        "every": 2,
                    },
                }
            )
        ),
        ValueError,
        ["lr_scheduler", "every"],
    ),  # fmt: skip
    (
        "log-vector",
        _fit(Logs(name="v", value=torch.ones(3))),
        ValueError,
        ["self.log(v, tensor([1., 1., 1.]))", "single element"],
    ),
    ("log-empty-name", _fit(Logs(name="", value=1.0)), ValueError, ["self.log(name)"]),
    (
        "log-reduce-fx",
        _fit(Logs(name="x", value=1.0, reduce_fx="median")),
        ValueError,
        ["reduce_fx", "median"],
    ),
    # dataloaders
    ("loader-empty", _fit(TinyModel(), _EMPTY), ValueError, ["empty", "0 batches"]),
    (
        "sequential-train-loaders",
        _fit(TinyModel(), surge.data.CombinedLoader([loader(), loader()], "sequential")),
        ValueError,
        ["fit()", 'CombinedLoader(mode="sequential")', "max_size_cycle"],
    ),
    (
        "no-train-data",
        lambda tmp: _quiet(default_root_dir=tmp).fit(TinyModel()),
        ValueError,
        ["no training data"],
    ),
    (
        "sample-raises",
        _fit(TinyModel(), DataLoader([(torch.randn(4), 0)] * 3 + [None], batch_size=2)),
        TypeError,
        ["fetching batch 1 of epoch 0"],
    ),  # fmt: skip
    (
        "sample-getitem-raises",
        _fit(TinyModel(), DataLoader(_Corrupt(), batch_size=4)),
        ValueError,
        ["sample 5 is corrupt", "fetching batch 1 of epoch 0", "dataset[5]"],
    ),  # fmt: skip
    # checkpoints
    (
        "ckpt-missing",
        lambda tmp: _quiet(default_root_dir=tmp).fit(TinyModel(), loader(), ckpt_path=tmp / "no.ckpt"),
        ValueError,
        ["ckpt_path", "no such file"],
    ),  # fmt: skip
    ("ckpt-empty", _ckpt(b""), CheckpointError, ["bad.ckpt", "empty (0 bytes)"]),
    ("ckpt-garbage", _ckpt(b"not a checkpoint at all"), CheckpointError, ["bad.ckpt", "corrupt"]),
    ("ckpt-flipped-bit", _flipped, CheckpointError, ["good.ckpt"]),
    ("ckpt-shape-mismatch", _mismatch, CheckpointError, ["m.ckpt", "shape mismatches", "net.0.weight"]),
    ("ckpt-pickle-payload", _pickled, CheckpointError, ["evil.ckpt", "refusing"]),
    (
        "ckpt-loop-beyond-epoch",
        _loop_edited(batches_done=99),
        CheckpointError,
        ["loop.ckpt", "after batch 99", "epoch has 4 batches"],
    ),
    ("env-unsafe-load", _unsafe_env, CheckpointError, ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "refusing"]),
    # the environment
    (
        "env-world-size",
        _env(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555"),
        ValueError,
        ["devices=2", "WORLD_SIZE=3"],
    ),  # fmt: skip
    # checkpoints that do not fit the run
    (
        "ckpt-hparams-mismatch",
        _load_edited(lambda s: s.update(hyper_parameters=[0.1]), "hp.ckpt"),  # (an extra value is left out)
        CheckpointError,
        ["hp.ckpt", "'hyper_parameters' is a list, not a dict"],
    ),
    (
        "ckpt-no-state-dict",
        _resume_edited(lambda s: s.pop("state_dict"), name="nosd.ckpt"),
        CheckpointError,
        ["nosd.ckpt", "no 'state_dict' entry"],
    ),
    (
        "ckpt-load-no-state-dict",
        _load_edited(lambda s: s.pop("state_dict"), "nosd.ckpt"),
        CheckpointError,
        ["nosd.ckpt", "no 'state_dict' entry"],
    ),
    (
        "ckpt-loop-malformed",
        _resume_edited(lambda s: s.update(loop={"epoch": 0, "global_step": "2"}), name="loop.ckpt"),
        CheckpointError,
        ["loop.ckpt", "'loop' entry lacks ['batches_done', 'epoch_done']", "global_step='2'"],
    ),
    (
        "ckpt-other-optimizer",
        _resume_edited(lambda s: None, AdamModel(), "adam.ckpt"),
        CheckpointError,
        ["adam.ckpt", "optimizer 0 (SGD)", "betas", "momentum"],
    ),
    # directories
    (
        "ckpt-dirpath-read-only",
        _ckpt_dir_read_only,
        ValueError,
        ["ModelCheckpoint(dirpath=", "not writable", "EROFS"],
    ),
    ("root-dir-read-only", _root_dir_read_only, ValueError, ["default_root_dir=", "not writable", "EROFS"]),
    (
        "root-dir-is-file",
        lambda tmp: _quiet(default_root_dir=_a_file(tmp)),
        ValueError,
        ["default_root_dir=", "a_file", "existing file"],
    ),
    (
        "ckpt-dirpath-is-file",
        lambda tmp: ModelCheckpoint(dirpath=_a_file(tmp)),
        ValueError,
        ["ModelCheckpoint(dirpath)=", "a_file", "existing file"],
    ),
    (
        "root-dir-dangling-link",
        lambda tmp: _quiet(default_root_dir=_dangling(tmp)),
        ValueError,
        ["default_root_dir=", "gone", "symlink", "does not exist"],
    ),
    (
        "ckpt-dirpath-dangling-link",
        lambda tmp: ModelCheckpoint(dirpath=_dangling(tmp)),
        ValueError,
        ["ModelCheckpoint(dirpath)=", "gone", "symlink"],
    ),
    # checkpoint file names
    (
        "ckpt-filename-brace",
        lambda tmp: ModelCheckpoint(filename="{epoch"),
        ValueError,
        ["filename='{epoch'", "braces"],
    ),
    (
        "ckpt-filename-spec",
        lambda tmp: ModelCheckpoint(filename="{epoch}-{val_loss:d}"),
        ValueError,
        ["{val_loss}", "'d'", "float"],
    ),
    (
        "ckpt-filename-last",
        lambda tmp: ModelCheckpoint(filename="last", save_last=True),
        ValueError,
        ["filename='last'", "save_last", "last.ckpt"],
    ),
    # what training_step returns, again
    (
        "step-loss-complex",
        _fit(Returns(lambda loss: loss * (1 + 0j))),
        ValueError,
        ["complex loss", "complex64", "real"],
    ),
    (
        "tuner-no-data",
        lambda tmp: surge.tune.lr_find(TinyModel()),
        ValueError,
        ["lr_find", "train_dataloaders=None", "TinyModel defines no train_dataloader()"],
    ),
    # Lightning's debugging arguments and manual optimization
    ("fast-dev-run-negative", _trainer(fast_dev_run=-1), ValueError, ["fast_dev_run", "-1", "int >= 0"]),
    ("overfit-batches-over-one", _trainer(overfit_batches=1.5), ValueError, ["overfit_batches", "1.5"]),
    ("max-time-format", _trainer(max_time="1:00:00"), ValueError, ["max_time", "'1:00:00'", "DD:HH:MM:SS"]),
    ("max-time-dict-key", _trainer(max_time={"hrs": 1}), ValueError, ["max_time", "hrs", "hours"]),
    ("detect-anomaly-not-bool", _trainer(detect_anomaly="yes"), ValueError, ["detect_anomaly", "'yes'"]),
    (
        "manual-with-accumulate",
        _fit(ManualTiny(), accumulate_grad_batches=2),
        ValueError,
        ["accumulate_grad_batches=2", "manual optimization"],
    ),
    (
        "manual-with-clip-val",
        _fit(ManualTiny(), gradient_clip_val=1.0),
        ValueError,
        ["gradient_clip_val", "manual optimization", "self.clip_gradients"],
    ),
    (
        "clip-gradients-algorithm",
        _fit(ManualTiny()),
        ValueError,
        ["clip_gradients(gradient_clip_algorithm='l3')", '"norm" or "value"'],
    ),
    # Lightning's callbacks
    (
        "swa-lrs-negative",
        lambda tmp: callbacks.StochasticWeightAveraging(swa_lrs=-0.1),
        ValueError,
        ["StochasticWeightAveraging(swa_lrs)=-0.1", "positive float"],
    ),
    (
        "accumulation-scheduler-twice",
        _fit(
            TinyModel(),
            accumulate_grad_batches=2,
            callbacks=[callbacks.GradientAccumulationScheduler({1: 4})],
        ),
        ValueError,
        ["accumulate_grad_batches", "GradientAccumulationScheduler", "remove one"],
    ),
    (
        "timer-duration-format",
        lambda tmp: callbacks.Timer(duration="1:00"),
        ValueError,
        ["Timer(duration)='1:00'", "DD:HH:MM:SS"],
    ),
    (
        "batch-size-finder-given-loader",
        _fit(type("Sized", (TinyModel,), {"batch_size": 4})(), callbacks=[callbacks.BatchSizeFinder()]),
        ValueError,
        ["BatchSizeFinder", "passed directly to fit()", "train_dataloader()"],
    ),
    (
        "lr-finder-attr-missing",
        _fit(TinyModel(), callbacks=[callbacks.LearningRateFinder(attr_name="learning_rate")]),
        AttributeError,
        ["LearningRateFinder(attr_name='learning_rate')", "TinyModel"],
    ),
    (
        "reload-dataloaders-negative",
        _trainer(reload_dataloaders_every_n_epochs=-1),
        ValueError,
        ["reload_dataloaders_every_n_epochs=-1", "int >= 0"],
    ),
    (
        "reload-dataloaders-not-int",
        _trainer(reload_dataloaders_every_n_epochs=1.5),
        ValueError,
        ["reload_dataloaders_every_n_epochs=1.5", "int >= 0"],
    ),
    (
        "async-checkpoint-not-bool",
        _trainer(async_checkpoint="yes"),
        ValueError,
        ["async_checkpoint", "'yes'"],
    ),
    (
        "activation-checkpointing-not-a-module",
        _trainer(activation_checkpointing=[torch.nn.Linear, int]),
        TypeError,
        ["activation_checkpointing=", "nn.Module subclasses", "<class 'int'>"],
    ),
    (
        "activation-checkpointing-class-unused",
        _fit(TinyModel(), activation_checkpointing=[torch.nn.Conv2d]),
        ValueError,
        ["activation_checkpointing", "Conv2d", "TinyModel"],
    ),
    (
        "compile-scope-unknown",
        _trainer(compile={"scope": "graph"}),
        ValueError,
        ["compile", "'graph'", "'forward', 'step', 'regions'"],
    ),
    ("compile-string-unknown", _trainer(compile="steps"), ValueError, ["compile", "'steps'", "'regions'"]),
    (
        "compile-regions-no-blocks",
        _fit(TinyModel(), compile={"scope": "regions", "backend": "eager"}),
        ValueError,
        ["compile='regions'", "no repeated blocks", "TinyModel", "compile='step'"],
    ),
    (
        "compile-step-adam-foreach",
        _fit(_AdamForeach(), compile="step"),
        ValueError,
        ["compile='step'", "Adam(foreach=True)", "capturable=True", "leave foreach unset", "fused=True"],
    ),
    (
        "stateful-dataset-in-workers",
        _fit(TinyModel(), DataLoader(_StatefulStream(), batch_size=8, num_workers=2)),
        ValueError,
        ["_StatefulStream", "num_workers=2", "StatefulDataLoader"],
    ),
]


@pytest.mark.parametrize(("row", "run", "kind", "words"), ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_gets_a_clear_error(tmp_path, row, run, kind, words):
    with pytest.raises(kind) as info:
        run(tmp_path)
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    for word in words:
        assert word in text, f"{row}: {word!r} not in {text!r}"


def test_an_unlogged_filename_field_is_written_as_zero_with_a_warning(tmp_path):
    # Lightning writes 0 for a field nobody logs; surge does the same, and says so (once).
    with pytest.warns(UserWarning, match=r"\{val_acc\} is not logged.*written as 0.*self\.log\('val_acc'"):
        _checkpoint_to(filename="{epoch}-{val_acc}")(tmp_path)
    assert [p.name for p in (tmp_path / "ck").glob("*.ckpt")] == ["epoch=0-val_acc=0.ckpt"]


def test_the_docs_table_lists_every_row():
    documented = set(re.findall(r"^\| `([a-z0-9_-]+)` \|", DOCS.read_text(), re.MULTILINE))
    assert documented == {r[0] for r in ROWS}
    assert len(ROWS) >= 30
