"""surge leaves the user's objects and the process environment as they were: no attributes stamped
on the model, no DataLoader changed in place, no variables written for the Trainer to read back."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

import surge
from helpers import CompiledWatch, fast_trainer, make_dataset, make_model
from surge.data.loader_prep import prepare_loader
from surge.launch.signals import WorkerSignals
from surge.seed import Seeding, last_seeding, worker_init_fn
from surge.speed.compiling import graphs_compiled


def test_seed_everything_records_the_seed_and_leaves_os_environ_alone():
    before = dict(os.environ)
    try:
        surge.seed_everything(123, workers=False)
        assert last_seeding() == Seeding(seed=123, workers=False)
        surge.seed_everything(7)
        assert last_seeding() == Seeding(seed=7, workers=True)
        assert dict(os.environ) == before
    finally:
        surge.seed_everything(0)


def test_fit_leaves_the_users_loaders_as_they_were(tmp_path):
    surge.seed_everything(0, workers=True)  # asks for per-worker seeds: set on surge's copy only
    train = DataLoader(make_dataset(32), batch_size=8, shuffle=True, num_workers=1, persistent_workers=True)
    val = DataLoader(make_dataset(16, seed=1), batch_size=8)
    before = {"train": dict(train.__dict__), "val": dict(val.__dict__)}
    trainer = fast_trainer(default_root_dir=tmp_path, max_epochs=2)
    trainer.fit(make_model(), train, val)
    prepared = trainer.train_dataloader  # (None once validate() ran, as Lightning)
    trainer.validate(dataloaders=val)
    assert {"train": train.__dict__, "val": val.__dict__} == before
    assert train.worker_init_fn is None and train._iterator is None
    assert trainer.global_step == 8  # both epochs ran on the re-created loader
    assert prepared is not train and isinstance(prepared.worker_init_fn, WorkerSignals)
    assert prepared.worker_init_fn.user_fn is worker_init_fn and prepared.sampler is train.sampler


def test_a_loader_that_needs_pinning_is_re_created_with_its_sampler():
    class Subclassed(DataLoader):
        pass

    for cls in (DataLoader, Subclassed):
        user = cls(make_dataset(8), batch_size=4, shuffle=True, drop_last=True)
        before = dict(user.__dict__)
        pinned = prepare_loader(user, pin_memory=True)
        assert pinned is not user and pinned.pin_memory and type(pinned) is cls
        assert pinned.sampler is user.sampler and (pinned.batch_size, pinned.drop_last) == (4, True)
        assert user.__dict__ == before
    dataset = make_dataset(8)
    custom = DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), 3, drop_last=False))
    assert prepare_loader(custom, pin_memory=True).batch_sampler is custom.batch_sampler
    plain = DataLoader(make_dataset(8), batch_size=4)
    assert prepare_loader(plain, pin_memory=False) is plain  # nothing to change: the user's own


@pytest.mark.parametrize("compile_", [False, {"backend": "eager"}])  # eager: dynamo without codegen
def test_nothing_is_stamped_on_the_model_and_it_is_compiled_once(tmp_path, compile_):
    torch._dynamo.reset()
    model = make_model()
    attributes = dict(vars(model))
    watch = CompiledWatch()
    trainer = fast_trainer(default_root_dir=tmp_path, max_steps=2, compile=compile_, callbacks=[watch])
    before = graphs_compiled()  # dynamo's count is per process: earlier tests' graphs are in it
    trainer.fit(model, DataLoader(make_dataset(16), batch_size=8))
    assert watch.compiled == ({""} if compile_ else set())  # the model's call ran compiled in the fit
    graphs = graphs_compiled()
    assert (graphs > before) == bool(compile_)
    trainer.fit(model, DataLoader(make_dataset(16), batch_size=8))
    assert graphs_compiled() == graphs  # the second fit compiled nothing new: surge kept the compiled call
    assert not [name for name in set(vars(model)) - set(attributes) if name.startswith("_surge")]
    assert set(vars(model)) - set(attributes) <= MODULE_SLOTS  # no `_compiled_call_impl` after the fit
    assert "_compiled_call_impl" not in vars(model) and "forward" not in vars(model)


# -- every object a user hands in, for every way a fit can change how it runs ----------------------
# A running stage fills the Module's own slots (set through `Module._attach`, surge's one writer of
# them), and `module.hparams` makes its table when first read (as Lightning's does); surge's
# Callback base keeps the module its `log` writes to. Those are the base classes' own fields.
# Everything else must be as the user left it.
MODULE_SLOTS = {"_trainer", "_results", "_device", "_optimizer_steps", "_hparams"}
CALLBACK_SLOTS = {"_logging_module"}
# compile=True and the per-block scope put surge's compiled call in the slot nn.Module declares for
# it (`_compiled_call_impl`) for the stage only: it is gone when the fit ends (checked below).


def _plain(value: Any) -> Any:
    """How a value compares: plain scalars by type and value, anything else by type and identity."""
    if value is None or isinstance(value, bool | int | float | str):
        return (type(value), value)
    return (type(value), id(value))


def held(obj: Any, skip: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    """What `obj` holds: every attribute, containers one level deep (so a hook registered into a
    module's hook table, or a parameter swapped, shows), the rest by identity."""
    state = {}
    for key, value in vars(obj).items():
        if key in skip:
            continue
        if isinstance(value, dict):
            state[key] = (type(value), {k: _plain(v) for k, v in value.items()})
        elif isinstance(value, list | tuple | set | frozenset):
            state[key] = (type(value), [_plain(v) for v in value])
        else:
            state[key] = _plain(value)
    return state


def group_types(opt: torch.optim.Optimizer) -> list[dict[str, type]]:
    return [{k: type(v) for k, v in group.items()} for group in opt.param_groups]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.lin(x))


class Handed(surge.Module):
    """Linear -> 2 identical blocks (for the per-block scope) -> Linear; records its optimizers and
    scheduler as `configure_optimizers` built them in `built`, a dict the test owns."""

    def __init__(self, built: SimpleNamespace, fused: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.out = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.fused, self.built = fused, built

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        if self.fused:
            opt: torch.optim.Optimizer = torch.optim.AdamW(self.parameters(), lr=0.01, fused=True)
        else:
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        self.built.opt, self.built.sched = opt, sched
        self.built.opt_held = held(opt, {"state", "param_groups", "_opt_called"})
        self.built.groups, self.built.sched_held = (
            group_types(opt),
            {k: type(v) for k, v in vars(sched).items()},
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Watcher(surge.callbacks.Callback):
    """A user's callback: looks at the optimizer in the middle of the fit (and, when asked, writes a
    checkpoint there); what it sees goes to `seen`, which the test owns."""

    def __init__(self, seen: SimpleNamespace, checkpoint: Path | None = None) -> None:
        self.seen, self.checkpoint = seen, checkpoint

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        opt = trainer.optimizers[0]
        self.seen.lr_types.update(type(g["lr"]) for g in opt.param_groups)
        self.seen.opt_keys.update(vars(opt))
        if self.checkpoint is not None and batch_idx == 1:
            trainer.save_checkpoint(self.checkpoint)


MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "compile forward": {"compile": {"backend": "eager"}},
    "compile step": {"compile": {"scope": "step", "backend": "eager"}},
    "compile regions": {"compile": {"scope": "regions", "backend": "eager"}},
    "activation checkpointing": {"activation_checkpointing": [Block]},
    "fp16 mixed": {"precision": surge.precision.MixedPrecision(torch.float16, "cpu")},
    "non-finite guard, fused": {"on_nonfinite": "skip"},
}


STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")
# What FSDP's `fully_shard` does to a model by its nature, and nothing else is allowed under it:
# every module it manages is flagged with these two attributes;
FSDP_FLAGS = {"_fsdp_use_orig_params", "_is_fsdp_managed_module"}
# a module holding parameters has them replaced by DTensors (this rank's shard) and state-dict hooks
# added; a unit (a module sharded on its own) becomes `FSDP<Class>` (a subclass with torch's
# FSDPModule mixin), with FSDP's state under `__composable_api_state_key_*` and its forward hooks.
FSDP_PARAM_TABLES = {
    "_parameters",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
}
FSDP_UNIT_TABLES = {"_forward_hooks", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"}


def what_fsdp_changed(
    name: str, m: torch.nn.Module, kind: type, before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Checks that FSDP changed `m` (held `before`, `after` the fit) only as it does by its nature,
    and returns both without those changes, to be compared as for any other strategy. The root is
    never a unit: surge's own wrapper is FSDP's root, so the user's model keeps its class."""
    unit = type(m) is not kind
    if unit:
        assert name and issubclass(type(m), kind) and type(m).__name__ == f"FSDP{kind.__name__}", name
        assert any(base.__name__ == "FSDPModule" for base in type(m).__mro__), name
    added = set(after) - set(before)
    state_keys = {k for k in added if k.startswith("__composable_api_state_key_")}
    assert added - state_keys == FSDP_FLAGS and (bool(state_keys) == unit), (name, added)
    changed = {k for k in before if after[k] != before[k]}
    allowed = (FSDP_PARAM_TABLES if m._parameters else set()) | (FSDP_UNIT_TABLES if unit else set())
    if "_modules" in changed:  # a child's class became FSDP<Class>: the same child objects, in order
        ids = [[ident for _, ident in table[1].values()] for table in (before["_modules"], after["_modules"])]
        assert ids[0] == ids[1], name
        allowed.add("_modules")
    assert changed <= allowed, (name, changed - allowed)
    from torch.distributed.tensor import DTensor

    assert all(isinstance(p, DTensor) for p in m._parameters.values()), name
    assert list(m._parameters) == list(before["_parameters"][1]), name  # the same names
    kept = {k: v for k, v in before.items() if k not in changed}
    return kept, {k: v for k, v in after.items() if k in kept}


def fit_and_check(trainer_kwargs: dict[str, Any], tmp_path: Path, fused: bool = False) -> SimpleNamespace:
    """Fit a `Handed` model with loaders and a callback, then check every one of them is as the user
    handed it in; returns what the callback saw during the fit."""
    torch._dynamo.reset()
    built, seen = SimpleNamespace(), SimpleNamespace(lr_types=set(), opt_keys=set())
    model = Handed(built, fused=fused)
    mid = tmp_path / "mid.ckpt"
    callback = Watcher(seen, checkpoint=mid)
    train = DataLoader(make_dataset(24), batch_size=8)
    val = DataLoader(make_dataset(8, seed=1), batch_size=8)
    modules = {name: (type(m), held(m, MODULE_SLOTS)) for name, m in model.named_modules()}
    loaders, callback_held = {"train": dict(vars(train)), "val": dict(vars(val))}, held(callback)
    watch = CompiledWatch()  # surge's own check that the calls ran compiled: not a user's object
    trainer = fast_trainer(
        default_root_dir=tmp_path, max_steps=3, callbacks=[callback, watch], **trainer_kwargs
    )
    trainer.fit(model, train, val)
    scope = (trainer_kwargs.get("compile") or {}).get(
        "scope", "forward" if trainer_kwargs.get("compile") else None
    )
    expected = {"forward": {""}, "regions": {"blocks.0", "blocks.1"}}.get(scope, set())
    assert watch.compiled == expected, (scope, watch.compiled)  # they ran compiled, during the fit

    sharded = getattr(trainer.strategy, "name", None) == "fsdp"
    for name, m in model.named_modules():
        kind, before = modules[name]
        after = held(m, MODULE_SLOTS)
        assert "forward" not in vars(m), name  # the class's forward, never one set on the module
        assert "_compiled_call_impl" not in vars(m), name  # compiled calls are surge's, for a stage
        assert not set(STEP_METHODS) & set(vars(m)), name  # the steps are the class's too
        if sharded:
            before, after = what_fsdp_changed(name, m, kind, before, after)
            kind = type(m)  # checked there: FSDP<its class>, on a unit only
        assert type(m) is kind, name
        assert set(after) == set(before), (name, set(after) ^ set(before))
        assert {k: v for k, v in after.items() if k in before} == before, name

    opt, sched = built.opt, built.sched
    assert held(opt, {"state", "param_groups", "_opt_called"}) == built.opt_held  # `step` too
    assert not [k for k in vars(opt) if "surge" in k or k in ("grad_scale", "found_inf")]
    assert group_types(opt) == built.groups and type(opt.param_groups[0]["lr"]) is float
    assert {k: type(v) for k, v in vars(sched).items()} == built.sched_held
    assert sched.optimizer is opt and all(type(lr) is float for lr in sched.get_last_lr())
    assert {"train": vars(train), "val": vars(val)} == loaders
    assert set(held(callback)) - set(callback_held) <= CALLBACK_SLOTS
    assert {k: v for k, v in held(callback).items() if k in callback_held} == callback_held
    assert seen.lr_types == {float} and not seen.opt_keys & {"grad_scale", "found_inf"}

    if sharded:  # a sharded checkpoint (a folder of shards): written, not read back here
        assert mid.exists() and trainer.global_step == 3
        return seen
    saved = torch.load(mid, weights_only=True)  # written in the middle of the fit
    assert list(saved["state_dict"]) == list(model.state_dict())  # the user's keys: no `_orig_mod.`
    assert all(type(g["lr"]) is float for g in saved["optimizer_states"][0]["param_groups"])
    assert all(type(lr) is float for lr in saved["lr_schedulers"][0]["_last_lr"])
    assert trainer.global_step == 3
    return seen


@pytest.mark.parametrize("mode", list(MODES))
def test_every_object_handed_in_is_as_it_was_after_fit(tmp_path, mode):
    fit_and_check(MODES[mode], tmp_path, fused=mode.startswith("non-finite"))


DISTRIBUTED = {  # name: (strategy, processes)
    "ddp, 2 processes": ("ddp", 2),
    "fsdp, 1 process": ("fsdp", 1),  # the root unit only (surge's wrapper): no class of the user's changes
    "fsdp by block, 2 processes": ("fsdp-blocks", 2),  # each Block its own unit: FSDPBlock
}


@pytest.mark.slow
@pytest.mark.parametrize("run", list(DISTRIBUTED))
def test_gloo_processes_leave_every_object_as_it_was(tmp_path, monkeypatch, run):
    """Each rank checks its own objects (this file run as the script, below); under FSDP, the
    changes FSDP makes by its nature are named and checked in `what_fsdp_changed`."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "distributed"))
    from jobs import PRELOAD, clean_env

    import script_server

    strategy, processes = DISTRIBUTED[run]
    argv = [__file__, str(tmp_path), strategy, str(processes)]  # its ranks are forked as the run is
    proc = script_server.run(
        sys.executable, argv, cwd=tmp_path, env=clean_env(), preload=PRELOAD, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("rank-*.ok")) == [f"rank-{r}.ok" for r in range(processes)]


if __name__ == "__main__":  # one rank of the test above
    from surge.strategies.fsdp import FSDPStrategy

    root, name, processes = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    strategies: dict[str, Any] = {"ddp": "ddp", "fsdp": "fsdp", "fsdp-blocks": FSDPStrategy(shard={Block})}
    options: dict[str, Any] = {"strategy": strategies[name], "devices": processes, "max_epochs": 2}
    if name == "ddp":
        options["compile"] = {"scope": "step", "backend": "eager"}
    fit_and_check(options, root)
    (root / f"rank-{int(os.environ.get('RANK', 0))}.ok").write_text("ok")


def test_dp_refused_on_cpu_and_its_replica_step_puts_the_modules_slots_back():
    """strategy="dp" runs on CUDA only (refused on CPU before any work, tests/test_dp.py); what it
    runs on the user's module, the replica step (DataParallel on one GPU runs the module itself),
    lends the module a log buffer and puts its own slots back."""
    from surge.strategies.dp import _ReplicaStep

    with pytest.raises(surge.errors.MisconfigurationError, match="strategy='dp'"):
        surge.Trainer(strategy="dp", accelerator="cpu")
    model = Handed(SimpleNamespace())
    modules = {name: (type(m), held(m)) for name, m in model.named_modules()}
    batch = next(iter(DataLoader(make_dataset(8), batch_size=8)))
    _ReplicaStep(model)(batch, 0)
    assert {name: (type(m), held(m)) for name, m in model.named_modules()} == modules


@pytest.mark.skipif(not torch.cuda.is_available(), reason="strategy='dp' needs CUDA devices")
def test_dp_on_cuda_leaves_every_object_as_it_was(tmp_path):
    fit_and_check({"strategy": "dp", "accelerator": "cuda", "devices": 1}, tmp_path)


def test_only_the_module_writes_its_slots():
    """Parsed, not grepped: outside src/surge/module/, no assignment targets a Module slot of an
    object other than `self` (they go through `Module._attach`)."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "surge"
    fields = {"_trainer", "_results", "_device", "_optimizer_steps"}
    found = []
    for path in src.rglob("*.py"):
        if path.parent.name == "module" and path.parent.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            targets = [*targets, node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else targets
            for target in targets:
                for t in ast.walk(target):
                    if not isinstance(t, ast.Attribute) or t.attr not in fields:
                        continue
                    if not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        found.append(f"{path.relative_to(src)}:{node.lineno}")
    assert not found, f"Module slots assigned outside Module._attach: {found}"
