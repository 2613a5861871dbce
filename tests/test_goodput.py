"""Goodput: the job's wall time by category, across a restart (docs/long_runs.md)."""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.checkpoint import save_atomic
from surge.profiler.goodput import CATEGORIES

SRC = Path(__file__).resolve().parents[1] / "src"
SLEEP_DATA, SLEEP_VAL = 0.01, 0.02


class SlowData(TensorDataset):
    """Each sample takes SLEEP_DATA seconds to load: a known lower bound of the data wait."""

    def __getitem__(self, i: int):  # type: ignore[override]
        time.sleep(SLEEP_DATA)
        return super().__getitem__(i)


class Linear(surge.Module):
    def __init__(self, d_in: int = 8, d_out: int = 4, val_sleep: float = SLEEP_VAL) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(d_in, d_out)
        self.val_sleep = val_sleep

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        time.sleep(self.val_sleep)
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data(n: int = 32, d_in: int = 8, d_out: int = 4, slow: bool = True) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    kind = SlowData if slow else TensorDataset
    return kind(torch.randn(n, d_in, generator=g), torch.randn(n, d_out, generator=g))


def test_the_categories_sum_to_the_measured_wall_and_each_holds_its_known_time(tmp_path, caplog):
    trainer = surge.Trainer(
        max_epochs=2, default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
        goodput_report="table",
    )  # fmt: skip
    began = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="surge"):
        trainer.fit(
            Linear(), DataLoader(_data(), batch_size=4), DataLoader(_data(8, slow=False), batch_size=4)
        )
    measured = time.perf_counter() - began
    goodput = trainer.goodput
    assert goodput is not None and set(goodput.seconds) == set(CATEGORIES)
    assert goodput.wall_s == sum(goodput.seconds.values())
    assert abs(goodput.wall_s - measured) < 0.05 * measured + 0.1, (goodput.wall_s, measured)
    s = goodput.seconds
    assert s["data"] >= 2 * 32 * SLEEP_DATA * 0.95  # 2 epochs of 32 slow samples
    assert s["data"] < 2 * 32 * SLEEP_DATA + 1.0
    val_batches = 2 + 2 * 2  # the sanity check's 2, then 2 per epoch
    assert s["validation"] >= val_batches * SLEEP_VAL * 0.95
    assert s["checkpoint"] > 0 and s["train"] > 0 and s["redone"] == s["downtime"] == 0
    assert s["setup"] > 0 and s["teardown"] > 0 and s["other"] == 0  # fit() before and after training
    assert goodput.runs == 1 and 0 < goodput.train_fraction < 1
    assert "Goodput" in caplog.text and "wall (1 run)" in caplog.text
    metrics = (Path(trainer.log_dir) / "metrics.csv").read_text()
    assert "goodput/train_fraction" in metrics and "goodput/data_s" in metrics


def test_the_fit_ends_with_one_line_and_logs_only_the_categories_that_took_time(tmp_path, caplog):
    kw = dict(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False)
    data = DataLoader(_data(8, slow=False), batch_size=4)
    with caplog.at_level(logging.INFO, logger="surge"):
        trainer = surge.Trainer(**kw)
        trainer.fit(Linear(), data)
    said = [r.getMessage() for r in caplog.records if "Goodput" in r.getMessage()]
    assert len(said) == 1 and said[0].count("\n") == 0 and said[0].startswith("Goodput: ")
    assert "trainer.goodput.table()" in said[0] and "wall (1 run)" in trainer.goodput.table()
    rows = csv.DictReader((Path(trainer.log_dir) / "metrics.csv").read_text().splitlines())
    logged = next(r for r in rows if r.get("goodput/wall_s"))
    named = {k for k, v in logged.items() if k.startswith("goodput/") and v != ""}
    assert {"goodput/train_fraction", "goodput/wall_s"} <= named  # always; a category only when it took time
    assert all(float(logged[k]) >= 0.005 for k in named if k.endswith("_s"))  # only what took time
    assert "goodput/redone_s" not in named and "goodput/downtime_s" not in named  # nothing to say: no column
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="surge"):
        surge.Trainer(**kw, goodput_report="off").fit(Linear(), data)
    assert "Goodput" not in caplog.text
    with pytest.raises(surge.MisconfigurationError, match="goodput_report"):
        surge.Trainer(goodput_report="full")


def test_the_flops_counted_for_a_linear_model_equal_the_formula(tmp_path):
    batch, d_in, d_out = 4, 8, 4
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Linear(d_in, d_out), DataLoader(_data(16, d_in, d_out, slow=False), batch_size=batch))
    goodput = trainer.goodput
    assert goodput is not None
    # forward: x @ W.T (2*B*in*out); backward: the weight's gradient only (x needs none), the same
    assert goodput.flops_per_step == 2 * (2 * batch * d_in * d_out)
    assert goodput.flops_per_s is not None and goodput.flops_per_s > 0
    assert goodput.mfu is None and goodput.device == "cpu"  # no peak on CPU: achieved FLOP/s only


class SkipsFirst(Linear):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)  # (the forward runs; its loss is dropped)
        return None if batch_idx == 0 else loss


def test_a_first_step_without_a_backward_gives_no_flops_per_s(tmp_path):
    """The fit's first step returns None (no backward): its count is a forward alone, about a third
    of a trained step's, so it is no step's FLOPs; the report says so instead of a low FLOP/s."""
    trainer = surge.Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(SkipsFirst(), DataLoader(_data(16, slow=False), batch_size=4))
    goodput = trainer.goodput
    assert goodput is not None and trainer.global_step == 4
    assert goodput.flops_per_step is None and goodput.flops_per_s is None
    assert any("no FLOP/s" in note and "no backward" in note for note in goodput.notes)


class NoLoss(Linear):
    def training_step(self, batch, batch_idx):
        return {"not_loss": super().training_step(batch, batch_idx)}  # refused after the forward ran


def test_a_first_step_that_fails_before_its_backward_leaves_no_flop_counter_behind(tmp_path):
    # The count is a process-wide dispatch mode, and torch.compile skips every frame while one
    # is active: a count left open would silently turn each later compiled fit in the process eager.
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    trainer = surge.Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    try:
        trainer.fit(NoLoss(), DataLoader(_data(8, slow=False), batch_size=4))
    except surge.SurgeError:
        pass
    else:
        raise AssertionError("a step without a loss must be refused")
    assert _get_current_dispatch_mode_stack() == []
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    from surge.speed.compiling import graphs_compiled

    before = graphs_compiled()
    compiled(torch.ones(3))
    assert graphs_compiled() == before + 1  # dynamo still compiles in this process


JOB = """
import json, sys, time
from pathlib import Path
import pytest
import torch
sys.path.insert(0, {tests!r})
import surge
from torch.utils.data import DataLoader
from test_goodput import Linear, _data

root, mode = Path(sys.argv[1]), sys.argv[2]

class SaveOnce(surge.callbacks.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 5 and mode == "first":
            trainer.save_checkpoint(root / "mid.ckpt")
            (root / "saved").write_text(str(time.time()))

if mode == "first":
    (root / "fit_start").write_text(str(time.time()))
trainer = surge.Trainer(
    max_steps=400 if mode == "first" else 12, default_root_dir=root, callbacks=[SaveOnce()],
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    num_sanity_val_steps=0, limit_val_batches=0,
)
trainer.fit(Linear(), DataLoader(_data(800), batch_size=2), ckpt_path=None if mode == "first" else root / "mid.ckpt")
g = trainer.goodput
(root / "report.json").write_text(json.dumps({{"seconds": dict(g.seconds), "runs": g.runs, "end": time.time(),
                                             "notes": list(g.notes)}}))
"""


def _start(script: Path, root: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, str(script), str(root), mode], env=env, start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended (code {proc.returncode}) before writing {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.05)


def test_a_run_killed_mid_epoch_and_resumed_reports_redone_work_and_the_whole_job(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB.format(tests=str(Path(__file__).parent)))
    first = _start(script, tmp_path, "first")
    try:
        _wait_for(tmp_path / "saved", first)
        time.sleep(2.5)  # training goes on past the checkpoint (heartbeats every second)
        assert first.poll() is None, "the first run should still be training"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    saved = float((tmp_path / "saved").read_text())
    killed = time.time()
    second = _start(script, tmp_path, "resume")
    assert second.wait(timeout=300) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    s = report["seconds"]
    assert report["runs"] == 2
    lived_after = killed - saved  # the kill came this long after the checkpoint (at most)
    assert lived_after - 1.5 <= s["redone"] <= lived_after + 0.1, (s["redone"], lived_after)
    assert s["downtime"] + s["startup"] > 0 and s["resume"] > 0
    whole = report["end"] - float((tmp_path / "fit_start").read_text())
    assert abs(sum(s.values()) - whole) < 0.05 * whole + 0.5, (sum(s.values()), whole)


def test_a_checkpoint_without_the_accounting_still_resumes(tmp_path):
    kwargs = dict(default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    first = surge.Trainer(max_steps=4, **kwargs)
    first.fit(Linear(), DataLoader(_data(16, slow=False), batch_size=2))
    path = tmp_path / "old.ckpt"
    first.save_checkpoint(path)
    state = torch.load(path, weights_only=True)
    assert state["surge"].pop("goodput")["version"] == 1  # as an older surge wrote it
    save_atomic(state, path)
    second = surge.Trainer(max_steps=6, **kwargs)
    second.fit(Linear(), DataLoader(_data(16, slow=False), batch_size=2), ckpt_path=path)
    goodput = second.goodput
    assert goodput is not None and goodput.runs == 1 and second.global_step == 6
    assert any("no goodput accounting" in note for note in goodput.notes)


def _counted_models():
    nn = torch.nn
    yield "mlp", nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), lambda: torch.randn(8, 32)
    yield (
        "cnn",
        nn.Sequential(
            nn.Conv2d(1, 4, 3),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(4 * 13 * 13, 10),
        ),
        lambda: torch.randn(2, 1, 28, 28),
    )
    yield (
        "transformer",
        nn.TransformerEncoderLayer(16, 2, 32, batch_first=True),
        lambda: torch.randn(2, 5, 16),
    )
    yield (
        "embedding_gru",
        nn.Sequential(nn.Embedding(20, 8), nn.GRU(8, 8)),
        lambda: torch.randint(0, 20, (3, 4)),
    )
    yield (
        "frozen_first_layer",
        nn.Sequential(nn.Linear(8, 8).requires_grad_(False), nn.Linear(8, 2)),
        lambda: torch.randn(4, 8),
    )


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "embedding_gru", "frozen_first_layer"])
def test_the_step_count_equals_torchs_flop_counter(name):
    """surge's count drops FlopCounterMode's per-module attribution, not a FLOP: both totals agree
    (decompositions included: the GRU is counted through its decomposition)."""
    from torch.utils.flop_counter import FlopCounterMode

    from surge.profiler.flop_count import FlopCount

    model, make_input = next((m, x) for n, m, x in _counted_models() if n == name)

    def step() -> None:
        torch.manual_seed(0)
        out = model(make_input())
        out = out[0] if isinstance(out, tuple) else out
        out.float().pow(2).mean().backward()

    reference, ours = FlopCounterMode(display=False), FlopCount()
    with reference:
        step()
    with ours:
        step()
    assert ours.total == reference.get_total_flops() > 0
    assert ours.uncounted is None


def test_a_higher_order_op_is_run_and_named_and_the_partial_count_gives_no_flops_per_s():
    """`torch.cond` runs (its value as without the count); the count names it rather than passing a
    smaller total off as the step's, and the report then gives no FLOP/s, with a note saying why."""
    from surge.profiler.flop_count import FlopCount
    from surge.profiler.flops import StepFlops

    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with torch.no_grad():
        plain = torch.cond(x.sum() > 0, lambda t: lin(t), lambda t: lin(t) * 2, (x,))
        count = FlopCount()
        with count:
            counted = torch.cond(x.sum() > 0, lambda t: lin(t), lambda t: lin(t) * 2, (x,))
    assert torch.equal(plain, counted)
    assert count.uncounted == "cond"
    flops = StepFlops(torch.device("cpu"))
    flops.counted, flops.uncounted = 48.0, "cond"
    assert "flops_per_s" not in flops.values(train_s=1.0, steps=10)
