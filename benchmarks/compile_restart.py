"""The first steps of a resumed compiled run against a cold one: `compile=...` saves torch's compiled
artifacts beside the checkpoints, and a resumed run loads them instead of compiling again.

    python benchmarks/compile_restart.py [--compile step] [--first 5]

Three processes, each with an empty inductor cache of its own (TORCHINDUCTOR_CACHE_DIR), so only
the saved artifacts can make a run warm: a cold run (saves a checkpoint at step 5 and trains on),
a run resumed from it with the artifacts, and one resumed with them removed. Printed per run: the
seconds from training's start to `--first` steps after it, and goodput's compile seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

JOB = """
import json, sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
import surge

root, mode, scope, first = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
compile_arg = True if scope == "forward" else scope

class Net(surge.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(4)],
                                       torch.nn.Linear(64, 8))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

class Clock(surge.callbacks.Callback):
    def on_train_start(self, trainer, module):
        self.start, self.step0 = time.perf_counter(), trainer.global_step
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step0 + first:
            self.first_s = time.perf_counter() - self.start
        if mode == "cold" and trainer.global_step == 5:
            trainer.save_checkpoint(root / "ckpts" / "step5.ckpt")

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(512, 64, generator=g), torch.randn(512, 8, generator=g))
clock = Clock()
trainer = surge.Trainer(max_steps=5 + 2 * first, compile=compile_arg, default_root_dir=root / mode, callbacks=[clock],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Net(), DataLoader(data, batch_size=32), ckpt_path=None if mode == "cold" else root / "ckpts" / "step5.ckpt")
g = trainer.goodput
(root / f"{mode}.json").write_text(json.dumps({"first_s": clock.first_s, "compile_s": g.run_seconds["compile"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", default="forward", choices=("forward", "step", "regions"))
    parser.add_argument("--first", type=int, default=5, help="the steps timed from training's start")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "job.py").write_text(JOB)
        results = {}
        for mode in ("cold", "resumed", "resumed without artifacts"):
            if mode == "resumed without artifacts":
                shutil.rmtree(root / "resumed", ignore_errors=True)
                (root / "ckpts" / "compile-cache.bin").unlink()
            env = {
                **os.environ,
                "PYTHONPATH": str(SRC),
                "TORCHINDUCTOR_CACHE_DIR": str(root / f"cache-{len(results)}"),
            }
            name = mode.split()[0] if mode != "resumed without artifacts" else "bare"
            command = [sys.executable, str(root / "job.py"), str(root), name, args.compile, str(args.first)]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            results[mode] = json.loads((root / f"{name}.json").read_text())
        print(f"compile={args.compile!r}, the first {args.first} steps after training starts")
        print(f"{'run':<28}{'first steps s':>15}{'compile s':>12}")
        for mode, r in results.items():
            print(f"{mode:<28}{r['first_s']:>15.2f}{r['compile_s']:>12.2f}")


if __name__ == "__main__":
    main()
