"""Step time and memory per rank of one model on 4 processes, laid out three ways on a device mesh:
`python benchmarks/mesh_layouts.py [--width 256] [--blocks 4] [--steps 30]`.

Layouts (data_parallel x tensor_parallel): 1x4 (tensor parallel only), 2x2, 4x1 (FSDP2 only), each
with `surge.strategies.ModelParallel` on gloo CPU processes (`Trainer(devices=4)`), the same
transformer blocks, the same global batch (the data-parallel ranks split it) and AdamW. Every layout
runs in a fresh process. Per rank it records:
- the median wall time of a training step after `--warmup` steps (batch start to batch end);
- the bytes of the parameters and the optimizer state this rank holds (its shards: exact; its
  gradients, freed after each step, take as much as its parameters while they live);
- the process's peak resident memory (`ru_maxrss`; torch, gloo and Python included).
Rank 0 writes them as JSON, and the table is printed. Step time on a shared CPU swings with the
machine's load (stated in the output); the bytes do not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # this checkout's surge

LAYOUTS = ((1, 1), (1, 4), (2, 2), (4, 1))  # (1, 1): one plain process, the reference


def _model(width: int, blocks: int, heads: int):
    import torch
    import torch.nn.functional as F
    from torch import nn

    import surge

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
            self.out = nn.Linear(width, width)
            self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.norm1(x)
            q, k, v = self.q(h), self.k(h), self.v(h)
            local = q.shape[-1] // (width // heads)  # this rank's heads under tensor parallel
            q, k, v = (z.view(b, t, local, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(y.transpose(1, 2).reshape(b, t, -1))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class Net(surge.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.blocks = nn.Sequential(*(Block() for _ in range(blocks)))
            self.head = nn.Linear(width, width)

        def configure_model(self):
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            mesh = getattr(self, "device_mesh", None)
            if mesh is None or mesh["tensor_parallel"].size() == 1:
                return
            col, row = ColwiseParallel(), RowwiseParallel()
            plan = {"q": col, "k": col, "v": col, "out": row, "fc1": col, "fc2": row}
            for block in self.blocks:
                parallelize_module(block, mesh["tensor_parallel"], plan)

        def forward(self, x):
            return self.head(self.blocks(x))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    return Net, Block


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def child(args: argparse.Namespace) -> None:
    """One layout, 4 ranks: rank 0 writes every rank's numbers to `args.out`."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import surge

    Net, Block = _model(args.width, args.blocks, args.heads)
    dp, tp = (int(s) for s in args.layout.split("x"))
    times: list[float] = []

    class Clock(surge.callbacks.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            times.append(time.perf_counter() - self.t0)

    steps = args.warmup + args.steps
    strategy = (
        "auto"
        if dp * tp == 1
        else surge.strategies.ModelParallel(data_parallel=dp, tensor_parallel=tp, shard={Block})
    )
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * args.batch, args.seq, args.width, generator=g)
    data = TensorDataset(x, x.roll(1, dims=1))
    trainer = surge.Trainer(
        accelerator="cpu", devices=dp * tp, max_steps=steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, goodput_report="off", callbacks=[Clock()],
        strategy=strategy,
    )  # fmt: skip
    model = Net()
    trainer.fit(model, DataLoader(data, batch_size=args.batch // dp))
    opt = trainer.optimizers[0]
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    params = list(model.parameters())
    mine = {
        "rank": trainer.global_rank,
        "step_ms": 1000 * statistics.median(times[args.warmup :]),
        "params_mib": _local_bytes(params) / 2**20,
        "optimizer_mib": _local_bytes(state) / 2**20,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    everyone = trainer.strategy.all_gather_object(mine) if dp * tp > 1 else [mine]
    if trainer.is_global_zero:
        Path(args.out).write_text(json.dumps(everyone))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=8, help="the global batch, split by the data-parallel ranks")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--layout", help=argparse.SUPPRESS)  # a child: run this layout
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.layout:
        return child(args)
    print(f"width {args.width}, {args.blocks} blocks, seq {args.seq}, global batch {args.batch}, "
          f"{args.steps} timed steps; {os.cpu_count()} cores, load average before {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("\n| layout (dp x tp) | step ms (median, rank 0) | params MiB/rank "
          "| optimizer state MiB/rank | peak RSS MiB (max rank) |")  # fmt: skip
    print("|---|---|---|---|---|")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for dp, tp in LAYOUTS:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp, "ranks.json")
            argv = [sys.executable, __file__, "--layout", f"{dp}x{tp}", "--out", str(out)]
            for name in ("width", "blocks", "heads", "seq", "batch", "steps", "warmup"):
                argv += [f"--{name}", str(getattr(args, name))]
            subprocess.run(argv, check=True, cwd=tmp, env=env)
            ranks = json.loads(out.read_text())
        r0 = ranks[0]
        print(f"| {dp}x{tp} | {r0['step_ms']:.1f} | {r0['params_mib']:.2f} "
              f"| {r0['optimizer_mib']:.2f} | {max(r['peak_rss_mib'] for r in ranks):.0f} |")  # fmt: skip
    print(f"\nload average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
