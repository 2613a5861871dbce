"""benchmarks/lockstep.py, whose numbers the README's step-time tables rest on: the gate that
pauses a fit every block of batches, and the A/A rule that keeps or discards a round."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import lockstep  # noqa: E402
import lockstep_child  # noqa: E402


class Tiny(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def reports(fd: int) -> list[str]:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data.decode().splitlines()


def test_the_gate_pauses_a_surge_fit_at_every_blocks_first_batch(tmp_path: Path) -> None:
    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    os.write(go_write, b"g" * 10)  # the conductor's go for every block, given ahead
    data = TensorDataset(torch.randn(24, 4), torch.randint(0, 2, (24,)))
    gate = lockstep_child.Gate(go_read, report_write, every=4)
    loader = DataLoader(data, batch_size=2, collate_fn=gate)  # 12 batches a epoch
    trainer = surge.Trainer(max_steps=9, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(Tiny(), train_dataloaders=loader)
    lines = reports(report_read)
    # batches 0, 4, 8 are blocks' first: "ready" before the first, then the two blocks run
    assert lines[0] == "ready" and len(lines) == 3, lines
    for line in lines[1:]:
        wall, cpu = (float(x) for x in line.split())
        assert wall > 0 and cpu >= 0
    assert trainer.global_step == 9 and gate.batches == 9
    assert len(reports(go_read)) == 1  # 3 of the 10 go bytes were read, the rest left


def test_the_gate_stops_the_fit_when_the_conductor_is_gone() -> None:
    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    os.close(go_write)
    gate = lockstep_child.Gate(go_read, report_write, every=2)
    with pytest.raises(SystemExit, match="closed the go pipe"):
        gate([(torch.zeros(1), torch.zeros(1))])
    assert reports(report_read) == ["ready"]


def test_rounds_outside_the_aa_band_are_left_out_for_every_contestant() -> None:
    # round 0: steady (A/A 1.00), round 1: raw_aa 10% slower (discarded), round 2: steady
    wall = {"raw": [1.0, 1.0, 2.0], "raw_aa": [1.0, 1.1, 2.0], "surge": [1.25, 0.5, 2.5]}
    measured = {"wall": wall, "cpu": wall, "results": {"raw": {"steps_per_block": 10}}}
    summary = lockstep.summarize(measured)
    assert summary["kept"] == 2
    rows = {row["contestant"]: row for row in summary["rows"]}
    assert rows["surge"]["speed"] == pytest.approx(0.8)  # both kept rounds: raw / surge = 0.8
    assert rows["surge"]["speed_total"] == pytest.approx(3.0 / 3.75)
    assert rows["surge"]["speed_all_rounds"] == pytest.approx(0.8)  # the discarded round's 2.1 is the max
    assert rows["raw"]["us_per_step"] == pytest.approx(1.5 / 10 * 1e6)


def test_the_result_is_the_median_of_the_sets_and_a_set_without_a_kept_round_is_shown_as_such() -> None:
    def one_set(surge_time: float, raw_aa: float = 1.0) -> dict:
        wall = {"raw": [1.0, 1.0], "raw_aa": [raw_aa, raw_aa], "surge": [surge_time, surge_time]}
        return lockstep.summarize({"wall": wall, "cpu": wall, "results": {"raw": {"steps_per_block": 1}}})

    sets = [one_set(1.0), one_set(1.25), one_set(1.0 / 0.96), one_set(1.0, raw_aa=1.2)]
    combined = lockstep.combine("mlp", sets)
    assert combined["kept"] == [2, 2, 2, 0]
    surge = next(row for row in combined["rows"] if row["contestant"] == "surge")
    assert surge["per_set"][:3] == pytest.approx([1.0, 0.8, 0.96]) and surge["per_set"][3] is None
    assert surge["speed"] == pytest.approx(0.96)  # the median of the three sets that kept rounds
    # without the A/A rule the sets give 1, 0.8, 0.96 and 1.1
    assert surge["speed_all_rounds"] == pytest.approx(0.98)
    assert surge["goal"] == 0.97 and surge["meets_goal"] is False


def test_a_block_that_splits_an_accumulation_window_is_refused_with_the_fix() -> None:
    with pytest.raises(SystemExit):
        lockstep.parse_args(["--workloads", "mlp_accum", "--block", "10"])
    args = lockstep.parse_args(["--workloads", "mlp_accum", "--block", "20"])
    assert lockstep.block_of("mlp_accum", args) == 20
    assert lockstep.block_of("mlp", lockstep.parse_args(["--workloads", "mlp"])) == 500  # one epoch
