"""Public behaviour Lightning's own tests (tests_pytorch) check, recorded the same way under both
frameworks: `Trainer(barebones=True)` (its arguments, a fit's files and metrics, `self.log`'s warning),
`utilities.data.extract_batch_size`, `find_shared_parameters`/`set_shared_parameters`, `isolate_rng`,
`utilities.parsing`'s helpers, `_restricted_classmethod`, the FSDP and model-parallel strategies'
attributes and messages, `StrategyRegistry` (its DeepSpeed entries, a name registered and given to the
Trainer), a strategy's `lightning_restore_optimizer`, the precision plugins' loop-side methods called by
hand, a user class deriving from a class surge only stands in for, and `test(model, [0])` (a list of
plain values is one loader)."""

from __future__ import annotations

import contextlib
import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import record
import torch
from lightning.fabric import Fabric
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.plugins.precision import FSDPPrecision, MixedPrecision, Precision
from lightning.pytorch.strategies import (
    DDPStrategy,
    DeepSpeedStrategy,
    FSDPStrategy,
    ModelParallelStrategy,
    SingleDeviceStrategy,
    StrategyRegistry,
)
from lightning.pytorch.utilities import find_shared_parameters, set_shared_parameters
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.model_helpers import _restricted_classmethod
from lightning.pytorch.utilities.parsing import (
    clean_namespace,
    collect_init_args,
    is_picklable,
    lightning_getattr,
    lightning_hasattr,
    lightning_setattr,
    parse_class_init_keys,
)
from lightning.pytorch.utilities.seed import isolate_rng
from torch import nn


def outcome(fn):
    """What a call gives: its value, or the error's first words and its built-in kind where the two
    frameworks share one (a TypeError, RuntimeError or AttributeError; Lightning's own configuration
    error is a bare Exception, surge's a ValueError: both "error")."""
    try:
        return ["ok", record.plain(fn())]
    except Exception as err:  # noqa: BLE001
        kind = next(
            (k.__name__ for k in (TypeError, RuntimeError, AttributeError) if isinstance(err, k)), "error"
        )
        return [kind, str(err)[:60]]


def warned(fn):
    """(value, the first warning's first words) of a call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = outcome(fn)
    return [value, [str(w.message)[:40] for w in caught if "Trying to infer" in str(w.message)]]


class LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_loss", out["loss"])
        return out


def barebones(root: Path) -> None:
    for name, value in (("enable_checkpointing", True), ("logger", True), ("log_every_n_steps", 1),
                        ("num_sanity_val_steps", 2), ("fast_dev_run", 1), ("profiler", "simple")):  # fmt: skip
        record.put(
            f"barebones/refuses/{name}", outcome(lambda n=name, v=value: L.Trainer(barebones=True, **{n: v}))
        )
    trainer = L.Trainer(barebones=True, default_root_dir=root, max_epochs=1, limit_train_batches=2,
                        limit_val_batches=1, accelerator="cpu")  # fmt: skip
    record.put("barebones/settings", [trainer.barebones, trainer.loggers, trainer.checkpoint_callback is None,
                                      trainer.num_sanity_val_steps, trainer.log_every_n_steps])  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(LoggingModel())
    record.put(
        "barebones/log_warned", any("barebones=True)` is configured" in str(w.message) for w in caught)
    )
    record.put("barebones/metrics", record.metrics(trainer))
    record.put("barebones/files", sorted(p.name for p in root.iterdir()) if root.exists() else [])


@dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


def batch_sizes() -> None:
    batches = {
        "tensor": torch.zeros(11, 10), "dict": {"x": [{"y": [torch.zeros(11, 10)]}]},
        "dataclass": Pair(torch.zeros(11, 2), torch.zeros(11, 2)), "scalars": [torch.tensor(1), torch.zeros(4)],
        "ambiguous": {"x": torch.zeros(10, 2), "y": torch.zeros(11, 2)}, "string": "text", "strings": ["a"] * 3,
    }  # fmt: skip
    for key, batch in batches.items():
        record.put(f"batch_size/{key}", warned(lambda b=batch: extract_batch_size(b)))


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
        self.inner = nn.Sequential(self.a)
        self.b.weight = self.a.weight


def shared_and_rng() -> None:
    model = Tied()
    record.put("shared/found", find_shared_parameters(model))
    other = nn.ModuleDict({"p": nn.Linear(2, 2), "q": nn.Linear(2, 2)})
    set_shared_parameters(other, [["p.weight", "q.weight"]])
    record.put("shared/set", other.p.weight is other.q.weight)
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    with isolate_rng():
        inside = [torch.rand(2), np.random.rand(2), random.random()]
    after = [torch.rand(2), np.random.rand(2), random.random()]
    record.put("isolate_rng", [torch.equal(inside[0], after[0]), bool((inside[1] == after[1]).all()),
                               inside[2] == after[2]])  # fmt: skip


class Holder(L.LightningModule):
    def __init__(self, width: int = 3, *rest, depth: int = 2, **more):
        super().__init__()
        self.save_hyperparameters()
        self.frames = collect_init_args(__import__("inspect").currentframe(), [])
        self.batch_size = 4


class ChildHolder(Holder):
    def __init__(self, extra: str = "x", **kwargs):
        super().__init__(**kwargs)


def parsing() -> None:
    record.put("parsing/keys", parse_class_init_keys(Holder))
    record.put("parsing/collected", ChildHolder(width=5, depth=1).frames)
    model = Holder()
    record.put("parsing/has", [lightning_hasattr(model, n) for n in ("batch_size", "width", "nothing")])
    lightning_setattr(model, "width", 9)
    record.put(
        "parsing/get", [lightning_getattr(model, "width"), outcome(lambda: lightning_getattr(model, "no"))]
    )
    hparams = {"ok": 1, "lock": __import__("threading").Lock()}
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        clean_namespace(hparams)
    record.put("parsing/cleaned", sorted(hparams))
    record.put("parsing/picklable", [is_picklable(1), is_picklable(lambda: 0)])

    class Loader:
        @_restricted_classmethod
        def make(cls, x):
            return [cls.__name__, x]

    record.put("restricted", [Loader.make(1), outcome(lambda: Loader().make(1))])


def strategies() -> None:
    fsdp = FSDPStrategy(cpu_offload=True, auto_wrap_policy={nn.Linear})
    record.put(
        "fsdp/attributes",
        [repr(fsdp.cpu_offload), fsdp.kwargs["use_orig_params"], "auto_wrap_policy" in fsdp.kwargs],
    )
    record.put("fsdp/storage", outcome(lambda: fsdp.save_checkpoint({}, "x.ckpt", storage_options=object())))
    parallel = ModelParallelStrategy()
    record.put("model_parallel/mesh", outcome(lambda: parallel.device_mesh))
    record.put(
        "model_parallel/storage", outcome(lambda: parallel.save_checkpoint({}, "x", storage_options=1))
    )
    for name in ("deepspeed", "deepspeed_stage_3_offload"):
        entry = StrategyRegistry[name]
        record.put(f"registry/{name}", [entry["init_params"], entry["strategy"] is DeepSpeedStrategy])
    StrategyRegistry.register("ddp_unused_here", DDPStrategy, description="mine", find_unused_parameters=True)
    trainer = L.Trainer(strategy="ddp_unused_here", accelerator="cpu", devices=1, logger=False)
    record.put("registry/trainer", type(trainer.strategy).__name__)
    StrategyRegistry.remove("ddp_unused_here")


def restore_optimizer(root: Path) -> None:
    path = root / "resume.ckpt"
    trainer = L.Trainer(default_root_dir=root, fast_dev_run=True, accelerator="cpu", logger=False)
    trainer.fit(BoringModel())
    trainer.save_checkpoint(path)
    for restore in (True, False):

        class Mine(SingleDeviceStrategy):
            called = False

            restores = restore

            @property
            def lightning_restore_optimizer(self):
                return self.restores

            def load_optimizer_state_dict(self, checkpoint):
                type(self).called = True

        strategy = Mine(torch.device("cpu"))
        L.Trainer(default_root_dir=root, fast_dev_run=True, strategy=strategy, logger=False).fit(
            BoringModel(), ckpt_path=path
        )
        record.put(f"restore_optimizer/{restore}", Mine.called)


class Calls:
    """A module and trainer that record the hooks a plugin's loop-side methods call."""

    def __init__(self):
        self.calls, self.automatic_optimization = [], True
        outer = self

        class Callback:
            def __getattr__(self, hook):
                return lambda *args: outer.calls.append(f"callback.{hook}")

        profiler = type("P", (), {"profile": lambda self, name: contextlib.nullcontext()})()
        self.trainer = type("T", (), {"callbacks": [Callback()], "gradient_clip_val": None, "profiler": profiler,
                                      "gradient_clip_algorithm": None, "lightning_module": self})()  # fmt: skip

    def __getattr__(self, hook):
        return lambda *args, **kwargs: self.calls.append(f"module.{hook}")


def precision_methods() -> None:
    param = nn.Parameter(torch.ones(2))
    for name, plugin in (("32", Precision()), ("fsdp-bf16", FSDPPrecision("bf16-mixed")),
                         ("amp-bf16", MixedPrecision("bf16-mixed", "cpu"))):  # fmt: skip
        module, optimizer = Calls(), torch.optim.SGD([param], lr=0.1)
        loss = plugin.pre_backward((param * 2).sum(), module)
        plugin.backward(loss, module, optimizer)
        plugin.post_backward(loss, module)
        plugin.optimizer_step(optimizer, module, lambda m=module: m.calls.append("closure") or 1.0)
        record.put(f"precision/{name}", module.calls)


class Seen(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer, self.seen = nn.Linear(1, 1), []

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.seen.append([repr(batch), batch_idx, dataloader_idx])


def list_batches() -> None:
    """A list of plain values is one loader of those batches; a list of lists, several loaders."""
    for key, loaders in (("one", [0]), ("two", [[1, 2], [3]])):
        model = Seen()
        L.Trainer(barebones=True, accelerator="cpu").test(model, loaders)
        record.put(f"list_batches/{key}", model.seen)


class FromStandIn(Fabric, metaclass=type("Meta", (type,), {})):
    """A class deriving from a class surge only stands in for, with a metaclass of its own."""


def stand_ins() -> None:
    record.put("stand_in/subclass", [issubclass(FromStandIn, Fabric), hasattr(Fabric, "not_a_member")])


if __name__ == "__main__":
    root = Path(os.environ.get("ORACLE_DIR", "."))
    barebones(root / "barebones")
    batch_sizes()
    shared_and_rng()
    parsing()
    strategies()
    restore_optimizer(root / "restore")
    precision_methods()
    stand_ins()
    list_batches()
