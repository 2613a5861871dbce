"""Pipeline parallelism's checks, in one process: the schedule and stage arguments refused by name at
construction, the mesh size at `Trainer(...)`, the balanced split, the module's layers and loss, the
micro-batch rule, the batch shape, fp16 and a checkpoint of another pipeline layout. Real stages on
2 and 4 gloo processes: tests/distributed/test_pipeline.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import surge
from surge.errors import CheckpointError, MisconfigurationError, SurgeRuntimeError
from surge.strategies import ModelParallel
from surge.strategies.pipeline_checkpoint import check_pipeline_saved
from surge.strategies.pipeline_run import PipelineRun
from surge.strategies.pipeline_stages import PipelineLayout, balanced_split, build_stages


def layout(schedule: str = "1F1B", pp: int = 2, per_rank: int | None = None) -> PipelineLayout:
    return PipelineLayout.of("ModelParallel", pp, schedule, per_rank)


def test_schedule_and_stage_arguments_are_refused_by_name():
    with pytest.raises(
        MisconfigurationError, match=r"pipeline_schedule\)='gpipe'.*'GPipe', '1F1B', 'Interleaved1F1B'"
    ):
        ModelParallel(pipeline_parallel=2, pipeline_schedule="gpipe")
    with pytest.raises(
        MisconfigurationError, match=r"pipeline_schedule='GPipe', stages_per_rank=2\): GPipe runs one"
    ):
        ModelParallel(pipeline_parallel=2, pipeline_schedule="GPipe", stages_per_rank=2)
    with pytest.raises(MisconfigurationError, match=r"ModelParallel\(pipeline_parallel\)=0"):
        ModelParallel(pipeline_parallel=0)
    with pytest.raises(MisconfigurationError, match=r"ModelParallel\(stages_per_rank\)=0"):
        ModelParallel(pipeline_parallel=2, pipeline_schedule="Interleaved1F1B", stages_per_rank=0)
    assert layout("Interleaved1F1B").stages_per_rank == 2 and layout("GPipe").stages_per_rank == 1


def test_the_mesh_with_stages_must_cover_the_processes():
    with pytest.raises(
        MisconfigurationError,
        match=r"data_parallel=2, tensor_parallel=1, pipeline_parallel=2\) is a mesh of 4",
    ):
        surge.Trainer(
            accelerator="cpu", devices=3,
            strategy=ModelParallel(data_parallel=2, tensor_parallel=1, pipeline_parallel=2),
        )  # fmt: skip


def test_a_balanced_split_differs_by_at_most_one_layer_and_stages_loop_over_ranks():
    assert [list(r) for r in balanced_split(7, 2)] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [len(r) for r in balanced_split(7, 4)] == [2, 2, 2, 1]
    assert layout("Interleaved1F1B").stage_indices(1) == [1, 3]


class Layers(nn.Module):
    def __init__(self, n: int = 5) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(4, 4) for _ in range(n)])

    def pipeline_layers(self):
        return self.layers


def test_stages_split_from_the_sequential_drop_other_ranks_layers():
    model = Layers()
    stages, shown = build_stages(model, layout(), pipeline_rank=1)
    assert shown.endswith("stage 0: layers 0-2, stage 1: layers 3-4")
    assert [m is model.layers[i] for m, i in zip(stages[0], (3, 4))] == [True, True]
    assert sorted(k.split(".")[1] for k in model.state_dict()) == ["3", "3", "4", "4"]


def test_a_module_without_layers_or_with_too_few_is_refused():
    with pytest.raises(MisconfigurationError, match=r"define pipeline_layers\(self\)"):
        build_stages(nn.Linear(2, 2), layout(), 0)
    with pytest.raises(MisconfigurationError, match=r"has 3 layers, fewer than the 4 stages"):
        build_stages(Layers(3), layout("Interleaved1F1B"), 0)
    odd = Layers()
    odd.pipeline_layers = lambda: nn.ModuleList()  # type: ignore[method-assign]
    with pytest.raises(MisconfigurationError, match="must return an nn.Sequential"):
        build_stages(odd, layout(), 0)
    extra = Layers()
    extra.scale = nn.Parameter(torch.ones(1))
    with pytest.raises(
        MisconfigurationError, match=r"parameters \['scale'\] are outside this rank's pipeline stages"
    ):
        build_stages(extra, layout(), 0)


def test_stages_given_by_the_module_are_checked():
    model = Layers(4)
    model.pipeline_stages = lambda indices, n: [model.layers[i] for i in indices]  # type: ignore[attr-defined]
    del model.layers[2:]  # this rank's own
    with pytest.raises(MisconfigurationError, match="outside this rank's pipeline stages"):
        build_stages(model, layout(), 0)
    model.pipeline_stages = lambda indices, n: []  # type: ignore[attr-defined]
    with pytest.raises(MisconfigurationError, match=r"must return 1 nn.Module"):
        build_stages(model, layout(), 0)


def stage(first: bool, last: bool) -> SimpleNamespace:
    return SimpleNamespace(is_first=first, is_last=last, num_stages=2)


def test_the_loss_the_micro_batch_rule_and_the_batch_shape_are_refused_by_name():
    with pytest.raises(MisconfigurationError, match=r"needs Layers.pipeline_loss\(output, target\)"):
        PipelineRun(Layers(), [stage(True, False)], layout(), torch.device("cpu"))
    model = Layers()
    model.pipeline_loss = lambda out, y: out.sum()  # type: ignore[attr-defined]
    model.automatic_optimization = False  # type: ignore[assignment]
    with pytest.raises(
        MisconfigurationError, match=r"manual optimization \(Layers.automatic_optimization=False"
    ):
        PipelineRun(model, [stage(True, False)], layout(), torch.device("cpu"))
    model.automatic_optimization = True  # type: ignore[assignment]
    run = PipelineRun(model, [stage(True, False)], layout(), torch.device("cpu"))
    with pytest.raises(MisconfigurationError, match=r"accumulate_grad_batches=4 .* this epoch has 10"):
        run.for_windows(4, 10, None)
    with pytest.raises(MisconfigurationError, match="a loader without a length"):
        run.for_windows(4, float("inf"), None)
    with pytest.raises(MisconfigurationError, match=r"reads batches as \(input, target\)"):
        run.micro_batch({"x": torch.ones(2)}, 0, 4)
    with pytest.raises(
        MisconfigurationError, match=r"'1F1B'\) cannot run accumulate_grad_batches=1 micro-batches on 2"
    ):
        run.for_windows(1, 8, None)
    run.micro_batch((torch.ones(4, 4), torch.ones(4)), 0, 2)
    with pytest.raises(SurgeRuntimeError, match=r"different sizes \[3, 4\].*drop_last=True"):
        run.micro_batch((torch.ones(3, 4), torch.ones(3)), 1, 2)


def test_fp16_with_stages_is_refused_by_name():
    with pytest.raises(MisconfigurationError, match=r"precision='16-mixed' is not supported"):
        ModelParallel(pipeline_parallel=2).connect_precision(SimpleNamespace(scaler=object()))


def test_a_checkpoint_of_another_pipeline_layout_is_refused():
    here = {"pipeline_parallel": 2, "stages": 4}
    check_pipeline_saved(dict(here), here, "x.ckpt")
    with pytest.raises(
        CheckpointError, match=r"saved without pipeline stages, and this run is with pipeline_parallel=2"
    ):
        check_pipeline_saved(None, here, "x.ckpt")
    with pytest.raises(
        CheckpointError, match=r"saved with pipeline_parallel=2 \(4 stages\), and this run is without"
    ):
        check_pipeline_saved(here, None, "x.ckpt")


def test_evaluation_through_stages_is_refused_by_name():
    with pytest.raises(MisconfigurationError, match=r"validation_step through pipeline stages is not built"):
        ModelParallel(pipeline_parallel=2).step_fn(Layers(), "validation_step")


class Schedule:
    """Stands in for torch's schedule: the last stage's loss for each micro-batch's `outputs`."""

    def __init__(self, loss, outputs) -> None:
        self.loss, self.outputs = loss, outputs

    def step(self, *args, target=None, return_outputs=True):
        for output, y in zip(self.outputs, target.chunk(len(self.outputs))):
            self.loss(output, y)


def test_the_window_end_loss_is_the_last_micro_batch_s_and_carries_a_non_finite_one():
    model = Layers()
    model.pipeline_loss = lambda out, y: out.sum()  # type: ignore[attr-defined]
    run = PipelineRun(model, [stage(False, True)], layout(), torch.device("cpu"))
    batch = (torch.ones(2, 4), torch.ones(2))

    def window(*losses: float) -> torch.Tensor:
        loss = run._loss_fn(2)
        loss(torch.zeros(()), None)  # the shape inference's call: not counted
        run._schedule = lambda n: Schedule(loss, [torch.tensor(v) for v in losses])  # type: ignore[method-assign]
        first = run.micro_batch(batch, 0, 2)
        assert first.item() == 0.0 and first.requires_grad  # not known before the window's end
        return run.micro_batch(batch, 1, 2)

    end = window(0.25, 0.75)
    assert end.item() == 0.75
    end.backward()  # the schedule ran it: nothing to do
    assert torch.isnan(window(float("nan"), 0.5))
    assert not torch.isfinite(window(float("inf"), 0.5))


def test_a_strategy_that_cannot_validate_refuses_before_training_without_a_sanity_check():
    from helpers import TinyModel, fast_trainer, make_loaders
    from surge.strategies import SingleDeviceStrategy

    class TrainsOnly(SingleDeviceStrategy):
        def step_fn(self, module, hook):
            if hook == "validation_step":
                raise MisconfigurationError("validation_step is not built here")
            return super().step_fn(module, hook)

    model, (train, val) = TinyModel(), make_loaders()
    trainer = fast_trainer(max_epochs=1, num_sanity_val_steps=0, strategy=TrainsOnly())
    with pytest.raises(MisconfigurationError, match="validation_step is not built here"):
        trainer.fit(model, train, val)
    assert trainer.global_step == 0  # refused before the first batch, not at the epoch's validation


@pytest.mark.parametrize("flat", [False, True])  # groups by index (FSDP, a mesh) or by name (stages)
def test_a_sharded_checkpoint_refuses_another_optimizer_class(tmp_path, flat):
    import warnings

    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    from surge.checkpoint import load_checkpoint
    from surge.checkpoint.sharded import save_sharded
    from surge.strategies import SingleDeviceStrategy
    from surge.strategies.pipeline_checkpoint import restore_stage_optimizers, stage_optimizer_states

    model = Layers(2)
    adam = torch.optim.AdamW(model.parameters(), lr=0.02)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    adam.step()
    states = stage_optimizer_states(model, [adam]) if flat else [get_optimizer_state_dict(model, adam)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process")
        path = save_sharded(
            {"state_dict": dict(model.state_dict()), "optimizer_states": states}, tmp_path / "x.ckpt",
            rank=0, world_size=1, broadcast=lambda x: x, gather=lambda x: [x], barrier=lambda: None,
        )  # fmt: skip
    ckpt = load_checkpoint(path)
    restore = restore_stage_optimizers if flat else SingleDeviceStrategy().restore_optimizers
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    with pytest.raises(
        CheckpointError, match=r"optimizer 0 \(SGD\): it was saved from another optimizer class"
    ):
        restore(model, [sgd], ckpt, path)
    assert sgd.param_groups[0]["lr"] == 0.5  # untouched
    again = torch.optim.AdamW(model.parameters(), lr=0.5)
    restore(model, [again], ckpt, path)  # the same class loads: the saved settings
    assert again.param_groups[0]["lr"] == 0.02
