"""The step profiler and the doctor: phases add up, and three workloads built to be data-bound,
sync-bound and compute-bound are each named correctly."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import surge
from helpers import TinyModel
from surge.profiler import AdvancedProfiler, SimpleProfiler


class SlowSamples(Dataset):
    """Each sample takes 3 ms to produce (sleep: parallel workers help even on a busy machine)."""

    def __len__(self) -> int:
        return 192

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(4), i % 2


class Syncing(TinyModel):
    """30 host reads per step, on a step wide enough that fetching a ready batch can't reach the
    data-bound share even when a busy machine stalls it (the sync rule is a count, not a clock)."""

    def __init__(self) -> None:
        super().__init__(hidden=1024)

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        for _ in range(30):
            loss.item()  # the habit the doctor must name
        return loss


class Wide(TinyModel):
    def __init__(self) -> None:
        super().__init__(hidden=1024)


def _cheap(n: int = 2048) -> DataLoader:
    """Ready-made batches of 64: fetching one costs next to nothing."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    return DataLoader(list(zip(x.split(64), y.split(64))), batch_size=None)


def _fit(tmp_path, model, loader, profiler="simple", **kwargs) -> surge.Trainer:
    trainer = surge.Trainer(
        max_epochs=1, profiler=profiler, default_root_dir=tmp_path, enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip
    trainer.fit(model, loader)
    return trainer


def test_data_bound_is_named_with_the_measured_worker_gain(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), DataLoader(SlowSamples(), batch_size=8))
    report = trainer.profiler.report
    assert report["bottleneck"] == "data"
    finding = report["findings"][0]
    assert finding["numbers"]["share"] > 0.5 and finding["numbers"]["num_workers"] == 0
    assert "num_workers=2 measured" in finding["message"] and finding["numbers"]["speedup"] >= 1.2


def test_sync_bound_is_named_with_the_count(tmp_path):
    trainer = _fit(tmp_path, Syncing(), _cheap(), profiler=SimpleProfiler(measure_workers=False))
    report = trainer.profiler.report
    assert report["bottleneck"] == "sync"
    assert report["host_reads_per_step"] == 30
    assert "forces 30 host syncs per step (item x30)" in report["findings"][0]["message"]


def test_compute_bound_is_named(tmp_path):
    trainer = _fit(tmp_path, Wide(), _cheap(), profiler=SimpleProfiler(measure_workers=False))
    report = trainer.profiler.report
    assert report["bottleneck"] == "compute" and report["host_reads_per_step"] == 0
    assert report["summary"]["shares"]["data"] < 0.3


def test_phases_add_up_and_the_report_is_written(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), _cheap(), profiler=SimpleProfiler(measure_workers=False))
    summary = trainer.profiler.report["summary"]
    assert summary["steps"] >= 20
    assert sum(summary["shares"].values()) == pytest.approx(1.0, abs=0.02)
    assert all(summary["phases"][p] > 0 for p in ("data", "forward", "backward", "optimizer"))
    written = json.loads((Path(trainer.log_dir) / "doctor.json").read_text())
    assert written["bottleneck"] == trainer.profiler.report["bottleneck"]
    assert (Path(trainer.log_dir) / "doctor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_advanced_names_the_functions_of_each_phase(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), _cheap(256), profiler=AdvancedProfiler(measure_workers=False))
    tables = trainer.profiler.report["functions"]
    assert "training_step" in tables["forward"] and "backward" in tables["backward"]


def test_pytorch_profiler_writes_a_trace(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), _cheap(512), profiler="pytorch")
    traces = list((Path(trainer.log_dir) / "profiler").glob("*.json"))
    assert traces and json.loads(traces[0].read_text())["traceEvents"]


def test_no_profiler_means_no_wrapping(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), _cheap(256), profiler=None)
    assert trainer.profiler is None
    hooks = [fn for fns in trainer._hooks.callback_fns.values() for fn in fns]
    assert not any("Timer" in type(fn.__self__).__name__ for fn in hooks)  # no profiler callback


def test_surge_doctor_runs_a_script_profiled(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import surge\nfrom helpers import TinyModel\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "data = TensorDataset(torch.randn(4096, 4), torch.randint(0, 2, (4096,)))\n"
        "surge.Trainer(max_epochs=5, enable_progress_bar=False).fit(TinyModel(), DataLoader(data, batch_size=8))\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.run(
        [sys.executable, "-m", "surge", "doctor", "--steps", "40", str(script)], capture_output=True, text=True,
        timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-2000:]
    assert "surge doctor: 38 steps" in output and "bottleneck:" in output  # 40 steps, 2 warm-up skipped


def test_the_doctor_reaches_a_trainer_only_through_its_documented_channel(tmp_path, monkeypatch):
    from surge.profiler.doctor_run import DoctorRun, doctor_run

    # The variable `surge doctor` sets is read once, when the process imports surge, never by a Trainer.
    monkeypatch.setenv("SURGE_DOCTOR", "7")
    plain = surge.Trainer(max_steps=50, default_root_dir=tmp_path, logger=False)
    assert plain.profiler is None and plain.max_steps == 50
    with doctor_run(DoctorRun(steps=7)):
        doctored = surge.Trainer(max_steps=50, default_root_dir=tmp_path, logger=False)
    assert isinstance(doctored.profiler, SimpleProfiler) and doctored.max_steps == 50  # ends as an early stop
    assert surge.Trainer(default_root_dir=tmp_path, logger=False).profiler is None  # only inside the block
    assert DoctorRun.from_variables(DoctorRun(40).variables()) == DoctorRun(40)
    assert DoctorRun.from_variables({}) is None


def test_the_doctors_fit_ends_as_an_early_stop_so_the_script_reads_its_validation(tmp_path):
    from surge.profiler.doctor_run import DoctorRun, doctor_run

    with doctor_run(DoctorRun(steps=5)):  # 32 batches an epoch, 3 epochs, at least 2: the doctor ends at 5
        trainer = surge.Trainer(
            max_epochs=3, min_epochs=2, default_root_dir=tmp_path, enable_progress_bar=False
        )
    trainer.fit(TinyModel(), _cheap(), _cheap(256))
    assert trainer.global_step == 5
    assert {"val_loss", "val_acc"} <= set(trainer.callback_metrics)  # validation ran, on 5 batches
    assert trainer.profiler.report["summary"]["steps"] == 3  # 5 steps, 2 warm-up skipped
    assert trainer.checkpoint_callback.best_model_path.endswith("epoch=0-step=5.ckpt")


def test_surge_plot_draws_the_curves(tmp_path):
    from surge.errors import MisconfigurationError
    from surge.profiler.plotting import plot_run

    trainer = _fit(tmp_path, TinyModel(), _cheap(512), profiler=None, log_every_n_steps=2)
    out = plot_run(trainer.log_dir)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    with pytest.raises(MisconfigurationError, match="no metrics.csv"):
        plot_run(tmp_path / "nothing")
    # the CSV file itself is as good as its folder; goodput's one value at the fit's end is no panel
    out.unlink()
    assert plot_run(Path(trainer.log_dir) / "metrics.csv") == out and out.is_file()
    from surge.profiler.plotting import read_metrics

    assert any(n.startswith("goodput/") for n in read_metrics(trainer.log_dir)[1])


class VerySlowSamples(Dataset):
    """40 ms a sample (sleep): a loader whose worker counts would take many seconds to time unbounded."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i):
        time.sleep(0.04)
        return torch.randn(4), i % 2


@pytest.mark.heavy  # measures a share of the fit: runs alone
def test_the_reports_worker_measurement_costs_a_bounded_share_of_the_fit(tmp_path):
    trainer = _fit(tmp_path, TinyModel(), DataLoader(VerySlowSamples(), batch_size=8), max_steps=6)
    finding = trainer.profiler.report["findings"][0]
    numbers = finding["numbers"]
    assert finding["kind"] == "data"
    # ~2.2 s trained (6 steps of 8 samples, no validation step): the report may spend 1 s, its floor.
    assert numbers["budget_s"] == 1.0
    # Rounds end at the deadline: at most one round (a batch per worker) and one start-up beyond it.
    assert numbers["measured_s"] <= numbers["budget_s"] + 2 * 8 * 0.04 + 1.0, numbers


def test_with_a_profiler_the_loop_and_the_doctor_give_one_advice(tmp_path, recwarn):
    trainer = _fit(tmp_path, TinyModel(), DataLoader(VerySlowSamples(), batch_size=1), max_steps=55)
    message = trainer.profiler.report["findings"][0]["message"]
    assert 'num_workers="auto"' in message or "surge.data.cache" in message
    loop_advice = [str(w.message) for w in recwarn if "waited for data" in str(w.message)]
    assert loop_advice == [], "the doctor's report is the one advice when a profiler runs"


def test_the_loops_advice_says_what_the_doctor_says(tmp_path, recwarn):
    surge.Trainer(
        max_steps=60,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    ).fit(TinyModel(), DataLoader(VerySlowSamples(), batch_size=1))
    (advice,) = [str(w.message) for w in recwarn if "waited for data" in str(w.message)]
    assert 'Trainer(num_workers="auto") measures' in advice and "surge.data.cache(dataset, path)" in advice
    assert "num_workers=2" not in advice and "num_workers=4" not in advice  # no count it did not measure


def test_surge_plot_panels_do_not_depend_on_the_column_order():
    from surge.profiler.plotting import panels

    names = ["val_loss", "train_loss_step", "lr", "val_acc", "test_acc", "train_acc", "loss_epoch"]
    expected = {"acc": ["train_acc", "val_acc", "test_acc"], "loss": ["train_loss_step", "val_loss", "loss_epoch"],
                "lr": ["lr"]}  # fmt: skip
    assert panels(names) == expected and list(panels(names)) == ["acc", "loss", "lr"]
    assert panels(list(reversed(names))) == expected and list(panels(list(reversed(names)))) == [
        "acc",
        "loss",
        "lr",
    ]
