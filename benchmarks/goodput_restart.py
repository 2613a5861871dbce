"""Goodput of a job with one restart: a run is killed (SIGKILL) a few seconds after a checkpoint,
another process resumes it, and the resumed run's table is printed (the whole job's accounting).

    python benchmarks/goodput_restart.py [--after 3] [--steps 300]

The first run trains a small MLP on loaded-from-disk-like data (a short sleep per batch), saves a
checkpoint at step 50 and is killed `--after` seconds later; the second resumes from that
checkpoint and trains to `--steps`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

JOB = """
import sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, Dataset
import surge

root, mode, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

class Samples(Dataset):
    def __len__(self):
        return 100_000
    def __getitem__(self, i):
        time.sleep(0.0005)  # reading a sample
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.randn(8, generator=g)

class MLP(surge.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

class SaveAt50(surge.callbacks.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if mode == "first" and trainer.global_step == 50:
            trainer.save_checkpoint(root / "step50.ckpt")
            (root / "saved").write_text("")

trainer = surge.Trainer(max_steps=steps, val_check_interval=100, limit_val_batches=10, default_root_dir=root,
                        callbacks=[SaveAt50()], enable_progress_bar=False, enable_model_summary=False)
loader = DataLoader(Samples(), batch_size=32)
trainer.fit(MLP(), loader, DataLoader(Samples(), batch_size=32),
            ckpt_path=None if mode == "first" else root / "step50.ckpt")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--after", type=float, default=3.0, help="seconds between the checkpoint and the kill"
    )
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        script = root / "job.py"
        script.write_text(JOB)
        command = [sys.executable, str(script), str(root)]
        first = subprocess.Popen([*command, "first", str(args.steps)], env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while not (root / "saved").exists():
            if first.poll() is not None:
                raise SystemExit(f"the first run ended (code {first.returncode}) before its checkpoint")
            time.sleep(0.05)
        time.sleep(args.after)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        print(f"first run killed {args.after:g} s after its checkpoint at step 50; resuming")
        resumed = subprocess.run(
            [*command, "resume", str(args.steps)], env=env, capture_output=True, text=True
        )
        table = [
            line for line in resumed.stdout.splitlines() if not line.startswith(("Resuming", "`Trainer"))
        ]
        print("\n".join(table[-16:]))
        if resumed.returncode:
            raise SystemExit(resumed.stderr[-2000:])


if __name__ == "__main__":
    main()
