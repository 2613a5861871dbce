"""What native code prints on stderr: the batch-size finder on the CPU (torch's profiler, once per
trial) leaves no `USDT ... profiler_start/stop` line on the process's fd 2, and the filter that
drops those lines passes every other line through, errors included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    env.pop("KINETO_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_batch_size_finder_on_the_cpu_prints_no_profiler_markers(tmp_path):
    run = _run(
        """
        import torch, torch.nn.functional as F
        from torch.utils.data import DataLoader, TensorDataset
        import surge

        class Regression(surge.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return F.mse_loss(self.lin(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        x = torch.randn(512, 8)
        loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
        best = surge.tune.find_batch_size(Regression(), train_dataloaders=loader, max_memory=64 * 2**20, max_trials=6)
        print("found", best)
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "found 64" in run.stdout  # six trials, each under the profiler (12 marker lines before the fix)
    assert "largest batch that fits is 64" in run.stderr  # the finder's own report still shows (a message)
    assert "profiler_start" not in run.stderr and "profiler_stop" not in run.stderr, run.stderr[-2000:]
    assert "USDT" not in run.stderr


def test_the_profiler_still_prints_its_markers_outside_the_finder(tmp_path):
    # What the finder hides is real: the same profile, started by the user, prints them.
    run = _run(
        """
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
            torch.randn(8).sum()
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "profiler_start" in run.stderr and "profiler_stop" in run.stderr


def test_the_filter_drops_only_the_markers(tmp_path):
    run = _run(
        """
        import os, sys
        from surge.tune.native_stderr import dropping_lines

        print("before", file=sys.stderr, flush=True)
        with dropping_lines():
            os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\\n")
            os.write(2, b"ERROR:2026-01-01 00:00:00 1:1 Foo.cpp:9] a real error\\n")
            print("a python warning", file=sys.stderr)
            os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\\n")
        try:
            with dropping_lines():
                os.write(2, b"caught before the raise\\n")
                raise KeyError("body failed")
        except KeyError:
            print("the error went through", file=sys.stderr)
        print("after", file=sys.stderr)
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        "before",
        "ERROR:2026-01-01 00:00:00 1:1 Foo.cpp:9] a real error",
        "a python warning",
        "caught before the raise",
        "the error went through",
        "after",
    ]
