"""compile="step" (training step and optimizer step compiled) and compile="regions" (each repeated
block compiled), against eager training; the recompilation watch; bad `compile=` values.

Most tests use backend="aot_eager" (dynamo capture and AOTAutograd's joint graph, without
inductor's code generation) since they are about surge's plumbing; one uses inductor.
Tolerance: compiled and eager weights agree to atol=rtol=1e-5 in fp32 with SGD (reordered
reductions), 1e-4 with AdamW (its update divides by sqrt(v), so a last-bit difference in a near-zero
gradient moves that weight by up to ~lr * 1e-3), and 1e-2 under autocast (16-bit matmuls).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import script_server
import surge
from helpers import CompiledWatch, fast_trainer
from surge.speed.compiling import CompiledStep, CompileWatch, compile_spec, repeated_blocks

AOT = {"scope": "step", "backend": "aot_eager"}


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin, self.norm = nn.Linear(width, width), nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.lin(self.norm(x)))


class Stack(surge.Module):
    """Linear in -> 3 identical blocks -> Linear out; optimizer and scheduler chosen per test."""

    def __init__(self, optimizer: str = "sgd", scheduler: bool = False, width: int = 16) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(8, width), nn.Linear(width, 3)
        self.blocks = nn.ModuleList(Block(width) for _ in range(3))
        self.optimizer, self.scheduler = optimizer, scheduler

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        if self.optimizer == "adamw":
            opt: torch.optim.Optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        else:
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        if not self.scheduler:
            return opt
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _loader(n: int = 48, batch_size: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)), batch_size
    )


def _train(compile_, steps: int = 4, **kw) -> tuple[Stack, surge.Trainer]:
    torch.manual_seed(0)
    model = Stack(**{k: kw.pop(k) for k in ("optimizer", "scheduler") if k in kw})
    trainer = fast_trainer(max_steps=steps, compile=compile_, **kw)
    trainer.fit(model, _loader())
    return model, trainer


def _assert_same(a: nn.Module, b: nn.Module, tol: float = 1e-5) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=tol, rtol=tol, msg=name)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_compiled_step_equals_eager(optimizer):
    eager, _ = _train(False, optimizer=optimizer)
    compiled, trainer = _train(AOT, optimizer=optimizer)
    _assert_same(compiled, eager, tol=1e-5 if optimizer == "sgd" else 1e-4)
    opt = trainer.optimizers[0]
    assert isinstance(trainer.fit_loop.ctx.optim.compiled_steps[id(opt)], CompiledStep)  # ran compiled
    assert "step" not in vars(opt) and not [k for k in vars(opt) if "surge" in k]  # the optimizer as built
    assert isinstance(
        trainer.fit_loop.ctx.training_step,
        torch._dynamo.eval_frame.OptimizedModule | type(torch.compile(lambda: None, backend="eager")),
    )


class Tiny(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 3)

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_compiled_step_with_inductor_equals_eager():
    eager, compiled = Tiny(), Tiny()
    fast_trainer(max_steps=2).fit(eager, _loader())
    fast_trainer(max_steps=2, compile="step").fit(compiled, _loader())  # inductor: generated C++ on CPU
    _assert_same(compiled, eager)


def test_accumulation_clipping_and_a_scheduler_equal_eager():
    kw = {"accumulate_grad_batches": 3, "gradient_clip_val": 0.05, "scheduler": True, "optimizer": "adamw"}
    eager, eager_trainer = _train(False, steps=2, **kw)
    compiled, trainer = _train(AOT, steps=2, **kw)
    _assert_same(compiled, eager, tol=1e-4)
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert type(lr) is float  # the user's type; the compiled step was lent a 0-d tensor
    assert lr == pytest.approx(eager_trainer.optimizers[0].param_groups[0]["lr"])
    (step,) = trainer.fit_loop.ctx.optim.compiled_steps.values()
    ((tensor, value),) = step._rates.values()  # filled by the scheduler's rate: no recompile per change
    assert isinstance(tensor, torch.Tensor) and float(tensor) == pytest.approx(value)
    assert value == pytest.approx(2 * lr)  # the last step's rate, before the scheduler halved it
    assert trainer.global_step == 2


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_on_cpu_equals_eager(precision):
    eager, _ = _train(False, steps=3, precision=precision)
    compiled, _ = _train(AOT, steps=3, precision=precision)
    _assert_same(compiled, eager, tol=1e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fp16 GradScaler path on CUDA needs a GPU")
def test_fp16_grad_scaler_on_cuda_equals_eager():
    eager, _ = _train(False, steps=3, precision="16-mixed", accelerator="cuda")
    compiled, trainer = _train(AOT, steps=3, precision="16-mixed", accelerator="cuda")
    assert trainer.precision_plugin.scaler is not None
    _assert_same(compiled, eager, tol=1e-2)


def test_a_state_dict_saved_with_compiled_step_loads_without_compile(tmp_path):
    options = {"scope": "step", "backend": "eager"}
    kw = {"enable_checkpointing": True, "default_root_dir": tmp_path, "scheduler": True, "optimizer": "adamw"}
    compiled, trainer = _train(options, steps=3, **kw)
    path = trainer.checkpoint_callback.best_model_path
    state = torch.load(path, weights_only=True)["state_dict"]
    assert list(state) == list(Stack().state_dict())  # no `_orig_mod.` or wrapper prefixes
    plain = Stack.load_from_checkpoint(path)
    _assert_same(plain, compiled, tol=0)
    resumed = fast_trainer(max_steps=5, enable_checkpointing=True, default_root_dir=tmp_path / "resume")
    saved = torch.load(path, weights_only=True)
    assert type(saved["optimizer_states"][0]["param_groups"][0]["lr"]) is float  # the user's type
    assert all(type(lr) is float for lr in saved["lr_schedulers"][0]["_last_lr"])
    resumed.fit(Stack(scheduler=True, optimizer="adamw"), _loader(), ckpt_path=path)  # eager
    assert resumed.global_step == 5
    assert float(resumed.optimizers[0].param_groups[0]["lr"]) == pytest.approx(1e-2 * 0.5**5)


def test_regions_compiles_each_repeated_block(caplog):
    eager, _ = _train(False, steps=3)
    watch = CompiledWatch()
    with caplog.at_level(logging.INFO, logger="surge"):
        compiled, _ = _train({"scope": "regions", "backend": "aot_eager"}, steps=3, callbacks=[watch])
    _assert_same(compiled, eager)
    assert watch.compiled == {"blocks.0", "blocks.1", "blocks.2"}  # each block, nothing else, ran compiled
    assert not [name for name, m in compiled.named_modules() if "_compiled_call_impl" in vars(m)]
    assert "3 blocks compiled (3 x Block in blocks)" in caplog.text
    assert list(compiled.state_dict()) == list(Stack().state_dict())


def test_repeated_blocks_are_found_outermost_first():
    model = nn.Sequential(nn.Linear(2, 2), nn.ModuleList([Block(2), Block(2)]), nn.Sequential(nn.ReLU()))
    assert [(name, len(blocks)) for name, blocks in repeated_blocks(model)] == [("1", 2)]
    same_class = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Sequential(nn.Linear(2, 2)))
    assert [len(b) for _, b in repeated_blocks(same_class)] == [2]  # two Sequentials: one class


class NoBlocks(Stack):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(16)])  # one block: nothing repeated


def test_regions_without_repeated_blocks_is_refused():
    with pytest.raises(surge.SurgeError, match=r"compile='regions' found no repeated blocks in NoBlocks"):
        fast_trainer(max_steps=1, compile="regions").fit(NoBlocks(), _loader())


class VaryingSizes:
    """A batch sampler whose batches have other sizes each epoch (8, 7, 6, then 5, 4, 3): with
    dynamic=False every batch of the second epoch compiles a new graph."""

    def __init__(self) -> None:
        self.epoch = 0

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        sizes = [8 - 3 * self.epoch - i for i in range(3)]
        self.epoch += 1
        return iter([list(range(n)) for n in sizes])


def _fit_two_epochs(compile_, varying: bool) -> list[warnings.WarningMessage]:
    data = _loader().dataset
    loader = DataLoader(data, batch_sampler=VaryingSizes()) if varying else DataLoader(data, batch_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast_trainer(max_epochs=2, limit_train_batches=3, compile=compile_).fit(Stack(), loader)
    return [w for w in caught if "recompiled" in str(w.message)]


def test_recompilations_after_the_first_epoch_are_warned_about_once():
    options = {"scope": "step", "backend": "eager", "dynamic": False}
    found = _fit_two_epochs(options, varying=True)
    assert len(found) == 1
    message = str(found[0].message)
    assert "graphs were recompiled in epoch 1" in message and "size mismatch" in message
    assert _fit_two_epochs(options, varying=False) == []  # stable shapes: compiled once, no warning


def test_compile_time_is_reported_once(caplog):
    with caplog.at_level(logging.INFO, logger="surge"):
        options = {"scope": "step", "backend": "eager"}
        fast_trainer(max_epochs=2, limit_train_batches=2, compile=options).fit(Stack(), _loader())
    lines = [r.getMessage() for r in caplog.records if "graphs compiled in" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("compile='step':")
    assert CompileWatch("step").seconds == 0.0


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("steps", r"compile='steps' is not valid: one of \('forward', 'step', 'regions'\)"),
        ({"scope": "graph"}, r"\"scope\" one of \('forward', 'step', 'regions'\) \(got 'graph'\)"),
        ({"scope": "step", "modee": "max-autotune"}, r"\['modee'\] unknown"),
        (1, "compile=1 is not valid"),
    ],
)
def test_bad_compile_values_are_refused(value, match):
    with pytest.raises(surge.SurgeError, match=match):
        surge.Trainer(compile=value)


def test_compile_spec_shorthands():
    assert compile_spec(True).scope == "forward" and compile_spec(False) is None
    assert compile_spec("regions").scope == "regions"
    spec = compile_spec({"scope": "step", "backend": "eager", "dynamic": False})
    assert (spec.scope, spec.options) == ("step", {"backend": "eager", "dynamic": False})


DDP_SCRIPT = Path(__file__).with_name("distributed") / "train_script.py"


def _ddp_run(tmp_path: Path, name: str, devices: int, batch_size: int, compile_) -> dict:
    out, src = tmp_path / f"{name}.pt", Path(__file__).resolve().parents[1] / "src"
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")
    }
    env.update(PYTHONPATH=f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    args = ["--devices", str(devices), "--batch-size", str(batch_size), "--samples", "32", "--max-steps", "4"]
    argv = [str(DDP_SCRIPT), "--root", str(tmp_path / name), "--out", str(out), *args]
    argv += ["--accumulate", "2", "--compile", json.dumps(compile_)]
    # the first process is forked from a server that imported torch and surge (its launcher's ranks too)
    proc = script_server.run(
        sys.executable, argv, cwd=tmp_path, env=env, preload=("torch", "surge"), timeout=180
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


@pytest.mark.slow
def test_ddp_two_processes_compiled_equal_one_eager_with_twice_the_batch(tmp_path):
    one = _ddp_run(tmp_path, "one", 1, 8, False)
    two = _ddp_run(tmp_path, "two", 2, 4, {"scope": "step", "backend": "aot_eager"})
    assert one["global_step"] == two["global_step"] == 2 and two["world_size"] == 2
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(two["state_dict"][key], value, atol=1e-5, rtol=1e-5)


class ManualTiny(Tiny):
    """Tiny stepping its optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = nn.functional.cross_entropy(self.lin(batch[0]), batch[1])
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


def test_manual_optimization_under_compile_step_says_what_is_compiled():
    eager, compiled = ManualTiny(), ManualTiny()
    fast_trainer(max_steps=3).fit(eager, _loader())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fast_trainer(max_steps=3, compile={"scope": "step", "backend": "eager"})
        trainer.fit(compiled, _loader())
    said = [str(w.message) for w in caught if "manual optimization" in str(w.message)]
    assert len(said) == 1 and "compiles your training_step as written" in said[0]
    assert "each optimizer's step() on its own" in said[0]
    assert trainer.global_step == 3
    opt = trainer.optimizers[0]
    assert isinstance(trainer.fit_loop.ctx.optim.compiled_steps[id(opt)], CompiledStep)  # as the warning says
    _assert_same(compiled, eager)
    with warnings.catch_warnings(record=True) as caught:  # automatic optimization: nothing to say
        warnings.simplefilter("always")
        fast_trainer(max_steps=1, compile={"scope": "step", "backend": "eager"}).fit(Tiny(), _loader())
    assert not [w for w in caught if "manual optimization" in str(w.message)]
