"""Checkpoints of a pipeline: each stage's ranks save and load their own layers through the sharded
(DCP) path, with the layout recorded and checked. A stage's model keys are its layers' names (the
other stages' are in the same checkpoint, from their ranks); its optimizer state is saved with flat
keys (`param_groups.<name>.lr`), so each stage's groups go under its own parameters' names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer

from ..errors import CheckpointError, IncompatibleCheckpointError
from .pipeline_stages import PipelineLayout


def layout_record(layout: PipelineLayout | None) -> dict[str, int] | None:
    """What a checkpoint records of the pipeline (None: no stages)."""
    if layout is None:
        return None
    return {"pipeline_parallel": layout.pipeline_parallel, "stages": layout.num_stages}


def check_pipeline_saved(saved: Any, here: dict[str, int] | None, path: Any) -> None:
    """A checkpoint's pipeline layout must be this run's: each stage's shards hold its own layers only."""
    if saved == here:
        return

    def said(record: Any) -> str:
        if not isinstance(record, dict):
            return "without pipeline stages"
        return f"with pipeline_parallel={record.get('pipeline_parallel')} ({record.get('stages')} stages)"

    raise IncompatibleCheckpointError(
        f"{path} was saved {said(saved)}, and this run is {said(here)}: resuming a pipeline on another "
        "layout is not supported; resume with the pipeline_parallel and stages_per_rank it was saved with "
        "(or, to start afresh, leave ckpt_path out or write to another default_root_dir)."
    )


def stage_model_problems(
    module: nn.Module, ckpt: Mapping[str, Any], path: str | Path, strict: bool
) -> list[str]:
    """What this rank's stages miss in the checkpoint (the other stages' keys are expected there);
    raised when `strict`."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    from ..checkpoint.sharded import saved_model_shapes

    saved = saved_model_shapes(ckpt, path)
    state: dict[str, Any] = get_model_state_dict(module)
    mine = {k: tuple(v.shape) for k, v in state.items()}
    missing = [k for k in mine if k not in saved]
    shapes = [
        f"{k}: checkpoint {saved[k]} vs model {v}" for k, v in mine.items() if k in saved and saved[k] != v
    ]
    problems = [f"missing keys: {missing}"] * bool(missing) + [f"shape mismatches: {shapes}"] * bool(shapes)
    if problems and strict:
        raise CheckpointError(
            f"checkpoint {path} does not match {type(module).__name__}: " + "; ".join(problems)
        )
    return problems


def stage_optimizer_states(module: nn.Module, optimizers: list[Optimizer]) -> list[dict[str, Any]]:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return [get_optimizer_state_dict(module, opt, options=_flat()) for opt in optimizers]


def restore_stage_optimizers(
    module: nn.Module, optimizers: list[Optimizer], ckpt: Mapping[str, Any], path: str | Path
) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    from ..checkpoint.sharded import check_optimizer_kinds, load_into

    check_optimizer_kinds(optimizers, ckpt, path)
    templates = stage_optimizer_states(module, optimizers)
    load_into({"optimizer_states": templates}, ckpt, path, partial=True)
    for opt, loaded in zip(optimizers, templates):
        set_optimizer_state_dict(module, opt, loaded, options=_flat())


def _flat() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)
