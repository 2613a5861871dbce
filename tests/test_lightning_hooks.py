"""Every hook of Lightning 2.x's LightningModule, LightningDataModule and Callback is either called
by surge at Lightning's point with Lightning's arguments, or refused (overriding it stops fit()
before any work); tests/oracle/test_hook_order.py compares the calls with Lightning's own. The names are Lightning's documented API, written here as data."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.callbacks import Callback, EarlyStopping
from surge.errors import MisconfigurationError

STAGE_HOOKS = ("start", "end", "epoch_start", "epoch_end", "batch_start", "batch_end")
# LightningModule (ModelHooks, DataHooks, CheckpointHooks and the overridable methods), Lightning 2.x.
MODULE_CALLED = (
    "prepare_data", "setup", "teardown", "configure_callbacks", "configure_optimizers", "configure_model",
    "optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "backward", "configure_gradient_clipping",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
    "on_validation_model_eval", "on_validation_model_train", "on_validation_model_zero_grad",
    "on_test_model_eval", "on_test_model_train", "on_predict_model_eval",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
    "on_fit_start", "on_fit_end", "on_save_checkpoint", "on_load_checkpoint",
    "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
    "training_step", "validation_step", "test_step", "predict_step",
    *(f"on_{s}_{h}" for s in ("train", "validation", "test", "predict") for h in STAGE_HOOKS),
)  # fmt: skip
MODULE_REFUSED = (
    "configure_sharded_model",
    # removed in Lightning 2.0 (which refuses them as well)
    "training_epoch_end", "validation_epoch_end", "test_epoch_end", "training_step_end",
    "validation_step_end", "test_step_end", "on_epoch_start", "on_epoch_end", "on_batch_start", "on_batch_end",
)  # fmt: skip
DATAMODULE_CALLED = (
    "prepare_data", "setup", "teardown", "train_dataloader", "val_dataloader", "test_dataloader",
    "predict_dataloader", "state_dict", "load_state_dict", "on_exception",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
)  # fmt: skip
CALLBACK_CALLED = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_exception", "state_dict", "load_state_dict", "on_save_checkpoint", "on_load_checkpoint",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
    *(f"on_{s}_{h}" for s in ("train", "validation", "test", "predict") for h in STAGE_HOOKS),
)  # fmt: skip
CALLBACK_REFUSED = ("on_epoch_start", "on_epoch_end", "on_batch_start", "on_batch_end")


def data(n: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 1)

    def loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.loss(batch))

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)]

    def train_dataloader(self):
        return DataLoader(data(), batch_size=2)

    def val_dataloader(self):
        return DataLoader(data(4), batch_size=2)

    test_dataloader = predict_dataloader = val_dataloader


def recording(base: type, names: tuple[str, ...], log: list, owner: str, callback: bool = False) -> type:
    """A subclass of `base` whose every hook in `names` records `(owner.name, args)`, then does the default."""

    def make(name: str):
        def hook(self, *args, **kwargs):
            log.append((f"{owner}.{name}", (*(args[2:] if callback else args), *kwargs.values())))
            return getattr(super(cls, self), name)(*args, **kwargs)

        return hook

    cls = type(f"Recording{base.__name__}", (base,), {name: make(name) for name in names})
    return cls


def trainer(tmp_path, **kw) -> surge.Trainer:
    kw = {"max_epochs": 2, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
          "enable_checkpointing": False, "default_root_dir": tmp_path, **kw}  # fmt: skip
    return surge.Trainer(**kw)


def names(log: list, prefix: str) -> list[str]:
    return [n.split(".", 1)[1] for n, _ in log if n.startswith(prefix + ".")]


def test_every_called_module_and_callback_hook_runs_at_lightnings_point(tmp_path):
    log: list = []
    steps = ("training_step", "validation_step", "test_step", "predict_step")
    module_hooks = tuple(n for n in MODULE_CALLED if n not in steps and not n.endswith("dataloader"))
    Model = recording(Net, (*module_hooks, "training_step"), log, "m")
    CB = recording(Callback, tuple(n for n in CALLBACK_CALLED if n not in ("state_dict", "load_state_dict")),
                   log, "cb", callback=True)  # fmt: skip
    model, cb = Model(), CB()
    t = trainer(tmp_path, callbacks=[cb], limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1)
    t.fit(model)
    fit_seq = names(log, "m")
    # Lightning's documented order for fit (module hooks), one epoch shown by its first window.
    expected_start = [
        "configure_callbacks", "prepare_data", "setup", "configure_model", "configure_optimizers", "on_fit_start",
        "on_validation_model_eval", "on_validation_start", "on_validation_epoch_start",
        "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
        "on_validation_batch_start", "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end",
        "on_validation_model_train", "on_train_start", "on_train_epoch_start",
        "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
        "on_train_batch_start", "training_step", "on_before_zero_grad", "optimizer_zero_grad",
        "on_before_backward", "backward", "on_after_backward",
        "optimizer_step", "on_before_optimizer_step", "configure_gradient_clipping", "on_train_batch_end",
    ]  # fmt: skip
    assert fit_seq[: len(expected_start)] == expected_start, " ".join(fit_seq[:30])
    assert fit_seq[-3:] == ["on_train_end", "on_fit_end", "teardown"]
    assert fit_seq.count("lr_scheduler_step") == 2  # once per epoch (interval "epoch")
    assert ("m.setup", ("fit",)) in log and ("m.teardown", ("fit",)) in log
    assert ("cb.setup", ("fit",)) in log and ("cb.teardown", ("fit",)) in log
    epoch, batch_idx, opt, closure = next(a for n, a in log if n == "m.optimizer_step")
    assert (epoch, batch_idx, callable(closure)) == (0, 0, True)
    assert isinstance(opt.param_groups, list)  # the optimizer's own attributes
    assert next(a for n, a in log if n == "m.on_before_batch_transfer")[1] == 0  # dataloader_idx
    t.save_checkpoint(tmp_path / "a.ckpt")
    trainer(tmp_path, max_epochs=3, callbacks=[cb], limit_train_batches=2, limit_val_batches=1).fit(
        model, ckpt_path=tmp_path / "a.ckpt"
    )
    for stage, run in (("validate", t.validate), ("test", t.test), ("predict", t.predict)):
        run(model)
        assert ("m.setup", (stage,)) in log and ("m.teardown", (stage,)) in log, stage
        assert ("cb.setup", (stage,)) in log and ("cb.teardown", (stage,)) in log, stage
    called = {n for n, _ in log}
    missing = [f"m.{n}" for n in module_hooks if f"m.{n}" not in called]
    missing += [f"cb.{n}" for n in CALLBACK_CALLED if f"cb.{n}" not in called and "state_dict" not in n]
    missing = [n for n in missing if not n.endswith("on_exception")]
    assert not missing, missing


def test_callback_state_and_on_exception_and_the_datamodules_hooks(tmp_path):
    log: list = []

    class Failing(Net):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1:
                raise ValueError("boom")
            return super().training_step(batch, batch_idx)

    class Data(surge.DataModule):
        def train_dataloader(self):
            return DataLoader(data(), batch_size=2)

        def val_dataloader(self):
            return DataLoader(data(4), batch_size=2)

        test_dataloader = predict_dataloader = val_dataloader

        def state_dict(self):
            return {"k": 1}

    DM = recording(Data, DATAMODULE_CALLED, log, "dm")
    CB = recording(Callback, ("on_exception", "state_dict", "load_state_dict"), log, "cb", callback=False)
    model, dm, cb = Failing(), DM(), CB()
    t = trainer(tmp_path, callbacks=[cb])
    with pytest.raises(ValueError, match="boom"):
        t.fit(model, datamodule=dm)
    t.save_checkpoint(tmp_path / "a.ckpt")
    t2 = trainer(tmp_path, callbacks=[cb], max_epochs=1)
    t2.fit(Net(), datamodule=dm, ckpt_path=tmp_path / "a.ckpt")
    t2.test(Net(), datamodule=dm)
    t2.predict(Net(), datamodule=dm)
    got = {n for n, _ in log}
    assert not [n for n in DATAMODULE_CALLED if f"dm.{n}" not in got]
    assert {"cb.on_exception", "cb.state_dict", "cb.load_state_dict"} <= got
    seq = names(log, "dm")
    assert seq[:3] == ["prepare_data", "setup", "val_dataloader"]  # the sanity check's, as Lightning
    assert seq.index("train_dataloader") > seq.index("on_before_batch_transfer")  # after the sanity check
    assert ("dm.setup", ("test",)) in log and ("dm.teardown", ("predict",)) in log


@pytest.mark.parametrize("name", MODULE_REFUSED)
def test_a_refused_module_hook_stops_fit_before_any_work(tmp_path, name):
    work: list = []
    Model = type("Custom", (Net,), {name: lambda self, *a: None, "prepare_data": lambda self: work.append(1)})
    with pytest.raises(MisconfigurationError, match=f"Custom.{name}") as err:
        trainer(tmp_path).fit(Model())
    assert "silently" in str(err.value) and not work


@pytest.mark.parametrize("name", CALLBACK_REFUSED)
def test_a_refused_callback_hook_stops_fit_before_any_work(tmp_path, name):
    cb = type("Old", (Callback,), {name: lambda self, *a: None})()
    with pytest.raises(MisconfigurationError, match=f"Old.{name}"):
        trainer(tmp_path, callbacks=[cb]).validate(Net())


def test_every_lightning_hook_is_listed_once():
    assert not set(MODULE_CALLED) & set(MODULE_REFUSED)
    assert not set(CALLBACK_CALLED) & set(CALLBACK_REFUSED)


def test_setup_builds_layers_and_data_before_the_stage_reads_them(tmp_path):
    class Lazy(Net):
        def __init__(self):
            surge.Module.__init__(self)
            self.calls = []

        def prepare_data(self):
            self.calls.append("prepare_data")

        def setup(self, stage):
            self.calls.append(("setup", stage))
            if not hasattr(self, "layer"):
                self.layer = nn.Linear(3, 1)
                self.ds = data()

        def train_dataloader(self):
            return DataLoader(self.ds, batch_size=2)

    model = Lazy()
    trainer(tmp_path, max_epochs=1).fit(model)
    assert model.calls == ["prepare_data", ("setup", "fit")]  # a TrainerFn: == "fit"
    assert all(
        p.grad is None for p in model.parameters()
    )  # trained (and zeroed) by the optimizer built after setup


def test_configure_callbacks_replaces_the_trainers_callback_of_that_type(tmp_path):
    class Flat(Net):
        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.tensor(1.0))

        def configure_callbacks(self):
            return EarlyStopping(monitor="val_loss", patience=1)

    mine = EarlyStopping(monitor="val_loss", patience=10)
    t = trainer(tmp_path, max_epochs=5, callbacks=[mine], num_sanity_val_steps=0)
    t.fit(Flat())
    stops = [c for c in t.callbacks if isinstance(c, EarlyStopping)]
    assert len(stops) == 1 and stops[0] is not mine and stops[0].patience == 1
    assert t.current_epoch == 2  # epoch 0 sets the best, epoch 1 does not improve: patience 1 stops


def test_configure_callbacks_refuses_what_is_not_a_callback(tmp_path):
    Model = type("M", (Net,), {"configure_callbacks": lambda self: [object()]})
    with pytest.raises(MisconfigurationError, match="configure_callbacks"):
        trainer(tmp_path).fit(Model())


def test_an_optimizer_step_override_warms_up_the_learning_rate_as_in_lightning(tmp_path):
    base_lr, warmup = 0.05, 10

    class Warm(Net):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=base_lr)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            optimizer.step(closure=optimizer_closure)
            self.seen.append((epoch, batch_idx, self.trainer.global_step))
            scale = min(1.0, (self.trainer.global_step + 1) / warmup)
            for pg in optimizer.param_groups:
                pg["lr"] = scale * base_lr

    torch.manual_seed(0)
    model = Warm()
    model.seen = []
    start = {k: v.clone() for k, v in model.state_dict().items()}
    t = trainer(tmp_path, max_epochs=2)
    t.fit(model)
    # Lightning (automatic optimization) counts the step once optimizer_step returns: inside it,
    # after optimizer.step(), global_step is still the step's index.
    assert model.seen == [(e, b, 4 * e + b) for e in range(2) for b in range(4)]
    assert t.global_step == 8
    assert t.optimizers[0].param_groups[0]["lr"] == pytest.approx(min(1.0, 8 / warmup) * base_lr)
    # The hand-written equivalent gives the same weights.
    ref = Net()
    ref.load_state_dict(start)
    opt = torch.optim.SGD(ref.parameters(), lr=base_lr)
    step = 0
    for _ in range(2):
        for b, batch in enumerate(DataLoader(data(), batch_size=2)):
            ref.training_step(batch, b).backward()
            opt.step()
            for pg in opt.param_groups:
                pg["lr"] = min(1.0, (step + 1) / warmup) * base_lr
            step += 1
            opt.zero_grad()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)


def test_optimizer_zero_grad_and_lr_scheduler_step_overrides_replace_the_defaults(tmp_path):
    class Custom(Net):
        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            self.zeroed.append((epoch, batch_idx))
            optimizer.zero_grad(set_to_none=False)

        def lr_scheduler_step(self, scheduler, metric):
            self.scheduled.append(metric)  # not stepped: the lr stays

    model = Custom()
    model.zeroed, model.scheduled = [], []
    t = trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    t.fit(model)
    assert model.zeroed == [(0, 0), (0, 2), (1, 0), (1, 2)]  # each window's first micro-batch (Lightning)
    assert model.scheduled == [None, None]
    assert t.optimizers[0].param_groups[0]["lr"] == 0.1
    # the last window's gradients stay until the epoch-end validation frees them (on_validation_model_zero_grad)
    assert all(p.grad is None for p in model.parameters())


def test_batch_transfer_hooks_run_for_every_batch_and_the_datamodules_win(tmp_path):
    class Counting(Net):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            self.count += 1
            return batch

    class Data(surge.DataModule):
        def train_dataloader(self):
            return DataLoader(data(), batch_size=2)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            x, y = batch
            self.seen += 1
            return x * 0, y

    model = Counting()
    model.count = 0
    t = trainer(tmp_path, max_epochs=3, num_sanity_val_steps=2)
    t.fit(model)
    assert model.count == 2 + 3 * (4 + 2)  # sanity check, then per epoch 4 train and 2 val batches
    dm, model2 = Data(), Counting()
    dm.seen, model2.count = 0, 0
    before = model2.layer.weight.detach().clone()
    trainer(tmp_path, max_epochs=1).fit(model2, datamodule=dm)
    assert dm.seen == 4 and model2.count == 4  # the datamodule's val_dataloader is None: no validation
    torch.testing.assert_close(model2.layer.weight, before)  # inputs zeroed by the hook: no weight gradient


def test_save_hyperparameters_in_a_parent_init_records_what_the_subclass_passed():
    class Parent(surge.Module):
        def __init__(self, lr: float = 0.1, hidden: int = 4):
            super().__init__()
            self.save_hyperparameters()

    class Child(Parent):
        def __init__(self):
            super().__init__(lr=0.5)

    class Override(Parent):
        def __init__(self, lr: float = 0.2, *args, name: str = "x"):
            super().__init__(lr=lr * 2)

    assert dict(Child().hparams) == {"lr": 0.5, "hidden": 4}
    assert dict(Override().hparams) == {"lr": 0.2, "hidden": 4, "name": "x"}  # the subclass's value wins


def test_hooks_set_on_the_instance_are_honoured(tmp_path):
    """As Lightning's `is_overridden`: a function or a mock set on the instance is called, `None`
    switches a hook off (here `validation_step`: validation is skipped, with Lightning's warning)."""
    from unittest import mock

    model, seen = Net(), []
    model.on_train_epoch_start = lambda: seen.append(model.current_epoch)
    model.validation_step = None
    t = trainer(tmp_path, limit_train_batches=2)
    warned = pytest.warns(UserWarning, match="no `validation_step`. Skipping val loop")
    with mock.patch.object(model, "on_train_epoch_end") as epoch_end, warned:
        t.fit(model)
    assert seen == [0, 1] and epoch_end.call_count == 2
    assert "val_loss" not in t.callback_metrics


def test_submodules_keep_their_own_mode_through_fit_and_evaluation(tmp_path):
    model = Net()
    model.frozen = nn.BatchNorm1d(3).eval()
    t = trainer(tmp_path, limit_train_batches=2, limit_val_batches=1)
    t.fit(model)
    t.validate(model)
    t.predict(model)
    assert model.training and model.layer.training and not model.frozen.training
