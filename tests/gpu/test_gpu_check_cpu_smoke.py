"""benchmarks/gpu_check.py: the CPU smoke run end to end, the exit without CUDA, and real bf16 steps on a GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import surge

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def _load_gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_cpu_smoke_runs_correctness_and_throughput(tmp_path):
    out = tmp_path / "smoke.json"
    proc = _run("--cpu-smoke", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sections = {s["title"]: s for s in json.loads(out.read_text())["sections"]}
    assert list(sections) == [
        "1. Environment",
        "2. Precision correctness",
        "4. Throughput vs a raw loop (eager)",
        '10. GPT-style LM, bf16-mixed: eager vs compile="step", MFU',
        "12. float8 training (torchao)",
    ]
    gpt = sections['10. GPT-style LM, bf16-mixed: eager vs compile="step", MFU']
    assert gpt["status"] == "PASS" and gpt["rows"][0]["run"] == "eager" and gpt["rows"][0]["tok/s"] > 0, gpt
    assert any('compile="step"' in note for note in gpt["notes"]), gpt
    assert sections["12. float8 training (torchao)"]["notes"] == ["skipped: needs a CUDA GPU"]
    correctness = sections["2. Precision correctness"]
    assert correctness["status"] == "PASS", correctness
    assert [row["precision"] for row in correctness["rows"]] == ["32-true", "bf16-mixed"]
    speed = sections["4. Throughput vs a raw loop (eager)"]
    assert speed["status"] == "INFO", speed
    assert all(row["raw tok/s"] > 0 and row["surge tok/s"] > 0 for row in speed["rows"])
    assert "## Summary" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the exit on a machine without CUDA")
def test_without_cuda_prints_the_environment_and_exits_0(tmp_path):
    out = tmp_path / "none.json"
    proc = _run("--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("no CUDA device: nothing to check")
    assert "## 1. Environment" in proc.stdout
    assert not out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_mixed_steps_on_cuda(tmp_path):
    gpu_check = _load_gpu_check()
    cfg = gpu_check.LMConfig(vocab=64, d_model=64, n_layers=2, n_heads=2, seq=32, batch=8)
    module, recorder = gpu_check.LMModule(cfg), gpu_check.LossRecorder()
    trainer = surge.Trainer(
        accelerator="cuda",
        devices=1,
        precision="bf16-mixed",
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train_dataloaders=gpu_check.Batches(gpu_check.make_batches(cfg, 5, pin=True)))
    assert module.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in module.parameters())
    losses = recorder.values()
    assert len(losses) == 5 and all(math.isfinite(x) for x in losses)
