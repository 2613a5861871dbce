"""One benchmark run in a fresh process: `python benchmarks/child.py --workload mlp --contestant raw`.

It warms up with a short fit, then times a fresh fit of `--steps` optimizer steps on a freshly
built model and loader, and prints one JSON line: the time, the step count, the held-out loss
before and after, the host reads (`Tensor.item` and friends) during the timed fit, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import workloads
from torch import Tensor, nn

CONTESTANTS = (
    "raw", "raw_aa", "surge", "surge_defaults", "lightning", "fabric", "accelerate", "surge_compiled",
    "surge_spikeguard",
)  # fmt: skip
# Tensor methods that copy a value to the host; "item" is reported on its own.
HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")
host_reads: Counter[str] = Counter()


def count_host_reads() -> None:
    """Wrap the `HOST_READS` methods of `torch.Tensor` with counters (for every contestant alike)."""
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self: Tensor, *args: Any, _name: str = name, _original: Any = original) -> Any:
            host_reads[_name] += 1
            return _original(self, *args)

        setattr(torch.Tensor, name, counted)


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB.

    VmHWM belongs to the current address space only; ru_maxrss (the fallback) can carry the
    parent's peak across exec.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- contestants: each returns (fit, net); fit() trains `steps` optimizer steps and returns them ---
Fit = Callable[[], int]


def raw_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """The hand-written loop an expert would write (the raw loop never logs, even in mlp_log)."""
    spec = workloads.TRAINING[workload]
    net = workloads.build_model(spec.model)
    loader = workloads.make_loader(workload)

    def fit() -> int:
        opt = workloads.make_optimizer(spec.model, net.parameters())
        return raw_loop(net, opt, loader, steps, Tensor.backward, spec.accumulate)

    return fit, net


def raw_loop(
    net: nn.Module, opt: Any, loader: Any, steps: int, backward: Callable[[Tensor], Any], k: int = 1
) -> int:
    """The hand-written loop (also under Fabric's wrappers): `steps` optimizer steps, each over `k`
    micro-batches whose losses are divided by `k`."""
    net.train()
    step = micro = 0
    if k > 1:
        opt.zero_grad(set_to_none=True)
    while step < steps:
        for batch in loader:
            loss = workloads.compute_loss(net, batch)
            if k == 1:
                opt.zero_grad(set_to_none=True)
                backward(loss)
            else:
                backward(loss / k)
                micro += 1
                if micro % k:
                    continue
            opt.step()
            if k > 1:
                opt.zero_grad(set_to_none=True)
            step += 1
            if step == steps:
                break
    return step


def fabric_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """Lightning Fabric: the raw loop with `fabric.setup`, `setup_dataloaders` and `fabric.backward`."""
    from lightning.fabric import Fabric

    spec = workloads.TRAINING[workload]
    net = workloads.build_model(spec.model)
    fabric = Fabric(accelerator="cpu", devices=1)

    def fit() -> int:
        model, opt = fabric.setup(net, workloads.make_optimizer(spec.model, net.parameters()))
        loader = fabric.setup_dataloaders(workloads.make_loader(workload))
        return raw_loop(model, opt, loader, steps, fabric.backward, spec.accumulate)

    return fit, net


def accelerate_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """Hugging Face Accelerate: `Accelerator(cpu=True, gradient_accumulation_steps=k).prepare`, the
    loop under `accelerator.accumulate(model)`, `accelerator.backward` (which divides by k)."""
    from accelerate import Accelerator

    spec = workloads.TRAINING[workload]
    net = workloads.build_model(spec.model)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=spec.accumulate)

    def fit() -> int:
        model, opt, loader = accelerator.prepare(
            net, workloads.make_optimizer(spec.model, net.parameters()), workloads.make_loader(workload)
        )
        model.train()
        step = 0
        while step < steps:
            for batch in loader:
                with accelerator.accumulate(model):
                    loss = workloads.compute_loss(model, batch)
                    accelerator.backward(loss)
                    opt.step()  # (a no-op until the window's last micro-batch)
                    opt.zero_grad(set_to_none=True)
                step += accelerator.sync_gradients
                if step == steps:
                    break
        return step

    return fit, net


def surge_defaults_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """surge as users run it: `Trainer(max_steps=...)` with its defaults (progress bar, TensorBoard
    and CSV loggers, checkpointing, goodput, the data-wait advice), in a temporary run directory."""
    import tempfile

    import surge

    model = module_class(surge.Module, workload)()
    loader = workloads.make_loader(workload)
    root = tempfile.mkdtemp(prefix="surge-defaults-")
    trainer = surge.Trainer(
        max_steps=steps, max_epochs=1000, accelerator="cpu", default_root_dir=root,
        accumulate_grad_batches=workloads.TRAINING[workload].accumulate,
    )  # fmt: skip

    def fit() -> int:
        trainer.fit(model, train_dataloaders=loader)
        return trainer.global_step

    return fit, model.net


def module_class(base: type, workload: str) -> type:
    """A surge/Lightning module for `workload`: both frameworks share the Lightning-style API."""
    spec = workloads.TRAINING[workload]

    class Bench(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = workloads.build_model(spec.model)

        def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
            return workloads.compute_loss(self.net, batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return workloads.make_optimizer(spec.model, self.parameters())

    class LoggingBench(Bench):
        def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
            loss = workloads.compute_loss(self.net, batch)
            self.log("loss", loss, prog_bar=True)
            return loss

    return LoggingBench if spec.log else Bench


class CompileClock:
    """Seconds torch spends compiling (dynamo's compile start/end callbacks), so a compiled run's
    step time can be told apart from its one-off compile time."""

    seconds = cpu_seconds = 0.0  # wall and this process's CPU time spent compiling
    _started = (0.0, 0.0)

    @classmethod
    def install(cls) -> None:
        from torch._dynamo.callback import callback_handler

        def start(*_: Any) -> None:
            cls._started = (time.perf_counter(), time.process_time())

        def end(*_: Any) -> None:
            cls.seconds += time.perf_counter() - cls._started[0]
            cls.cpu_seconds += time.process_time() - cls._started[1]

        callback_handler.register_start_callback(start)
        callback_handler.register_end_callback(end)


def surge_compiled_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """surge with `compile="step"` (inductor): training step and optimizer step compiled."""
    return surge_contestant(workload, steps, compile="step")


def surge_spikeguard_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    """surge with `callbacks=[SpikeGuard()]`: losses kept per step, judged and snapshotted every
    `log_every_n_steps` (50) steps."""
    import surge

    return surge_contestant(workload, steps, guard=surge.callbacks.SpikeGuard())


def surge_contestant(
    workload: str, steps: int, compile: Any = False, guard: Any = None, **trainer_args: Any
) -> tuple[Fit, nn.Module]:
    """surge with the benchmark's settings (no logger, checkpoints or summary); `trainer_args` are
    passed on to the Trainer (benchmarks/step_slope.py: `on_nonfinite=None`)."""
    import surge

    log = workloads.TRAINING[workload].log
    model = module_class(surge.Module, workload)()
    loader = workloads.make_loader(workload)
    bar: dict[str, Any] = (
        {"enable_progress_bar": True, "callbacks": [surge.callbacks.ProgressBar(mode="bar")]}
        if log else {"enable_progress_bar": False}
    )  # fmt: skip
    if guard is not None:
        bar["callbacks"] = [*bar.get("callbacks", []), guard]
    trainer = surge.Trainer(
        max_steps=steps, max_epochs=1000, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_model_summary=False, num_sanity_val_steps=0, compile=compile,
        accumulate_grad_batches=workloads.TRAINING[workload].accumulate, **bar, **trainer_args,
    )  # fmt: skip

    def fit() -> int:
        trainer.fit(model, train_dataloaders=loader)
        return trainer.global_step

    return fit, model.net


def lightning_contestant(workload: str, steps: int) -> tuple[Fit, nn.Module]:
    import lightning

    model = module_class(lightning.LightningModule, workload)()
    loader = workloads.make_loader(workload)
    trainer = lightning.Trainer(
        max_steps=steps, max_epochs=1000, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_progress_bar=workloads.TRAINING[workload].log,
        accumulate_grad_batches=workloads.TRAINING[workload].accumulate,
    )  # fmt: skip

    def fit() -> int:
        trainer.fit(model, train_dataloaders=loader)
        return trainer.global_step

    return fit, model.net


BUILDERS = {
    "raw": raw_contestant,
    "raw_aa": raw_contestant,  # the A/A control: the same loop again, adjacent in time
    "surge_defaults": surge_defaults_contestant,
    "fabric": fabric_contestant,
    "accelerate": accelerate_contestant,
    "surge": surge_contestant,
    "lightning": lightning_contestant,
    "surge_compiled": surge_compiled_contestant,
    "surge_spikeguard": surge_spikeguard_contestant,
}


def run(workload: str, contestant: str, steps: int, warmup: int, threads: int) -> dict[str, Any]:
    """Warm up, then time one fit; everything the harness needs, as a dict."""
    if threads > 0:
        torch.set_num_threads(threads)
    workloads.seed_everything()
    count_host_reads()
    build = BUILDERS[contestant]
    warm_fit, _ = build(workload, warmup)
    warm_fit()

    workloads.seed_everything()
    fit, net = build(workload, steps)
    held_out = workloads.held_out_batch(workload)
    loss_before = workloads.held_out_loss(net, held_out)
    host_reads.clear()
    if contestant == "surge_compiled":
        CompileClock.install()  # the fresh model compiles again: its compile time is kept apart
    start, cpu_start = time.perf_counter(), time.process_time()
    taken = fit()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    compile_seconds = CompileClock.seconds
    seconds, cpu_seconds = seconds - compile_seconds, cpu_seconds - CompileClock.cpu_seconds
    reads = dict(host_reads)
    return {
        "workload": workload,
        "contestant": contestant,
        "steps": taken,
        "seconds": seconds,
        "sec_per_step": seconds / max(taken, 1),
        "samples_per_sec": taken * workloads.BATCH / seconds,
        "cpu_sec_per_step": cpu_seconds / max(taken, 1),  # less sensitive to other processes' load
        "loss_before": loss_before,
        "loss_after": workloads.held_out_loss(net, held_out),
        "item_calls": reads.get("item", 0),
        "host_reads": sum(reads.values()),
        "peak_rss_mb": peak_rss_mb(),
        "compile_seconds": compile_seconds,  # subtracted from seconds (0 when nothing compiles)
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=sorted(workloads.TRAINING), required=True)
    p.add_argument("--contestant", choices=CONTESTANTS, required=True)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50, help="optimizer steps of the untimed warm-up fit")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0 keeps torch's default")
    a = p.parse_args(argv)
    print(json.dumps(run(a.workload, a.contestant, a.steps, a.warmup, a.threads)), flush=True)


if __name__ == "__main__":
    main()
