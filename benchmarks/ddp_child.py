"""One two-process DDP benchmark run (gloo on 127.0.0.1); rank 0 writes one JSON object to `--out`.

    raw:   python -m torch.distributed.run --nproc-per-node 2 benchmarks/ddp_child.py --contestant raw ...
    surge: python benchmarks/ddp_child.py --contestant surge ...   (surge starts rank 1 itself)

Every process warms up with a short fit, then times a fit of `--steps` optimizer steps on a freshly
built model, DDP wrapper and optimizer (surge: a fresh Trainer; its construction is not timed), between
two barriers. `--bench accumulate` accumulates `--accumulate` micro-batches per optimizer step and
counts DDP's bucket allreduces with a comm hook; `--no-sync off` synchronises every micro-batch
(for surge by replacing `trainer.strategy.no_sync` with a null context in this process).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import torch
import torch.distributed as dist
import torch.nn.functional as F
import workloads
from torch import Tensor, nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD = 2
BATCH = 64  # per rank
BATCHES_PER_RANK = 100  # per epoch; a multiple of every accumulation factor used
SAMPLER_SEED = 0  # the DistributedSampler seed; surge uses 0 too when seed_everything was not called
INPUT_SHAPE = {"mlp": (256,), "cnn": (1, 28, 28)}


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    contestant: str  # "raw" or "surge"
    bench: str  # "throughput" or "accumulate"
    model: str  # "mlp" or "cnn"
    steps: int  # timed optimizer steps
    warmup: int  # optimizer steps of the untimed warm-up fit
    accumulate: int  # micro-batches per optimizer step (1 for throughput)
    no_sync: bool  # skip the allreduce of non-final micro-batches
    bucket_view: bool  # raw only: DDP(gradient_as_bucket_view=...); surge's own default is True
    threads: int
    out: Path


@dataclass
class CommCounter:
    """State of the counting comm hook: bucket allreduces, the bytes they carried, the buckets seen."""

    calls: int = 0
    bytes: int = 0
    buckets: set[int] = field(default_factory=set)


def counting_allreduce(state: CommCounter, bucket: dist.GradBucket) -> torch.futures.Future[Tensor]:
    """Count one bucket allreduce, then run DDP's default allreduce on it."""
    buffer = bucket.buffer()
    state.calls += 1
    state.bytes += buffer.numel() * buffer.element_size()
    state.buckets.add(bucket.index())
    return allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None: the default process group


# DDP checks the hook's annotations as objects, and this module's are strings (postponed evaluation).
counting_allreduce.__annotations__ = get_type_hints(counting_allreduce)


# -- model and data, identical for every contestant -------------------------------------------------
def build_model(name: str) -> nn.Module:
    """MLP 256-1024-1024-10 (1.3 M parameters) or the CNN of workloads.py, from a seeded RNG."""
    if name == "cnn":
        return workloads.build_model("cnn")
    torch.manual_seed(workloads.SEED)
    return nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, workloads.CLASSES)
    )


def make_optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    """SGD(lr=0.05) for the MLP, Adam(lr=1e-3) for the CNN."""
    return torch.optim.SGD(params, lr=0.05) if name == "mlp" else torch.optim.Adam(params, lr=1e-3)


def samples(name: str, n: int, seed: int) -> TensorDataset:
    """`n` learnable samples: a fixed random template per class plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    shape = INPUT_SHAPE[name]
    templates = torch.randn(
        (workloads.CLASSES, *shape), generator=torch.Generator().manual_seed(workloads.SEED)
    )
    y = torch.randint(0, workloads.CLASSES, (n,), generator=g)
    return TensorDataset(templates[y] + 2.0 * torch.randn((n, *shape), generator=g), y)


def train_set(name: str) -> TensorDataset:
    """The training set: `BATCHES_PER_RANK` batches per rank per epoch."""
    return samples(name, WORLD * BATCH * BATCHES_PER_RANK, workloads.SEED + 1)


@torch.no_grad()
def held_out_loss(net: nn.Module, name: str) -> float:
    """Cross-entropy on a fixed batch outside the training set (read outside the timed region)."""
    x, y = samples(name, 4 * BATCH, workloads.SEED + 3).tensors
    return F.cross_entropy(net(x), y).item()


# -- contestants ----------------------------------------------------------------------------------
@dataclass
class Built:
    """A contestant ready to run: `fit()` trains and returns the optimizer steps it took."""

    fit: Callable[[], int]
    net: nn.Module  # the trained network (for the held-out loss)
    counter: CommCounter | None  # the comm hook's counts, when counting
    ddp_kwargs: dict[str, Any]  # what the DistributedDataParallel wrapper was given


def raw_contestant(cfg: Config, steps: int) -> Built:
    """The torchrun loop an expert writes: DistributedSampler + set_epoch, DDP, no per-step host reads."""
    net = build_model(cfg.model)
    dataset = train_set(cfg.model)
    sampler = DistributedSampler(
        dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True, seed=SAMPLER_SEED
    )
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    counter = CommCounter() if cfg.bench == "accumulate" else None
    k = cfg.accumulate
    ddp_kwargs = {"gradient_as_bucket_view": cfg.bucket_view}

    def fit() -> int:
        ddp = DistributedDataParallel(net, **ddp_kwargs)
        if counter is not None:
            ddp.register_comm_hook(counter, counting_allreduce)
        opt = make_optimizer(cfg.model, ddp.parameters())
        step, epoch = 0, 0
        while step < steps:
            sampler.set_epoch(epoch)
            for i, (x, y) in enumerate(loader):
                last = (i + 1) % k == 0
                with ddp.no_sync() if cfg.no_sync and not last else contextlib.nullcontext():
                    loss = F.cross_entropy(ddp(x), y)
                    (loss / k if k > 1 else loss).backward()
                if last:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    step += 1
                    if step == steps:
                        break
            epoch += 1
        return step

    return Built(fit, net, counter, ddp_kwargs)


def surge_contestant(cfg: Config, steps: int) -> Built:
    """`surge.Trainer(devices=2, strategy="ddp")` with logging, checkpoints, bar and summary off."""
    import surge

    class Bench(surge.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = build_model(cfg.model)

        def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return make_optimizer(cfg.model, self.parameters())

    class RegisterCommHook(surge.callbacks.Callback):
        """Registers the counting hook on surge's DDP wrapper once it exists."""

        def __init__(self, counter: CommCounter) -> None:
            self.counter = counter

        def on_train_start(self, trainer: Any, module: Any) -> None:
            trainer.strategy.wrapped.register_comm_hook(self.counter, counting_allreduce)

    model = Bench()
    # surge shards it: DistributedSampler(shuffle=True, seed=0, drop_last=False), set_epoch per epoch.
    loader = DataLoader(train_set(cfg.model), batch_size=BATCH, shuffle=True)
    counter = CommCounter() if cfg.bench == "accumulate" else None
    trainer = surge.Trainer(
        accelerator="cpu", devices=WORLD, strategy="ddp", max_steps=steps, max_epochs=1000,
        accumulate_grad_batches=cfg.accumulate, logger=False, enable_checkpointing=False,
        enable_model_summary=False, enable_progress_bar=False, num_sanity_val_steps=0,
        callbacks=[RegisterCommHook(counter)] if counter is not None else None,
    )  # fmt: skip
    if not cfg.no_sync:
        trainer.strategy.no_sync = contextlib.nullcontext  # type: ignore[method-assign]  # this process only

    def fit() -> int:
        trainer.fit(model, train_dataloaders=loader)
        return trainer.global_step

    return Built(fit, model.net, counter, dict(trainer.strategy.ddp_kwargs))


BUILDERS: dict[str, Callable[[Config, int], Built]] = {"raw": raw_contestant, "surge": surge_contestant}


# -- the run ----------------------------------------------------------------------------------------
def timed(fit: Callable[[], int]) -> tuple[int, float, float]:
    """Steps, wall seconds and process CPU seconds of `fit`, between two barriers on every rank."""
    dist.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    steps = fit()
    dist.barrier()
    return steps, time.perf_counter() - start, time.process_time() - cpu_start


def run(cfg: Config) -> dict[str, Any]:
    """Warm up, then time one fit; the result as a dict (meaningful on rank 0)."""
    torch.set_num_threads(cfg.threads)
    if cfg.contestant == "raw":
        dist.init_process_group("gloo")  # torchrun's env:// variables
    build = BUILDERS[cfg.contestant]
    build(cfg, cfg.warmup).fit()  # for surge, this starts rank 1 and the process group
    job = build(cfg, cfg.steps)
    loss_before = held_out_loss(job.net, cfg.model)
    steps, seconds, cpu_seconds = timed(job.fit)
    result: dict[str, Any] = {
        "contestant": cfg.contestant,
        "bench": cfg.bench,
        "model": cfg.model,
        "accumulate": cfg.accumulate,
        "no_sync": cfg.no_sync,
        "steps": steps,
        "seconds": seconds,
        "sec_per_step": seconds / max(steps, 1),
        "samples_per_sec": steps * cfg.accumulate * BATCH * dist.get_world_size() / seconds,
        "cpu_sec_per_step": cpu_seconds / max(steps, 1),
        "loss_before": loss_before,
        "loss_after": held_out_loss(job.net, cfg.model),
        "ddp_kwargs": job.ddp_kwargs,
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
    }
    if job.counter is not None:
        result.update(
            allreduces=job.counter.calls,
            allreduced_mb=job.counter.bytes / 1e6,
            buckets=len(job.counter.buckets),
            allreduces_per_step=job.counter.calls / max(steps, 1),
        )
    return result


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contestant", choices=sorted(BUILDERS), required=True)
    p.add_argument("--bench", choices=("throughput", "accumulate"), default="throughput")
    p.add_argument("--model", choices=sorted(INPUT_SHAPE), default="mlp")
    p.add_argument("--steps", type=int, default=300, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=20, help="optimizer steps of the untimed warm-up fit")
    p.add_argument("--accumulate", type=int, default=4, help="micro-batches per step (--bench accumulate)")
    p.add_argument("--no-sync", choices=("on", "off"), default="on", help="skip non-final micro-batch syncs")
    p.add_argument("--bucket-view", choices=("on", "off"), default="on", help="raw: gradient_as_bucket_view")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every process")
    p.add_argument("--out", type=Path, required=True, help="where rank 0 writes its JSON result")
    a = p.parse_args(argv)
    k = a.accumulate if a.bench == "accumulate" else 1
    if BATCHES_PER_RANK % k:
        p.error(f"--accumulate must divide {BATCHES_PER_RANK} (batches per rank per epoch)")
    return Config(
        contestant=a.contestant, bench=a.bench, model=a.model, steps=a.steps, warmup=a.warmup, accumulate=k,
        no_sync=a.no_sync == "on", bucket_view=a.bucket_view == "on", threads=a.threads, out=a.out,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    result = run(cfg)
    if dist.get_rank() == 0:
        cfg.out.write_text(json.dumps(result) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
