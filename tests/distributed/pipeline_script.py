"""Pipeline-parallel jobs for the distributed tests: `python pipeline_script.py --world 2 --out f.pt`
runs every scenario of that world size one after the other (each a fit on `--world` processes) and
writes what rank zero recorded; `--world 1` runs the one-process references.

The model is a 7-layer nn.Sequential (`pipeline_layers()`), trained with AdamW, accumulation 4 (the
micro-batches of each optimizer step) and clipping at a norm of 0.5; each scenario records the
gathered weights, the rows the logger got, every rank's epoch metrics, the split shown, what its
refusals said, and, for the scenarios run under the doctor, what it found.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

import surge
from surge.strategies import ModelParallel

SAMPLES, EPOCHS, ACCUMULATE, CLIP = 128, 3, 4, 0.5  # 128 / 8 = 16 batches: 4 AdamW steps an epoch (12 in all)


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.Sequential(
            nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
        )  # fmt: skip

    def configure_model(self):
        mesh = self.device_mesh
        if mesh is None or mesh["tensor_parallel"].size() == 1:
            return
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        col, row = ColwiseParallel(), RowwiseParallel()  # each Linear pair: split columns, then rows
        parallelize_module(self.layers, mesh["tensor_parallel"], {"0": col, "2": row, "4": col, "6": row})

    def pipeline_layers(self) -> nn.Sequential:
        return self.layers

    def pipeline_loss(self, output, target):
        loss = F.cross_entropy(output, target)
        self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        self.log("seen", float(len(target)), reduce_fx="sum", on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def forward(self, x):
        return self.layers(x)

    def training_step(self, batch, batch_idx):  # one process: the same computation, not split
        x, y = batch
        return self.pipeline_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.02)


class OwnStages(Net):
    """Stages the module builds itself: layers 0-4 and 5-6 (not the balanced 0-3 and 4-6)."""

    pipeline_layers = None  # type: ignore[assignment]

    def pipeline_stages(self, stage_indices, num_stages):
        bounds = [range(0, 5), range(5, 7)]
        mine = {i for s in stage_indices for i in bounds[s]}
        for i in range(len(self.layers)):
            if i not in mine:
                self.layers.register_module(str(i), None)  # another rank's
        return [nn.Sequential(*(self.layers[i] for i in bounds[s])) for s in stage_indices]


class Pair(nn.Module):
    """Returns a tuple: at the end of a stage, torch sends its items as the next stage's inputs."""

    def forward(self, x):
        return x, torch.tanh(x)


class Join(nn.Module):
    def forward(self, pair):
        a, b = pair
        return a + b


class TupleNet(Net):
    """A tuple crosses the stage boundary (layers 0-3 | 4-6: Pair ends stage 0, Join starts stage 1)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.Sequential(
            nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), Pair(), Join(), nn.Tanh(), nn.Linear(16, 3)
        )  # fmt: skip


class Rows(surge.loggers.Logger):
    """Every row the loggers get (rank zero)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, {k: float(v) for k, v in metrics.items() if k != "epoch"}))


class Outputs(surge.callbacks.Callback):
    """The loss `on_train_batch_end` gets, per batch (this rank's)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


@dataclasses.dataclass
class Batch:
    """A batch of the user's own class (not a pytree): its fields are what the ranks compare."""

    x: torch.Tensor
    y: torch.Tensor


class OddBatches(Net):
    """Reads (x, y) from a dict or a Batch; the batch's other entries only ride along."""

    def training_step(self, batch, batch_idx):
        x, y = (batch["x"], batch["y"]) if isinstance(batch, dict) else (batch.x, batch.y)
        return F.cross_entropy(self(x), y)


def odd(items) -> dict:
    """The same on every rank: both infinities (their sum is NaN), a sparse, a complex, a string."""
    x, y = torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items])
    ends = torch.tensor([math.inf, -math.inf, math.inf, -math.inf])
    return {
        "x": x,
        "y": y,
        "ends": ends,
        "sparse": x.to_sparse(),
        "complex": torch.complex(x, x),
        "name": "a",
    }


def rank_shifted(items) -> Batch:
    """A Batch whose inputs differ on each rank."""
    x, y = torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items])
    return Batch(x + int(os.environ.get("RANK", "0")), y)


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 6, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


class Validated(Net):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), sync_dist=True)


def validated(root: Path, loader: DataLoader) -> str:
    """A validation run on a 1x2 tensor-parallel mesh, reading `loader` as given (the val metrics, or
    what refused it)."""
    strategy = ModelParallel(data_parallel=1, tensor_parallel=2)
    trainer = surge.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, default_root_dir=root, logger=False,
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
    )  # fmt: skip
    return refused(lambda: trainer.validate(Validated(), loader, verbose=False))


def shuffled(seed: int) -> DataLoader:
    """Batches of 8 in an order drawn from a generator seeded with `seed` (the loader's own)."""
    return DataLoader(data(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(seed))


def fit(
    root: Path,
    strategy,
    devices: int,
    batch_size: int,
    epochs=EPOCHS,
    ckpt=None,
    precision="32-true",
    net=Net,
    accumulate=ACCUMULATE,
    loader=None,
    **speed,
) -> dict:
    surge.seed_everything(0)
    rows, outputs = Rows(), Outputs()
    checkpoints = surge.callbacks.ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1)
    callbacks = [checkpoints, outputs]
    trainer = surge.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_epochs=epochs,
        accumulate_grad_batches=accumulate, gradient_clip_val=CLIP, default_root_dir=root,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        log_every_n_steps=1, logger=rows, callbacks=callbacks, limit_val_batches=0, precision=precision,
        **speed,
    )  # fmt: skip
    model = net()
    trainer.fit(model, loader or DataLoader(data(), batch_size=batch_size), ckpt_path=ckpt)
    return record(trainer, model, rows, outputs)


def record(trainer, model, rows, outputs) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))  # this rank's stages
    weights = {k: v.detach().cpu().clone() for k, v in full.items()}
    mine = {k: float(v) for k, v in trainer.callback_metrics.items()}, outputs.losses
    everyone = (
        trainer.strategy.all_gather_object((weights, mine)) if trainer.world_size > 1 else [(weights, mine)]
    )
    weights = {k: v for w, _ in everyone for k, v in w.items()}
    exported = Path(trainer.default_root_dir) / "model.safetensors"
    trainer.export(exported)  # every process calls it; rank zero writes every stage's layers
    return {
        "state_dict": weights,
        "exported": _read_safetensors(exported) if trainer.is_global_zero else {},
        "metrics": [m for _, (m, _) in everyone],  # every rank's
        "outputs": [o for _, (_, o) in everyone],  # every rank's
        "rows": rows.rows,
        "global_step": trainer.global_step,
        "split": getattr(trainer.strategy, "pipeline_split", None),
        "ckpts": sorted(str(p) for p in (Path(trainer.default_root_dir) / "ckpt").glob("*.ckpt")),
        "doctor": doctor(trainer.profiler),
    }


def doctor(profiler) -> dict | None:
    """What the doctor found (rank zero's report), when the fit was profiled."""
    report = getattr(profiler, "report", None)
    if not report:
        return None
    return {key: report.get(key) for key in ("findings", "mesh", "pipeline", "bottleneck")}


def diagnosed(root: Path, accumulate: int) -> dict:
    """One epoch of 1F1B on 2 stages with `accumulate` micro-batches per step, under the doctor."""
    profiler = surge.profiler.SimpleProfiler(measure_workers=False)
    return fit(root, pipeline("1F1B"), 2, 8, epochs=1, accumulate=accumulate, profiler=profiler)


def _read_safetensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def refused(fn) -> str:
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the message is what the test reads
        return f"{type(err).__name__}: {err}"
    return "not refused"


def pipeline(schedule: str, pp: int = 2, dp: int = 1, tp: int = 1) -> ModelParallel:
    return ModelParallel(
        pipeline_parallel=pp, data_parallel=dp, tensor_parallel=tp, pipeline_schedule=schedule
    )


def two(root: Path) -> dict:
    out = {name: fit(root / name, pipeline(name), 2, 8) for name in ("GPipe", "1F1B", "Interleaved1F1B")}
    # Resume on the same layout: 2 epochs, then the third from the checkpoint.
    half = fit(root / "half", pipeline("1F1B"), 2, 8, epochs=2)
    out["resumed"] = fit(root / "resumed", pipeline("1F1B"), 2, 8, ckpt=half["ckpts"][-1])
    out["half_ckpts"] = half["ckpts"]
    out["own_stages"] = fit(root / "own", pipeline("1F1B"), 2, 8, net=OwnStages)
    out["bf16"] = fit(root / "bf16", pipeline("1F1B"), 2, 8, precision="bf16-mixed")
    # each stage's forward compiled (aot_eager: AOTAutograd's graphs, no C++ build)
    out["compiled"] = fit(root / "compiled", pipeline("1F1B"), 2, 8, compile={"backend": "aot_eager"})
    out["doctor2"], out["doctor8"] = diagnosed(root / "doctor2", 2), diagnosed(root / "doctor8", 8)
    out["step_compile"] = refused(lambda: fit(root / "step", pipeline("1F1B"), 2, 8, compile="step"))
    out["tuple"] = fit(root / "tuple", pipeline("GPipe"), 2, 8, net=TupleNet, accumulate=1)
    out["other_layout"] = refused(
        lambda: fit(root / "other", pipeline("Interleaved1F1B"), 2, 8, ckpt=half["ckpts"][-1])
    )
    # A loader surge does not shard, shuffled by each rank's own seed: the stages (or the
    # tensor-parallel ranks) would pair one sample's input with another's target.
    own_order = dict(use_distributed_sampler=False, loader=shuffled(int(os.environ.get("RANK", "0"))))
    out["stages_differ"] = refused(lambda: fit(root / "differ", pipeline("1F1B"), 2, 8, **own_order))
    tensor_parallel = ModelParallel(data_parallel=1, tensor_parallel=2)
    out["validation_differs"] = validated(root / "val_differ", shuffled(int(os.environ.get("RANK", "0"))))
    out["validation_alike"] = validated(root / "val_alike", shuffled(5))
    out["tensor_parallel_differs"] = refused(
        lambda: fit(root / "tp_differ", tensor_parallel, 2, 8, **own_order)
    )
    # the same order on every rank (a generator seeded alike): trains as the sampled run does
    out["own_sampler"] = fit(
        root / "own_sampler", pipeline("1F1B"), 2, 8, use_distributed_sampler=False, loader=shuffled(5)
    )
    # 128 samples in batches of 11: 12 batches (3 windows of 4), the last of 7
    out["short_batch"] = refused(lambda: fit(root / "short", pipeline("1F1B"), 2, 11, epochs=1))
    # the same short batch from a batch_sampler
    batches = BatchSampler(SequentialSampler(range(SAMPLES)), 11, drop_last=False)
    by_sampler = DataLoader(data(), batch_sampler=batches)
    out["short_batch_sampler"] = refused(
        lambda: fit(root / "bs", pipeline("1F1B"), 2, 0, 1, loader=by_sampler)
    )
    # batches alike on both ranks whatever they hold: train; a Batch of the user's that differs: refused
    odd_batches = dict(epochs=1, net=OddBatches, loader=DataLoader(data(), batch_size=8, collate_fn=odd))
    tp_odd = ModelParallel(data_parallel=1, tensor_parallel=2)
    out["odd_batches"] = fit(root / "odd", tp_odd, 2, 8, **odd_batches)
    shifted = dict(epochs=1, net=OddBatches, loader=DataLoader(data(), batch_size=8, collate_fn=rank_shifted))
    tp2 = ModelParallel(data_parallel=1, tensor_parallel=2)
    out["dataclass_differs"] = refused(lambda: fit(root / "dc", tp2, 2, 8, **shifted))
    return out


def four(root: Path) -> dict:
    return {
        "pp2dp2": fit(root / "pp2dp2", pipeline("1F1B", dp=2), 4, 4),
        "pp2tp2": fit(root / "pp2tp2", pipeline("GPipe", tp=2), 4, 8),
    }


def one(root: Path) -> dict:
    return {
        "reference": fit(root / "reference", "auto", 1, 8),
        "bf16": fit(root / "bf16", "auto", 1, 8, precision="bf16-mixed"),
        "tuple": fit(root / "tuple", "auto", 1, 8, net=TupleNet, accumulate=1),
        "shuffled": fit(root / "shuffled", "auto", 1, 8, loader=shuffled(5)),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = {1: one, 2: two, 4: four}[args.world](Path(args.root))
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(out, args.out)


if __name__ == "__main__":
    main()
