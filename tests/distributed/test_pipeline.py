"""Pipeline parallelism on real gloo processes (`ModelParallel(pipeline_parallel=2, ...)`,
pipeline_script.py) against one plain process with the same loader and accumulation: 12 AdamW steps
of accumulation 4 (4 micro-batches a step) clipped at a norm of 0.5. One launch per world size runs
every scenario: GPipe, 1F1B and Interleaved1F1B (2 ranks x 2 stages) on 2 processes, stages the
module builds, a resume on the same layout and a refused one, bf16-mixed, compiled stages, the
doctor's bubble at 2 and 8 micro-batches; on 4 processes 2 stages x 2 data-parallel ranks, and 2
stages x 2 tensor-parallel ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from jobs import PRELOAD, clean_env

import script_server
import surge
from shared_runs import shared_run

SCRIPT = Path(__file__).with_name("pipeline_script.py")

pytestmark = pytest.mark.slow  # 2 and 4 processes on 2 cores


def launch(tmp_path_factory, world: int) -> dict:
    def make(folder: Path) -> dict:
        out = folder / "out.pt"
        argv = [str(SCRIPT), "--world", str(world), "--root", str(folder), "--out", str(out)]
        proc = script_server.run(
            sys.executable, argv, cwd=folder, env=clean_env(), preload=PRELOAD, timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return torch.load(out, weights_only=True)

    return shared_run(tmp_path_factory, "pipeline_script", [world], make)


@pytest.fixture(scope="module")
def ones(tmp_path_factory) -> dict:
    return launch(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def one(ones) -> dict:
    return ones["reference"]


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> dict:
    return launch(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> dict:
    return launch(tmp_path_factory, 4)


def logged(run: dict) -> list:
    """The rows the loggers got, without goodput's (wall-clock) ones."""
    return [(step, row) for step, row in run["rows"] if not any(k.startswith("goodput/") for k in row)]


def assert_weights(run: dict, one: dict, tol: float) -> None:
    assert run["state_dict"].keys() == one["state_dict"].keys()
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(run["state_dict"][key], value, atol=tol, rtol=0)


def assert_rows_close(ours: list, single: list) -> None:
    assert [step for step, _ in ours] == [step for step, _ in single]
    for (_, row), (_, expected) in zip(ours, single):
        assert row.keys() == expected.keys()
        assert row == pytest.approx(expected, rel=1e-6, abs=0)


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B", "Interleaved1F1B"])
def test_two_stages_train_as_one_process(one, two, schedule):
    run = two[schedule]
    assert run["global_step"] == one["global_step"] == 12
    assert_weights(run, one, 1e-6)
    assert logged(run) == logged(one)  # the mean over micro-batches, per step and per epoch, exactly
    assert all(m == one["metrics"][0] for m in run["metrics"])  # every rank: the last stage's values


def test_the_split_is_balanced_by_layer_count_and_shown(two):
    assert two["1F1B"]["split"].endswith("stage 0: layers 0-3, stage 1: layers 4-6")
    assert two["Interleaved1F1B"]["split"].endswith(
        "stage 0: layers 0-1, stage 1: layers 2-3, stage 2: layers 4-5, stage 3: layers 6-6"
    )


def test_a_pipeline_resumes_exactly_on_its_layout_and_refuses_another(two):
    resumed, whole = two["resumed"], two["1F1B"]  # 2 epochs, then the third from their checkpoint
    assert_weights(resumed, whole, 0.0)
    assert logged(resumed) == [row for row in logged(whole) if row[0] > 8]  # the third epoch's rows
    assert (
        "CheckpointError" in two["other_layout"]
        and "with pipeline_parallel=2 (2 stages)" in two["other_layout"]
    )


def test_two_stages_by_two_data_parallel_ranks_train_as_one_process(one, four):
    run = four["pp2dp2"]
    assert run["global_step"] == 12
    assert_weights(run, one, 1e-6)
    assert_rows_close(logged(run), logged(one))
    assert all(m == run["metrics"][0] for m in run["metrics"])
    assert run["metrics"][0]["seen"] == 128.0  # each sample once: reduced over the data-parallel group


def test_batch_end_sees_the_window_last_loss_on_the_last_stage_and_zero_elsewhere(one, two):
    first, last = two["1F1B"]["outputs"]
    (single,) = one["outputs"]
    assert len(first) == len(last) == len(single) == 48
    assert first == [0.0] * 48
    ends = [i for i in range(48) if i % 4 == 3]
    assert [last[i] for i in ends] == [single[i] for i in ends]
    assert all(last[i] == 0.0 for i in range(48) if i not in ends)


def test_bf16_mixed_stages_train_near_one_process_bf16_run(ones, two):
    run, single = two["bf16"], ones["bf16"]
    assert run["global_step"] == 12
    assert_weights(run, single, 5e-2)  # bf16 rounds at 2^-8; AdamW turns roundings into lr-sized steps


def test_two_stages_by_two_tensor_parallel_ranks_train_as_one_process(one, four):
    run = four["pp2tp2"]  # a 3-D mesh: the plan of configure_model inside each stage
    assert run["global_step"] == 12
    assert_weights(run, one, 1e-6)
    assert_rows_close(logged(run), logged(one))


def test_stages_the_module_builds_train_as_one_process(one, two):
    run = two["own_stages"]  # pipeline_stages(): layers 0-4 and 5-6
    assert run["split"] == "2 stages from OwnStages.pipeline_stages()"
    assert_weights(run, one, 1e-6)
    assert_rows_close(logged(run), logged(one))  # (the clipping norm sums other parts: ulps differ)


def test_compiled_stages_train_as_one_process(one, two):
    run = two["compiled"]  # compile=True: each stage's forward (aot_eager backend)
    assert run["global_step"] == 12
    assert_weights(run, one, 1e-6)
    assert_rows_close(logged(run), logged(one))
    assert "compile='step'" in two["step_compile"] and "pipeline_parallel=2" in two["step_compile"]


def test_the_doctor_names_the_bubble_of_two_micro_batches_and_not_of_eight(two):
    few, many = two["doctor2"]["doctor"], two["doctor8"]["doctor"]
    assert few["pipeline"]["bubble"] == pytest.approx(1 / 3)  # (p-1)/(m+p-1), 2 stages
    assert many["pipeline"]["bubble"] == pytest.approx(1 / 9)
    (bubble,) = [f for f in few["findings"] if f["kind"] == "pipeline_bubble"]
    assert "33%" in bubble["message"] and "accumulate_grad_batches=8" in bubble["message"]
    assert "pipeline_bubble" not in [f["kind"] for f in many["findings"]]
    # measured on the first stage: 2 sends and 2 receives per schedule run, and some waiting
    schedule = few["mesh"]["schedule"]
    assert schedule["p2p_per_run"] == 4 and 0 < schedule["waiting_share"] < 1
    assert bubble["numbers"]["measured_wait"] == schedule["waiting_share"]


def test_a_tuple_crosses_a_stage_boundary_and_gpipe_runs_one_micro_batch_a_step(ones, two):
    run, single = two["tuple"], ones["tuple"]  # accumulate 1: the first step runs the schedule
    assert run["global_step"] == single["global_step"] == 48
    assert_weights(run, single, 1e-6)
    assert_rows_close(logged(run), logged(single))


@pytest.mark.parametrize("scenario", ["1F1B", "Interleaved1F1B", "own_stages", "tuple", "pp2dp2", "pp2tp2"])
def test_trainer_export_writes_every_stage(two, four, scenario):
    run = {**two, **four}[scenario]  # rank zero holds the first stage only; the file holds all of them
    assert run["exported"].keys() == run["state_dict"].keys()
    for key, value in run["state_dict"].items():
        assert torch.equal(run["exported"][key], value), key


def test_surge_export_gathers_every_stage_from_a_pipeline_checkpoint(two, tmp_path):
    from safetensors.torch import load_file

    run = two["Interleaved1F1B"]  # 4 stages on 2 ranks; the last checkpoint holds the final weights
    out = surge.export_safetensors(run["ckpts"][-1], tmp_path / "model.safetensors")
    exported = load_file(str(out))
    assert exported.keys() == run["state_dict"].keys()
    assert all(torch.equal(exported[k], v) for k, v in run["state_dict"].items())


def test_ranks_of_one_replica_reading_different_batches_are_stopped_at_the_first(two):
    for scenario, roles in (
        ("stages_differ", "2 pipeline stages"),
        ("tensor_parallel_differs", "2 tensor-parallel"),
    ):
        said = two[scenario]
        assert said.startswith("SurgeRuntimeError") and roles in said, said
        assert "rank 0 and rank 1" in said and "distributed_sampler_kwargs" in said, said


def test_a_sampler_of_the_users_with_one_order_on_every_rank_trains_as_one_process(ones, two):
    run = two["own_sampler"]  # use_distributed_sampler=False, a generator seeded alike
    assert run["global_step"] == 12
    assert_weights(run, ones["shuffled"], 1e-6)


def test_a_short_last_batch_is_refused_before_the_first_step(two):
    said = two["short_batch"]
    assert said.startswith("MisconfigurationError") and "holds 7 samples where the others hold 11" in said, (
        said
    )
    assert "drop_last=True" in said


def test_a_short_last_batch_of_a_batch_sampler_is_refused_before_the_first_step(two):
    said = two["short_batch_sampler"]  # BatchSampler(..., 11, drop_last=False) over 128 samples
    assert said.startswith("MisconfigurationError") and "holds 7 samples where the others hold 11" in said, (
        said
    )


def test_batches_alike_on_every_rank_train_whatever_they_hold(two):
    # both infinities (a NaN sum), a sparse tensor, a complex one and a string in each batch
    run = two["odd_batches"]
    assert run["global_step"] == 4  # 16 batches, accumulation 4


def test_a_dataclass_batch_that_differs_between_tensor_parallel_ranks_is_refused(two):
    said = two["dataclass_differs"]
    assert said.startswith("SurgeRuntimeError") and "rank 0 and rank 1" in said, said


def test_a_validation_run_whose_ranks_read_different_batches_is_stopped_too(two):
    said = two["validation_differs"]  # a 1x2 tensor-parallel mesh, a val loader shuffled per rank
    assert said.startswith("SurgeRuntimeError") and "the first batch of this validation run" in said, said
    assert two["validation_alike"] == "not refused"  # the same order on both ranks
