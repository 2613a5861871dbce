"""One-shot GPU check of surge: precision correctness, hidden syncs, speed vs a raw loop, MFU, memory.

    python benchmarks/gpu_check.py [--quick] [--out benchmarks/results/gpu_check.json]

Every section runs in its own try/except and time box, and is skipped with a note once the total
budget (`--budget-s`, default 480 s) is spent. The markdown report goes to stdout section by section
and the JSON is rewritten after every section, so a run killed from outside keeps what it measured.
Without CUDA the script prints the environment and exits 0; `--cpu-smoke` instead runs the
correctness and throughput sections on the CPU at tiny sizes, to prove the code paths.
Sections run in the order of `SECTIONS`: torch.compile (the slowest) and MFU (which reads the
throughput results) come last.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import json
import logging
import math
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's surge

import surge  # noqa: E402
from surge.callbacks import Callback  # noqa: E402

SEED = 1234
LR = 3e-3
BRANCH = 2  # successors per token in the synthetic bigram table: the loss floor is ln(2)
RATIO_GOAL = 0.97
SPEED_ARGS = ("compile", "benchmark", "matmul_precision", "channels_last")
# Dense bf16 tensor-core peaks (no sparsity), matched by substring of the device name, in order.
PEAK_BF16_FLOPS = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12))


# -- sizes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LMConfig:
    """A decoder-only transformer language model and its batch shape."""

    vocab: int = 512
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    seq: int = 128
    batch: int = 32


@dataclass(frozen=True)
class SpeedCase:
    """One surge-vs-raw throughput comparison."""

    label: str
    cfg: LMConfig
    precision: str
    tf32: bool = False
    compiled: bool = False


@dataclass(frozen=True)
class Plan:
    """Sizes and step counts of one mode (full, quick, cpu-smoke)."""

    small: LMConfig
    large: LMConfig
    precisions: tuple[str, ...]
    train_steps: int
    eager_cases: tuple[SpeedCase, ...]
    compiled_cases: tuple[SpeedCase, ...]
    warmup: int
    timed: int
    repeats: int
    sync_window: tuple[int, int] = (5, 25)
    gpt: LMConfig = LMConfig()  # the GPT-style model of the compile="step", float8 and MFU sections


def make_plan(quick: bool, cpu_smoke: bool) -> Plan:
    """The sizes for the chosen mode."""
    if cpu_smoke:
        tiny = LMConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, seq=16, batch=8)
        cases = tuple(SpeedCase(f"tiny {p}", tiny, p) for p in ("32-true", "bf16-mixed"))
        return Plan(
            tiny, tiny, ("32-true", "bf16-mixed"), 40, cases, (), warmup=3, timed=10, repeats=1, gpt=tiny
        )
    small = LMConfig()
    medium = LMConfig(d_model=512, n_layers=8, n_heads=8, seq=256)
    eager = (
        SpeedCase("small bf16-mixed", small, "bf16-mixed"),
        SpeedCase("medium bf16-mixed", medium, "bf16-mixed"),
        SpeedCase("medium 32-true + TF32", medium, "32-true", tf32=True),
    )
    precisions = ("32-true", "16-mixed", "bf16-mixed", "bf16-true")
    large = LMConfig(d_model=1024, n_layers=8, n_heads=16, seq=512, batch=16)
    gpt = LMConfig(vocab=8192, d_model=512, n_layers=6, n_heads=8, seq=512, batch=16)
    if quick:
        compiled = (SpeedCase("small bf16-mixed, compiled", small, "bf16-mixed", compiled=True),)
        return Plan(
            small, large, precisions, 60, eager[:2], compiled, warmup=10, timed=50, repeats=1, gpt=gpt
        )
    compiled = (SpeedCase("medium bf16-mixed, compiled", medium, "bf16-mixed", compiled=True),)
    # 5 interleaved runs: on the H200 machine the small LM is host-bound and one run varies +-15%
    return Plan(small, large, precisions, 150, eager, compiled, warmup=20, timed=200, repeats=5, gpt=gpt)


# -- the model and its data ------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-norm causal self-attention (`scaled_dot_product_attention`, no mask tensor) and an MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, d // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Token and position embeddings, `n_layers` blocks, a final norm and an untied head."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def embed(self, tokens: Tensor) -> Tensor:
        return self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_net(cfg: LMConfig) -> TinyGPT:
    """The network with weights from a freshly seeded RNG: every contestant starts identical."""
    torch.manual_seed(SEED)
    return TinyGPT(cfg)


def make_optimizer(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=LR)


def lm_loss(model: nn.Module, batch: Tensor) -> Tensor:
    """Next-token cross-entropy of `model` on a `(batch, seq + 1)` token tensor."""
    logits = model(batch[:, :-1])
    targets = batch[:, 1:].to(logits.device)  # a no-op unless the model ends on another device
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def make_batches(cfg: LMConfig, n: int, pin: bool) -> list[Tensor]:
    """`n` batches of `seq + 1` tokens walking a fixed random bigram table (`BRANCH` successors each)."""
    gen = torch.Generator().manual_seed(SEED)
    successors = torch.randint(cfg.vocab, (cfg.vocab, BRANCH), generator=gen)
    rows = n * cfg.batch
    tokens = torch.empty(rows, cfg.seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(cfg.vocab, (rows,), generator=gen)
    for t in range(1, cfg.seq + 1):
        tokens[:, t] = successors[tokens[:, t - 1], torch.randint(BRANCH, (rows,), generator=gen)]
    return [b.pin_memory() if pin else b.contiguous() for b in tokens.split(cfg.batch)]


class Batches:
    """Pre-made batches as one loader (surge reads a list as a list of loaders)."""

    def __init__(self, batches: Sequence[Any]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class LMModule(surge.Module):
    """The language model as a surge.Module; `log_loss` also `self.log`s the loss every step."""

    def __init__(self, cfg: LMConfig, log_loss: bool = False) -> None:
        super().__init__()
        self.net = build_net(cfg)
        self.log_loss = log_loss

    def forward(self, tokens: Tensor) -> Tensor:
        return self.net(tokens)

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        loss = lm_loss(self, batch)
        if self.log_loss:
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.parameters())


class SplitLM(LMModule):
    """Manual model parallelism: embeddings and the first half of the blocks on cuda:0, the rest on cuda:1."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__(cfg)
        self.half = cfg.n_layers // 2
        self.net.to("cuda:1")
        for part in (self.net.tok, self.net.pos, *self.net.blocks[: self.half]):
            part.to("cuda:0")

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.net.embed(tokens)
        for i, block in enumerate(self.net.blocks):
            if i == self.half:
                x = x.to("cuda:1")
            x = block(x)
        return self.net.head(self.net.norm(x))


class ConvNet(surge.Module):
    """A one-conv classifier, to see what `channels_last=True` does to weights and inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.conv(x).mean((2, 3)))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.parameters())


# -- callbacks and per-batch probes ----------------------------------------------------------------
class OnBatchStart(Callback):
    """Calls `fn(batch_idx)` at every training batch start (the batch is already on the device)."""

    def __init__(self, fn: Callable[[int], None]) -> None:
        self.fn = fn

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.fn(batch_idx)


class FirstBatch(Callback):
    """Records `fn(module, batch)` at the first training batch, inside the running fit."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn
        self.seen: Any = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.seen = self.fn(module, batch)


class LossRecorder(Callback):
    """Keeps every step's loss on the device; `values()` reads them all in one transfer."""

    def __init__(self) -> None:
        self.losses: list[Tensor] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(outputs["loss"])

    def values(self) -> list[float]:
        return torch.stack(self.losses).float().tolist()


class Marks:
    """Synchronised clock reads at batches `start` and `stop`: the timed region of a run."""

    def __init__(self, start: int, stop: int, device: torch.device) -> None:
        self.at, self.device = (start, stop), device
        self.times: list[float] = []

    def __call__(self, batch_idx: int) -> None:
        if batch_idx in self.at:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.times.append(time.perf_counter())

    @property
    def seconds(self) -> float:
        return self.times[1] - self.times[0]


# -- running surge and the raw loop ----------------------------------------------------------------
class NotAvailable(Exception):
    """A Trainer argument that this checkout of surge does not have."""


def trainer_accepts(name: str) -> bool:
    """Whether this checkout's `surge.Trainer` has the argument `name`."""
    return name in inspect.signature(surge.Trainer.__init__).parameters


@dataclass
class Ctx:
    """What every section gets: the options, the plan, the device and the results so far."""

    args: argparse.Namespace
    plan: Plan
    device: torch.device
    deadline: float
    root: str
    speeds: list[dict[str, Any]] = field(default_factory=list)  # {"case", "runs": {who: [tok/s]}}
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def make_trainer(ctx: Ctx, **kwargs: Any) -> surge.Trainer:
    """A quiet Trainer (no logger, checkpoints, bar or summary) on the check's device."""
    missing = [k for k in kwargs if not trainer_accepts(k)]
    if missing:
        raise NotAvailable(f"surge.Trainer has no {', '.join(missing)} argument: not available")
    base = dict(
        accelerator=ctx.device.type,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1000,
        default_root_dir=ctx.root,
    )
    return surge.Trainer(**{**base, **kwargs})


def surge_fit(
    ctx: Ctx, module: surge.Module, batches: Sequence[Any], callbacks: Sequence[Callback] = (), **kwargs: Any
) -> surge.Trainer:
    """Fit `module` for one pass over `batches` (one optimizer step each)."""
    trainer = make_trainer(ctx, max_steps=len(batches), callbacks=list(callbacks), **kwargs)
    trainer.fit(module, train_dataloaders=Batches(batches))
    return trainer


def raw_train(
    ctx: Ctx,
    cfg: LMConfig,
    precision: str,
    batches: Sequence[Tensor],
    on_batch: Callable[[int], None],
    compiled: bool = False,
) -> None:
    """The hand-written loop: non_blocking copies, autocast for bf16-mixed, zero_grad(set_to_none)."""
    if precision not in ("32-true", "bf16-mixed"):
        raise ValueError(f"the raw loop runs 32-true or bf16-mixed, not {precision}")
    net = build_net(cfg).to(ctx.device)
    model = torch.compile(net) if compiled else net
    opt = make_optimizer(net.parameters())
    for i, cpu_batch in enumerate(batches):
        on_batch(i)
        batch = cpu_batch.to(ctx.device, non_blocking=True)
        autocast = (
            torch.autocast(ctx.device.type, dtype=torch.bfloat16)
            if precision == "bf16-mixed"
            else contextlib.nullcontext()
        )
        with autocast:
            loss = lm_loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


@contextlib.contextmanager
def kept_globals(matmul_precision: str | None = None) -> Iterator[None]:
    """Restore the float32 matmul precision and cudnn.benchmark afterwards (optionally set the former)."""
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    if matmul_precision is not None:
        torch.set_float32_matmul_precision(matmul_precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.benchmark = saved[1]


def compiled_graphs() -> int:
    """Graphs torch.compile produced so far in this process (dynamo's own counter)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def release_memory(ctx: Ctx) -> None:
    """Drop what the last run left: Python garbage and, on CUDA, the allocator's cached blocks."""
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()


# -- sections --------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What a section found so far: table rows, named pass/fail checks and notes."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def peak_bf16_flops() -> float | None:
    """cuda:0's dense bf16 peak from `PEAK_BF16_FLOPS`, or None for an unknown (or no) GPU."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


def environment(ctx: Ctx, out: Outcome) -> None:
    """Versions, devices, and which of the Trainer's speed arguments this checkout has."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch CUDA": torch.version.cuda,
        "cuDNN": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "surge": f"{surge.__version__} ({Path(surge.__file__).parent})",
        "CUDA devices": torch.cuda.device_count(),
    }
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        info[f"cuda:{i}"] = (
            f"{p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
            f"{p.multi_processor_count} SMs"
        )
    peak = peak_bf16_flops()
    info["bf16 dense peak"] = f"{peak / 1e12:.0f} TFLOP/s" if peak else "N/A (not in the table)"
    info["Trainer speed arguments"] = ", ".join(
        f"{a}: {'yes' if trainer_accepts(a) else 'not available'}" for a in SPEED_ARGS
    )
    out.rows += [{"item": k, "value": v} for k, v in info.items()]


def correctness(ctx: Ctx, out: Outcome) -> None:
    """Each precision trains the small LM on bigram tokens: the loss must fall and stay finite."""
    cfg, plan = ctx.plan.small, ctx.plan
    batches = make_batches(cfg, plan.train_steps, pin=ctx.cuda)
    out.notes.append(
        f"{plan.train_steps} steps, AdamW lr {LR}; loss starts near ln({cfg.vocab}) = "
        f"{math.log(cfg.vocab):.2f}, floor ln({BRANCH}) = {math.log(BRANCH):.2f}"
    )
    for precision in plan.precisions:
        recorder, module = LossRecorder(), LMModule(cfg)
        t0 = time.perf_counter()
        plugin = surge_fit(ctx, module, batches, [recorder], precision=precision).precision_plugin
        losses = recorder.values()
        first, last = losses[0], statistics.fmean(losses[-10:])
        param = next(module.parameters())
        out.rows.append(
            {
                "precision": precision,
                "steps": len(losses),
                "first loss": first,
                "last loss (mean of 10)": last,
                "params": f"{param.dtype} on {param.device}",
                "skipped steps": plugin.skipped_steps,
                "loss scale": getattr(plugin, "loss_scale", None),
                "s": time.perf_counter() - t0,
            }
        )
        out.checks[f"{precision}: no NaN/inf loss"] = all(math.isfinite(x) for x in losses)
        out.checks[f"{precision}: loss fell below 0.8x the first"] = last < 0.8 * first
        out.checks[f"{precision}: parameters on {ctx.device.type}"] = param.device.type == ctx.device.type


def sync_probe(
    train: Callable[[Callable[[int], None]], Any], start: int, stop: int, mode: str
) -> tuple[list[str] | None, int]:
    """Run `train(on_batch)` with CUDA sync debug `mode` on from batch `start` until batch `stop`.

    Returns the last frames of the error a sync raised ("error" mode; None without one) and the
    number of sync warnings ("warn" mode).
    """

    def window(batch_idx: int) -> None:
        if batch_idx == start:
            torch.cuda.set_sync_debug_mode(mode)
        elif batch_idx == stop:
            torch.cuda.set_sync_debug_mode(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            train(window)
        except RuntimeError as err:
            if "synchroniz" not in str(err):
                raise
            frames = traceback.extract_tb(err.__traceback__)[-6:]
            return [
                f"{'/'.join(Path(f.filename).parts[-3:])}:{f.lineno} {f.name}: {f.line}" for f in frames
            ], 0
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return None, sum("synchroniz" in str(w.message) for w in caught)


def hidden_syncs(ctx: Ctx, out: Outcome) -> None:
    """No host-device sync between the log intervals: sync debug mode "error" over 20 steps."""
    cfg = ctx.plan.small
    start, stop = ctx.plan.sync_window
    batches = make_batches(cfg, stop + 5, pin=True)

    def surge_run(precision: str) -> Callable[[Callable[[int], None]], Any]:
        return lambda fn: surge_fit(
            ctx, LMModule(cfg, log_loss=True), batches, [OnBatchStart(fn)], precision=precision
        )

    cases = {
        "raw loop, 32-true (control)": lambda fn: raw_train(ctx, cfg, "32-true", batches, fn),
        "surge, 32-true, self.log every step": surge_run("32-true"),
        "surge, bf16-mixed, self.log every step": surge_run("bf16-mixed"),
    }
    control_synced = False
    for label, train in cases.items():
        frames, _ = sync_probe(train, start, stop, "error")
        out.rows.append(
            {"case": label, "mode": "error", "synced": frames is not None, "at": frames and frames[-1]}
        )
        if frames:
            out.notes.append(f"{label}: sync raised at\n" + "\n".join(f"    {f}" for f in frames))
        if "control" in label:
            control_synced = frames is not None
        elif not control_synced:
            out.checks[f"{label}: no sync in batches {start}-{stop - 1}"] = frames is None
    if control_synced:
        out.notes.append("the raw loop syncs too (the model or torch does): surge's rows are inconclusive")
    _, count = sync_probe(surge_run("16-mixed"), start, stop, "warn")
    out.rows.append({"case": "surge, 16-mixed", "mode": "warn", "syncs per step": count / (stop - start)})
    out.notes.append(
        "16-mixed syncs by design: GradScaler.step reads found_inf, and surge reads it to count skipped "
        "steps (about 2 per step expected)"
    )


def speed_arguments(ctx: Ctx, out: Outcome) -> None:
    """benchmark=, matmul_precision=, channels_last= take effect inside fit; compile= forms are accepted."""
    cfg = replace(ctx.plan.small, n_layers=1)
    batches = make_batches(cfg, 3, pin=True)
    flags = {
        "benchmark": (True, lambda m, b: torch.backends.cudnn.benchmark, True),
        "matmul_precision": ("high", lambda m, b: torch.get_float32_matmul_precision(), "high"),
    }
    for name, (value, read, expected) in flags.items():
        if not trainer_accepts(name):
            out.rows.append({"argument": name, "available": False})
            continue
        probe = FirstBatch(read)
        with kept_globals():
            surge_fit(ctx, LMModule(cfg), batches, [probe], **{name: value})
            after = read(None, None)
        out.rows.append(
            {"argument": f"{name}={value!r}", "available": True, "inside fit": probe.seen, "after fit": after}
        )
        out.checks[f"{name}={value!r} applies inside fit"] = probe.seen == expected
    if trainer_accepts("channels_last"):
        images = [(torch.randn(8, 3, 16, 16), torch.randint(10, (8,))) for _ in range(3)]
        probe = FirstBatch(
            lambda m, b: (
                m.conv.weight.is_contiguous(memory_format=torch.channels_last),
                b[0].is_contiguous(memory_format=torch.channels_last),
            )
        )
        surge_fit(ctx, ConvNet(), images, [probe], channels_last=True)
        weight, inputs = probe.seen
        out.rows.append(
            {
                "argument": "channels_last=True",
                "available": True,
                "inside fit": f"weight {weight}, input {inputs}",
            }
        )
        out.checks["channels_last=True: conv weight and input batch are channels_last"] = weight and inputs
    else:
        out.rows.append({"argument": "channels_last", "available": False})
    if trainer_accepts("compile"):
        for value in (True, {"mode": "max-autotune"}):
            make_trainer(ctx, compile=value)
        out.rows.append(
            {"argument": "compile", "available": True, "inside fit": "see the torch.compile section"}
        )
        out.checks["compile=True and compile={'mode': 'max-autotune'} accepted"] = True
    else:
        out.rows.append({"argument": "compile", "available": False})


def measure(ctx: Ctx, case: SpeedCase, who: str, batches: Sequence[Tensor]) -> float:
    """Tokens/s of one fresh run of `who` ("raw" or "surge") over the timed batches."""
    plan = ctx.plan
    marks = Marks(plan.warmup, plan.warmup + plan.timed, ctx.device)
    surge_args: dict[str, Any] = {"compile": True} if who == "surge" and case.compiled else {}
    if who == "surge" and case.tf32 and trainer_accepts("matmul_precision"):
        surge_args["matmul_precision"] = "high"
    global_tf32 = case.tf32 and "matmul_precision" not in surge_args
    if case.compiled:
        torch._dynamo.reset()  # each run traces afresh; inductor's on-disk cache keeps it short
    with kept_globals("high" if global_tf32 else None):
        if who == "raw":
            raw_train(ctx, case.cfg, case.precision, batches, marks, compiled=case.compiled)
        else:
            surge_fit(
                ctx,
                LMModule(case.cfg),
                batches,
                [OnBatchStart(marks)],
                precision=case.precision,
                **surge_args,
            )
    return plan.timed * case.cfg.batch * case.cfg.seq / marks.seconds


def summarise(runs: dict[str, list[float]]) -> dict[str, Any]:
    """The best tokens/s of each contestant so far, their ratio, and every run."""
    best = {who: max(speeds) for who, speeds in runs.items() if speeds}
    return {
        "raw tok/s": best.get("raw"),
        "surge tok/s": best.get("surge", "not available" if "surge" not in runs else None),
        "surge/raw (best)": best["surge"] / best["raw"] if len(best) == 2 else None,
        "runs": "; ".join(f"{who} " + ", ".join(f"{s:,.0f}" for s in speeds) for who, speeds in runs.items()),
    }


def compare(ctx: Ctx, case: SpeedCase, out: Outcome) -> None:
    """Interleave raw and surge runs of `case`; the best tokens/s of each decides the ratio.

    The row is updated after every run, so a section that times out keeps the runs it finished.
    """
    plan = ctx.plan
    batches = make_batches(case.cfg, plan.warmup + plan.timed + 1, pin=ctx.cuda)
    contestants = ("raw", "surge") if not case.compiled or trainer_accepts("compile") else ("raw",)
    runs: dict[str, list[float]] = {who: [] for who in contestants}
    row: dict[str, Any] = {"case": case.label}
    out.rows.append(row)
    ctx.speeds.append({"case": case, "runs": runs})
    for _ in range(plan.repeats):
        for who in contestants:
            graphs = compiled_graphs() if case.compiled else 0
            runs[who].append(measure(ctx, case, who, batches))
            if case.compiled:
                row[f"{who} graphs"] = compiled_graphs() - graphs
            row.update(summarise(runs))
    if row["surge/raw (best)"] is not None and ctx.cuda:
        out.checks[f"{case.label}: surge/raw >= {RATIO_GOAL}"] = row["surge/raw (best)"] >= RATIO_GOAL
    if "surge graphs" in row:
        out.checks[f"{case.label}: surge compile=True compiled the module"] = row["surge graphs"] > 0


def throughput(cases_of: Callable[[Plan], Sequence[SpeedCase]]) -> Callable[[Ctx, Outcome], None]:
    """A section that compares surge with the raw loop on the plan's `cases_of(plan)`."""

    def section(ctx: Ctx, out: Outcome) -> None:
        plan = ctx.plan
        out.notes.append(
            f"{plan.timed} timed steps after {plan.warmup} warm-up steps in the same run, synchronised only "
            f"at the two ends; best of {plan.repeats} interleaved runs; batches pre-made on the host"
            + (" in pinned memory, copied with non_blocking=True" if ctx.cuda else "")
        )
        if any(c.compiled for c in cases_of(plan)) and not trainer_accepts("compile"):
            out.notes.append("surge.Trainer(compile=...) not available: raw torch.compile runs only")
        for case in cases_of(plan):
            compare(ctx, case, out)

    return section


def meta_net(cfg: LMConfig) -> TinyGPT:
    """The network without storage, for counting."""
    with torch.device("meta"):
        return TinyGPT(cfg)


def flops_per_token(cfg: LMConfig) -> float:
    """Training FLOPs per token: 6 x matmul weights + 12 x layers x d_model x seq (attention)."""
    matmul = sum(m.weight.numel() for m in meta_net(cfg).modules() if isinstance(m, nn.Linear))
    return 6 * matmul + 12 * cfg.n_layers * cfg.d_model * cfg.seq


def mfu(ctx: Ctx, out: Outcome) -> None:
    """Model FLOPs utilisation of the bf16 throughput runs against the GPU's dense bf16 peak."""
    peak = peak_bf16_flops()
    out.notes.append(
        "FLOPs per token = 6 x matmul weights + 12 x layers x d_model x seq (attention); peak "
        + (f"{peak / 1e12:.0f} TFLOP/s" if peak else "unknown for this GPU: MFU N/A")
    )
    for speed in ctx.speeds:
        case = speed["case"]
        if "bf16" not in case.precision:
            continue
        for who, speeds in speed["runs"].items():
            if not speeds:
                continue
            achieved = flops_per_token(case.cfg) * max(speeds)
            out.rows.append(
                {
                    "case": case.label,
                    "contestant": who,
                    "tok/s": max(speeds),
                    "TFLOP/s": achieved / 1e12,
                    "MFU": f"{achieved / peak:.1%}" if peak else "N/A",
                }
            )
    if not out.rows:
        out.notes.append("no bf16 throughput was measured")


def peak_memory(ctx: Ctx, out: Outcome) -> None:
    """torch.cuda.max_memory_allocated of short fits of the large config, per precision."""
    cfg = ctx.plan.large
    batches = make_batches(cfg, 4, pin=True)
    peaks: dict[str, float] = {}
    for precision in ("32-true", "bf16-mixed", "bf16-true"):
        release_memory(ctx)
        torch.cuda.reset_peak_memory_stats()
        surge_fit(ctx, LMModule(cfg), batches, precision=precision)
        peaks[precision] = torch.cuda.max_memory_allocated() / 2**20
        out.rows.append(
            {
                "precision": precision,
                "peak MiB": peaks[precision],
                "vs 32-true": peaks[precision] / peaks["32-true"],
            }
        )
    params = sum(p.numel() for p in meta_net(cfg).parameters())
    out.notes.append(f"{cfg}; {params / 1e6:.1f} M parameters; {len(batches)} steps each")
    for precision in ("bf16-mixed", "bf16-true"):
        out.checks[f"{precision} peak below 32-true"] = peaks[precision] < peaks["32-true"]


def model_parallel(ctx: Ctx, out: Outcome) -> None:
    """A user-split module (cuda:0 and cuda:1) trains with surge leaving its placement alone."""
    if torch.cuda.device_count() < 2:
        out.notes.append("skipped: one GPU")
        return
    module = SplitLM(ctx.plan.small)
    placement = {name: p.device for name, p in module.named_parameters()}
    recorder = LossRecorder()
    surge_fit(ctx, module, make_batches(ctx.plan.small, 60, pin=True), [recorder])
    moved = [name for name, p in module.named_parameters() if p.device != placement[name]]
    losses = recorder.values()
    out.rows.append(
        {
            "devices": sorted({str(d) for d in placement.values()}),
            "moved": len(moved),
            "first loss": losses[0],
            "last loss": losses[-1],
        }
    )
    out.checks["parameters stay where the user put them"] = not moved
    out.checks["loss fell below 0.8x the first"] = losses[-1] < 0.8 * losses[0]


def device_index(ctx: Ctx, out: Outcome) -> None:
    """`devices=[1]` trains on cuda:1."""
    if torch.cuda.device_count() < 2:
        out.notes.append("skipped: one GPU")
        return
    module, recorder = LMModule(ctx.plan.small), LossRecorder()
    surge_fit(ctx, module, make_batches(ctx.plan.small, 5, pin=True), [recorder], devices=[1])
    device = next(module.parameters()).device
    out.rows.append({"parameters on": str(device), "module.device": str(module.device)})
    out.checks["devices=[1] puts the model on cuda:1"] = device == module.device == torch.device("cuda", 1)
    out.checks["loss finite"] = all(math.isfinite(x) for x in recorder.values())


def sharded(ctx: Ctx, out: Outcome) -> None:
    """FSDP2 on one GPU (NCCL, world size 1) with bf16-mixed; DataParallel where there are 2+ GPUs."""
    from surge.strategies import FSDPStrategy

    batches = make_batches(ctx.plan.small, 40, pin=True)
    recorder = LossRecorder()
    trainer = surge_fit(
        ctx, LMModule(ctx.plan.small), batches, [recorder], strategy=FSDPStrategy(shard={Block}),
        precision="bf16-mixed",
    )  # fmt: skip
    losses = recorder.values()
    out.rows.append({"strategy": trainer.strategy.name, "first loss": losses[0], "last loss": losses[-1]})
    out.checks["FSDP bf16-mixed: loss fell below 0.8x the first"] = losses[-1] < 0.8 * losses[0]
    if torch.cuda.device_count() < 2:
        out.notes.append("DataParallel vs one GPU skipped: one GPU")
        return
    speeds = {}
    for strategy, devices in (("dp", 2), ("auto", 1)):
        t0 = time.perf_counter()
        surge_fit(ctx, LMModule(ctx.plan.small), batches, strategy=strategy, devices=devices)
        torch.cuda.synchronize()
        speeds[strategy] = len(batches) / (time.perf_counter() - t0)
    out.rows.append({"strategy": "dp (2 GPUs)", "steps/s": speeds["dp"]})
    out.rows.append({"strategy": "one GPU", "steps/s": speeds["auto"]})
    out.notes.append(
        "DDP on 2 GPUs needs its own processes: run benchmarks/ddp.py on that machine to compare"
    )


def device_mesh(ctx: Ctx, out: Outcome) -> None:
    """ModelParallel's device-mesh path on CUDA/NCCL (a 1 x 1 mesh on one GPU: DTensor, FSDP2 over the
    data-parallel group) against FSDP2 on the same model and batches: the same losses, and its
    step time and peak memory. The 4-process layouts are benchmarks/mesh_layouts.py (CPU)."""
    from surge.strategies import FSDPStrategy, ModelParallel

    batches = make_batches(ctx.plan.small, 30, pin=ctx.cuda)
    runs = {}
    for name, strategy in (
        ("FSDPStrategy", FSDPStrategy(shard={Block})),
        ("ModelParallel 1x1", ModelParallel(data_parallel=1, tensor_parallel=1, shard={Block})),
    ):
        marks, recorder = Marks(5, len(batches) - 1, ctx.device), LossRecorder()
        if ctx.cuda:
            torch.cuda.reset_peak_memory_stats()
        surge_fit(
            ctx, LMModule(ctx.plan.small), batches, [OnBatchStart(marks), recorder], strategy=strategy,
            precision="bf16-mixed",
        )  # fmt: skip
        peak = torch.cuda.max_memory_allocated() / 2**20 if ctx.cuda else float("nan")
        runs[name] = recorder.values()
        out.rows.append({
            "strategy": name, "step ms": marks.seconds / (len(batches) - 6) * 1e3, "peak MiB": peak,
            "first loss": runs[name][0], "last loss": runs[name][-1],
        })  # fmt: skip
    fsdp, mesh = runs["FSDPStrategy"], runs["ModelParallel 1x1"]
    out.checks["the mesh's first loss equals FSDP's (same weights, same batch)"] = (
        abs(mesh[0] - fsdp[0]) < 1e-3
    )
    out.checks["the mesh's loss fell below 0.8x its first"] = mesh[-1] < 0.8 * mesh[0]


def gpt_run(
    ctx: Ctx, module: surge.Module, batches: Sequence[Tensor], **kwargs: Any
) -> tuple[float, list[float]]:
    """Tokens/s over the plan's timed steps of one bf16-mixed fit of `module`, and every step's loss."""
    cfg, plan = ctx.plan.gpt, ctx.plan
    marks, recorder = Marks(plan.warmup, plan.warmup + plan.timed, ctx.device), LossRecorder()
    if "compile" in kwargs:
        torch._dynamo.reset()
    surge_fit(ctx, module, batches, [OnBatchStart(marks), recorder], precision="bf16-mixed", **kwargs)
    return plan.timed * cfg.batch * cfg.seq / marks.seconds, recorder.values()


def mfu_row(ctx: Ctx, label: str, tok_s: float, losses: list[float]) -> dict[str, Any]:
    """Tokens/s, achieved TFLOP/s and MFU (against the GPU's dense bf16 peak) of one GPT run."""
    peak = peak_bf16_flops() if ctx.cuda else None
    achieved = flops_per_token(ctx.plan.gpt) * tok_s
    return {
        "run": label, "tok/s": tok_s, "TFLOP/s": achieved / 1e12,
        "MFU": f"{achieved / peak:.1%}" if peak else "N/A", "first loss": losses[0], "last loss": losses[-1],
    }  # fmt: skip


def refusal(ctx: Ctx, **kwargs: Any) -> str | None:
    """Why this checkout's Trainer refuses `kwargs`, or None when it takes them."""
    try:
        make_trainer(ctx, **kwargs)
    except (NotAvailable, surge.SurgeError) as err:
        return str(err)
    return None


def gpt_compile_step(ctx: Ctx, out: Outcome) -> None:
    """The GPT-style LM at bf16-mixed: eager against `Trainer(compile="step")`, tokens/s and MFU."""
    cfg, plan = ctx.plan.gpt, ctx.plan
    batches = make_batches(cfg, plan.warmup + plan.timed + 1, pin=ctx.cuda)
    params = sum(p.numel() for p in meta_net(cfg).parameters())
    out.notes.append(
        f"{cfg}; {params / 1e6:.1f} M parameters; FLOPs per token = 6 x matmul weights + 12 x layers x "
        f"d_model x seq (attention); {plan.timed} timed steps after {plan.warmup}"
    )
    tok_s, losses = gpt_run(ctx, LMModule(cfg), batches)
    out.rows.append(mfu_row(ctx, "eager", tok_s, losses))
    out.checks["eager: loss finite and falling"] = math.isfinite(losses[-1]) and losses[-1] < losses[0]
    why = refusal(ctx, compile="step")
    if why is not None:
        out.notes.append(f'compile="step" skipped: the Trainer refuses it ({why})')
    elif not ctx.cuda:
        out.notes.append('compile="step" accepted; not run in --cpu-smoke (compiling takes minutes on CPU)')
    else:
        tok_s, losses = gpt_run(ctx, LMModule(cfg), batches, compile="step")
        out.rows.append(mfu_row(ctx, 'compile="step"', tok_s, losses))
        out.checks['compile="step": loss finite and falling'] = (
            math.isfinite(losses[-1]) and losses[-1] < losses[0]
        )


def float8_unavailable(ctx: Ctx) -> str | None:
    """Why float8 training cannot run here, or None."""
    if not ctx.cuda:
        return "needs a CUDA GPU"
    major, minor = torch.cuda.get_device_capability(ctx.device)
    if (major, minor) < (8, 9):
        return f"needs SM >= 8.9 (float8 tensor cores); this GPU is SM {major}.{minor}"
    try:
        import torchao.float8  # noqa: F401
    except Exception as err:  # ImportError, or a torchao built for another torch
        return f"torchao.float8 does not import: {type(err).__name__}: {err}"
    return None


def float8_training(ctx: Ctx, out: Outcome) -> None:
    """The GPT-style LM with torchao's float8 linears (`convert_to_float8_training`) against bf16."""
    why = float8_unavailable(ctx)
    if why is not None:
        out.notes.append(f"skipped: {why}")
        return
    from torchao.float8 import convert_to_float8_training

    cfg, plan = ctx.plan.gpt, ctx.plan
    batches = make_batches(cfg, plan.warmup + plan.timed + 1, pin=ctx.cuda)
    compiled = {"compile": True} if refusal(ctx, compile=True) is None else {}
    for label in ("bf16-mixed", "float8 linears"):
        module = LMModule(cfg)
        if label != "bf16-mixed":  # the head (vocab-sized output) stays in bf16, as torchtitan does
            convert_to_float8_training(module.net, module_filter_fn=lambda m, fqn: fqn != "head")
        tok_s, losses = gpt_run(ctx, module, batches, **compiled)
        out.rows.append(mfu_row(ctx, label + (", compiled" if compiled else ""), tok_s, losses))
        out.checks[f"{label}: loss finite and falling"] = math.isfinite(losses[-1]) and losses[-1] < losses[0]
    out.notes.append("MFU against the bf16 dense peak for both rows (float8's own peak is twice that)")


def spike_guard_on_cuda(ctx: Ctx, out: Outcome) -> None:
    """SpikeGuard reads the device once per check, never per step; a NaN is rolled back on CUDA."""
    if not hasattr(surge.callbacks, "SpikeGuard"):
        raise NotAvailable("surge.callbacks has no SpikeGuard: not available")
    cfg = ctx.plan.small
    batches = make_batches(cfg, 60, pin=True)
    counts = {}
    for label, guard in (("no guard", []), ("SpikeGuard()", [surge.callbacks.SpikeGuard()])):

        def train(fn: Callable[[int], None], guard: list[Callback] = guard) -> None:
            t = make_trainer(
                ctx, max_steps=len(batches), callbacks=[*guard, OnBatchStart(fn)], precision="bf16-mixed",
                log_every_n_steps=10,
            )  # fmt: skip
            t.fit(LMModule(cfg), train_dataloaders=Batches(batches))

        _, counts[label] = sync_probe(train, 5, 45, "warn")
        out.rows.append({"case": label, "syncs in batches 5-44": counts[label]})
    out.checks["SpikeGuard adds at most one sync per check (4 checks)"] = (
        counts["SpikeGuard()"] - counts["no guard"] <= 4
    )

    class NaNAt25(LMModule):
        def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * float("nan") if batch_idx == 25 else loss

    module = NaNAt25(cfg)
    trainer = make_trainer(
        ctx, max_steps=50, on_nonfinite="rollback", precision="bf16-mixed", log_every_n_steps=10
    )
    trainer.fit(module, train_dataloaders=Batches(batches))
    rollbacks = float(trainer.callback_metrics.get("rollbacks", 0))
    finite = all(bool(torch.isfinite(p).all()) for p in module.parameters())
    out.rows.append(
        {"case": "NaN at batch 25, on_nonfinite='rollback'", "rollbacks": rollbacks, "finite": finite}
    )
    out.checks["a NaN on CUDA is rolled back once and the weights stay finite"] = rollbacks == 1 and finite


def goodput_mfu(ctx: Ctx, out: Outcome) -> None:
    """trainer.goodput on the GPT-style LM: counted FLOPs against the analytic count, and MFU."""
    if not hasattr(surge.Trainer, "goodput"):
        raise NotAvailable("surge.Trainer has no goodput: not available")
    cfg = ctx.plan.gpt
    batches = make_batches(cfg, 120, pin=True)
    trainer = surge_fit(ctx, LMModule(cfg), batches, precision="bf16-mixed")
    g = trainer.goodput
    analytic = flops_per_token(cfg) * cfg.batch * cfg.seq
    out.rows.append(
        {
            "counted FLOPs/step": g.flops_per_step,
            "analytic FLOPs/step": analytic,
            "TFLOP/s": (g.flops_per_s or 0) / 1e12,
            "MFU": None if g.mfu is None else f"{g.mfu:.1%}",
            "train share": f"{g.train_fraction:.1%}",
        }
    )
    out.notes.append(g.table())
    out.checks["goodput counted the step's FLOPs within 25% of the analytic count"] = (
        g.flops_per_step is not None and abs(g.flops_per_step / analytic - 1) < 0.25
    )
    out.checks["goodput reports an MFU on this GPU"] = g.mfu is not None


def activation_checkpointing_memory(ctx: Ctx, out: Outcome) -> None:
    """torch.cuda.max_memory_allocated and step time of the large LM, bf16-mixed, with and without
    `activation_checkpointing=[Block]`."""
    cfg, steps = ctx.plan.large, 6
    batches = make_batches(cfg, steps, pin=ctx.cuda)
    rows: dict[str, dict[str, Any]] = {}
    for label, policy in (("None", None), ("[Block]", [Block])):
        release_memory(ctx)
        torch.cuda.reset_peak_memory_stats()
        marks = Marks(2, steps - 1, ctx.device)
        surge_fit(ctx, LMModule(cfg), batches, [OnBatchStart(marks)], precision="bf16-mixed",
                  activation_checkpointing=policy)  # fmt: skip
        peak = torch.cuda.max_memory_allocated() / 2**20
        rows[label] = {"activation_checkpointing": label, "peak MiB": peak,
                       "step ms": marks.seconds / (steps - 3) * 1e3}  # fmt: skip
        out.rows.append(rows[label])
    off, on = rows["None"], rows["[Block]"]
    on["vs None"] = (
        f"memory {on['peak MiB'] / off['peak MiB']:.2f}x, time {on['step ms'] / off['step ms']:.2f}x"
    )
    out.notes.append(f"{cfg}; {steps} steps each, time over the middle {steps - 3}")
    out.checks["activation checkpointing lowers the peak"] = on["peak MiB"] < off["peak MiB"]


# -- the runner ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Section:
    """A titled check: `run(ctx, out)` fills `out`; it gets `cap_s` at most, and needs `min_s` left."""

    title: str
    run: Callable[[Ctx, Outcome], None]
    cap_s: float  # the section's own time box
    min_s: float = 10.0  # skipped when less than this is left of the budget
    gpu_only: bool = True


SECTIONS = (
    Section("1. Environment", environment, 30, min_s=0, gpu_only=False),
    Section("2. Precision correctness", correctness, 90, gpu_only=False),
    Section("15. Device mesh (ModelParallel) on one GPU", device_mesh, 60),  # new: runs early
    Section("3. No hidden syncs", hidden_syncs, 60),
    Section("3b. Trainer speed arguments", speed_arguments, 45),
    Section("4. Throughput vs a raw loop (eager)", throughput(lambda p: p.eager_cases), 150, gpu_only=False),
    Section("6. Peak memory", peak_memory, 60),
    Section("7. Manual model parallelism", model_parallel, 45),
    Section("8. devices=[N]", device_index, 30),
    Section("9. FSDP (and DataParallel with 2+ GPUs)", sharded, 60),
    Section(
        '10. GPT-style LM, bf16-mixed: eager vs compile="step", MFU',
        gpt_compile_step,
        150,
        min_s=30,
        gpu_only=False,
    ),  # fmt: skip
    Section("11. Activation checkpointing: peak memory", activation_checkpointing_memory, 60),
    Section("12. float8 training (torchao)", float8_training, 150, min_s=60, gpu_only=False),
    Section("13. SpikeGuard on CUDA: host reads, a NaN rolled back", spike_guard_on_cuda, 60),
    Section("14. Goodput: counted FLOPs and MFU", goodput_mfu, 60),
    Section(
        "4b. Throughput vs a raw loop (torch.compile)", throughput(lambda p: p.compiled_cases), 240, min_s=60
    ),
    Section("5. MFU", mfu, 10, min_s=0),  # last: it reads what the throughput sections measured
)


class SectionTimeout(Exception):
    """A section ran past its time box."""


@contextlib.contextmanager
def time_box(seconds: float) -> Iterator[None]:
    """Raise SectionTimeout in the main thread after `seconds` (SIGALRM)."""

    def expire(signum: int, frame: Any) -> None:
        raise SectionTimeout(f"ran past its {seconds:.0f} s time box")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_section(ctx: Ctx, section: Section) -> dict[str, Any]:
    """Run one section in its time box; failures are recorded, never raised."""
    out = Outcome()
    record: dict[str, Any] = {"title": section.title, "status": "SKIPPED", "seconds": 0.0, "error": None}
    left = ctx.deadline - time.monotonic()
    if left < section.min_s:
        out.notes.append(f"skipped: {max(left, 0):.0f} s left of the {ctx.args.budget_s:.0f} s budget")
        return {**record, "rows": out.rows, "checks": out.checks, "notes": out.notes}
    t0 = time.monotonic()
    try:
        with time_box(max(5.0, min(section.cap_s, left))):
            section.run(ctx, out)
        record["status"] = "INFO" if not out.checks else "PASS" if all(out.checks.values()) else "FAIL"
    except NotAvailable as err:
        record["status"] = "N/A"
        out.notes.append(str(err))
    except SectionTimeout as err:
        record["status"] = "TIMEOUT"
        out.notes.append(f"stopped: {err}; the rows above were measured before")
    except Exception:
        record["status"] = "ERROR"
        record["error"] = traceback.format_exc()
    finally:
        if ctx.cuda:
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.set_device(0)
        release_memory(ctx)
    record["seconds"] = round(time.monotonic() - t0, 1)
    return {**record, "rows": out.rows, "checks": out.checks, "notes": out.notes}


def fmt(value: Any) -> str:
    """A table cell."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return "-" if value is None else str(value).replace("|", "\\|")


def render(record: dict[str, Any]) -> str:
    """One section as markdown: a heading with its status, a table, the checks and the notes."""
    lines = [f"## {record['title']}: {record['status']} ({record['seconds']} s)", ""]
    rows = record["rows"]
    if rows:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]
        lines.append("")
    lines += [f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in record["checks"].items()]
    lines += [f"- note: {note}" for note in record["notes"]]
    if record["error"]:
        lines += ["", "```", record["error"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def write_json(ctx: Ctx, path: Path, started: float) -> None:
    """Rewrite the JSON with every section so far."""
    meta = {
        "mode": mode_name(ctx.args),
        "budget_s": ctx.args.budget_s,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "sections": ctx.records}, indent=2, default=str) + "\n")


def mode_name(args: argparse.Namespace) -> str:
    return "cpu-smoke" if args.cpu_smoke else "quick" if args.quick else "full"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and runs (about a minute)")
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="without CUDA: sections 2 and 4 at tiny sizes on CPU"
    )
    parser.add_argument(
        "--out", type=Path, help="JSON path (default benchmarks/results/gpu_check[_cpu_smoke].json)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="total seconds before sections are skipped"
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated section numbers to run (e.g. 1,4,4b,5); default all"
    )
    args = parser.parse_args(argv)
    if args.out is None:
        name = "gpu_check_cpu_smoke.json" if args.cpu_smoke else "gpu_check.json"
        args.out = Path(__file__).resolve().parent / "results" / name
    return args


def route_surge_messages_to_stderr() -> None:
    """surge's info lines (e.g. skipped fp16 steps) go to stderr, so stdout is only the report."""
    log = logging.getLogger("surge")
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sections; exit status 1 if any check failed or a section errored or timed out."""
    started = time.monotonic()
    args = parse_args(argv)
    route_surge_messages_to_stderr()
    device = (
        torch.device("cuda", 0) if torch.cuda.is_available() and not args.cpu_smoke else torch.device("cpu")
    )
    root = tempfile.mkdtemp(prefix="surge_gpu_check_")
    ctx = Ctx(args, make_plan(args.quick, args.cpu_smoke), device, started + args.budget_s, root)
    if not ctx.cuda and not args.cpu_smoke:
        print("no CUDA device: nothing to check\n")
        print(render(run_section(ctx, SECTIONS[0])), flush=True)
        return 0  # no JSON: it must not overwrite a real GPU result
    print(f"# surge GPU check ({mode_name(args)}, {device})\n", flush=True)
    wanted = None if args.only is None else set(args.only.split(","))
    for section in SECTIONS:
        if section.gpu_only and not ctx.cuda:
            continue
        if wanted is not None and section.title.split(".")[0] not in wanted:
            continue
        ctx.records.append(run_section(ctx, section))
        print(render(ctx.records[-1]), flush=True)
        write_json(ctx, args.out, started)
    print("## Summary\n\n| section | status | s |\n|---|---|---|")
    print("\n".join(f"| {r['title']} | {r['status']} | {r['seconds']} |" for r in ctx.records))
    print(f"\ntotal {time.monotonic() - started:.0f} s; JSON: {args.out}")
    return int(any(r["status"] in ("FAIL", "ERROR", "TIMEOUT") for r in ctx.records))


if __name__ == "__main__":
    sys.exit(main())
