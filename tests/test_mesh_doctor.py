"""The doctor's mesh measurements and findings on made-up profiler records (mesh_comm.py,
mesh_findings.py); the real gloo runs are in tests/distributed/test_mesh_training.py and
test_pipeline.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from surge.profiler.mesh_comm import SCHEDULE_RECORD, MeshComm, measure
from surge.profiler.mesh_findings import mesh_findings, mesh_lines
from surge.strategies.pipeline_stages import Bubble, PipelineLayout


def event(name: str, start: float, end: float) -> SimpleNamespace:
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_each_kind_of_communication_is_timed_once_where_spans_nest_and_counted_by_launches():
    events = [
        event("ProfilerStep*", 0, 1000), event("ProfilerStep*", 1000, 2000),
        event("Redistribute", 100, 300), event("_c10d_functional::all_reduce", 110, 120),
        event("_c10d_functional::wait_tensor", 200, 290),  # inside Redistribute: counted once
        event("RedistributeBackward", 1500, 1600), event("_c10d_functional::all_reduce", 1510, 1520),
        event("FSDP::all_gather", 400, 500), event("c10d::_allgather_base_", 410, 480),
        event("FSDP::post_backward_reduce", 1700, 1800),
        event("gloo:all_reduce", 0, 2000),  # the gloo worker thread's span: not the step's time
        event("aten::mm", 600, 700),
    ]  # fmt: skip
    comm = measure(events)
    assert (comm.steps, comm.wall_s) == (2, pytest.approx(2000e-6))
    assert comm.seconds["tensor_parallel"] == pytest.approx(300e-6)
    assert comm.seconds["fsdp"] == pytest.approx(200e-6)
    assert comm.launches == {"tensor_parallel": 2, "fsdp": 2, "pipeline": 0}
    assert comm.share("tensor_parallel") == pytest.approx(0.15) and comm.per_step("fsdp") == 1


def test_a_schedule_run_s_receive_waits_are_the_measured_idle_share():
    events = [
        event("ProfilerStep*", 0, 1000), event(SCHEDULE_RECORD, 100, 900),
        event("c10d::send", 150, 160), event("gloo:send", 160, 200),
        event("c10d::recv_", 300, 310), event("gloo:recv", 310, 500),
    ]  # fmt: skip
    comm = measure(events)
    assert comm.schedule_runs == 1 and comm.launches["pipeline"] == 2
    assert comm.waiting_share == pytest.approx(200 / 800)


@pytest.mark.parametrize(
    ("p", "v", "m", "expected"), [(2, 1, 2, 1 / 3), (2, 1, 8, 1 / 9), (4, 1, 8, 3 / 11), (2, 2, 4, 1 / 9)]
)
def test_the_bubble_is_p_minus_1_over_v_m_plus_p_minus_1(p, v, m, expected):
    schedule = "Interleaved1F1B" if v > 1 else "1F1B"
    assert PipelineLayout.of("ModelParallel", p, schedule, v).bubble(m).fraction == pytest.approx(expected)


class Strategy:
    def __init__(self, bubble: Bubble | None, sizes: tuple[int, int] = (2, 2)) -> None:
        self._bubble = bubble
        self.device_mesh = SimpleNamespace(mesh_dim_names=("data_parallel", "tensor_parallel"), shape=sizes)

    def pipeline_bubble(self) -> Bubble | None:
        return self._bubble


def test_the_doctor_names_a_bubble_of_a_third_with_its_fixes_and_not_one_of_a_ninth():
    (found,) = mesh_findings(None, Strategy(Bubble(2, 1, 2, "1F1B")))
    assert found["kind"] == "pipeline_bubble" and found["numbers"]["share"] == pytest.approx(1 / 3)
    assert "33%" in found["message"] and "accumulate_grad_batches=8 makes it 11%" in found["message"]
    assert "pipeline_schedule='Interleaved1F1B' (2 stages per rank: 20%)" in found["message"]
    assert mesh_findings(None, Strategy(Bubble(2, 1, 8, "1F1B"))) == []


def test_tensor_parallel_and_fsdp_time_are_named_with_their_fixes():
    comm = MeshComm(
        steps=4, wall_s=1.0, seconds={"tensor_parallel": 0.4, "fsdp": 0.25, "pipeline": 0.0},
        launches={"tensor_parallel": 24, "fsdp": 8, "pipeline": 0},
    )  # fmt: skip
    tp, fsdp = mesh_findings(comm, Strategy(None))
    assert tp["kind"] == "tensor_parallel" and "6 per step" in tp["message"] and "40%" in tp["message"]
    assert "ModelParallel(data_parallel=4, tensor_parallel=1)" in tp["message"]
    assert fsdp["kind"] == "fsdp" and "reshard_after_forward=False" in fsdp["message"]
    quiet = MeshComm(steps=4, wall_s=1.0, seconds={"tensor_parallel": 0.1, "fsdp": 0.1})
    assert mesh_findings(quiet, Strategy(None)) == []


def test_the_report_shows_each_kind_s_share_and_the_bubble():
    report = {
        "mesh": {
            "steps": 8, "wall_s": 1.0, "tensor_parallel": {"share": 0.36, "per_step": 24.5},
            "fsdp": {"share": 0.1, "per_step": 2.5}, "pipeline": {"share": 0.0, "per_step": 0.0},
        },
        "pipeline": {"bubble": 1 / 3, "pipeline_parallel": 2, "micro_batches": 2, "schedule": "1F1B"},
    }  # fmt: skip
    lines = mesh_lines(report)
    assert lines[0].split() == [
        "tensor-parallel",
        "36.0%",
        "(24.5",
        "collectives",
        "per",
        "step,",
        "8",
        "steps",
        "profiled)",
    ]
    assert lines[1].startswith("  fsdp") and len(lines) == 3  # no send/recv line: none counted
    assert lines[2].split()[:3] == ["pipeline", "bubble", "33.3%"]
