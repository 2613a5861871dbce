"""`lightning.pytorch.utilities.model_summary`: Lightning's `ModelSummary` table (name, type,
parameters, mode, FLOPs, and with `example_input_array` the input and output sizes), built over
the module's layers by forward hooks and `torch.utils.flop_counter.FlopCounterMode`."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.hooks import RemovableHandle

from ...data import move_to_device
from .rank_zero import WarningCache, rank_zero_warn

UNKNOWN_SIZE = "?"
NOT_APPLICABLE = "n/a"
LEFTOVER_PARAMS_NAME = "other params"
PARAMETER_NUM_UNITS = [" ", "K", "M", "B", "T"]
PRECISION_BITS = {
    "64": 64,
    "32": 32,
    "16": 16,
    "bf16": 16,
    "16-true": 16,
    "bf16-true": 16,
    "32-true": 32,
    "64-true": 64,
}
_warnings = WarningCache()


def parse_batch_shape(batch: Any) -> str | list:
    """The shape of a tensor as a list (nested for lists and tuples of tensors); "?" otherwise."""
    if hasattr(batch, "shape"):
        return list(batch.shape)
    if isinstance(batch, list | tuple):
        return [parse_batch_shape(item) for item in batch]
    return UNKNOWN_SIZE


def _count(params: Any) -> int:
    """Elements of the parameters whose shape is known (an uninitialized one counts 0, with a warning)."""
    total = 0
    for p in params:
        if isinstance(p, UninitializedParameter):
            _warnings.warn(
                "The total number of parameters detected may be inaccurate because the model contains an instance "
                "of `UninitializedParameter`. To get an accurate number, set `self.example_input_array` in your "
                "LightningModule."
            )
            continue
        total += p.numel()
    return total


class LayerSummary:
    """One layer's row: its type, parameter count, mode, and the input and output shapes of its
    first call (recorded by a forward hook that removes itself)."""

    def __init__(self, module: nn.Module) -> None:
        self._module = module
        self._in_size: str | list | None = None
        self._out_size: str | list | None = None
        self._hook_handle: RemovableHandle | None = None
        if not isinstance(module, torch.jit.ScriptModule):
            self._hook_handle = module.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, _: nn.Module, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        inputs = (*args, *kwargs.values())
        self._in_size = parse_batch_shape(inputs[0] if len(inputs) == 1 else inputs)
        self._out_size = parse_batch_shape(out)
        self.detach_hook()

    def __del__(self) -> None:
        self.detach_hook()

    def detach_hook(self) -> None:
        """Remove the forward hook (if the forward did not)."""
        if self._hook_handle is not None:
            self._hook_handle.remove()

    @property
    def in_size(self) -> str | list:
        return self._in_size or UNKNOWN_SIZE

    @property
    def out_size(self) -> str | list:
        return self._out_size or UNKNOWN_SIZE

    @property
    def layer_type(self) -> str:
        return type(self._module).__name__

    @property
    def num_parameters(self) -> int:
        return _count(self._module.parameters())

    @property
    def training(self) -> bool:
        return self._module.training


class ModelSummary:
    """Lightning's `ModelSummary(model, max_depth=1)`: `str()` is its table; the properties
    (`layer_names`, `param_nums`, `total_parameters`, `model_size`, `total_flops`, ...) its numbers.
    `max_depth` -1 shows every layer, 0 none, n the layers down to depth n."""

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"`max_depth` can be -1, 0 or > 0, got {max_depth}.")
        self._model, self._max_depth = model, max_depth
        self._flop_counter = FlopCounterMode(display=False, depth=max_depth + 1)
        trainer = getattr(model, "_trainer", None)
        precision = str(trainer.precision) if trainer is not None else "32-true"
        if precision not in PRECISION_BITS:
            rank_zero_warn(
                f"Precision {precision} is not supported by the model summary.  Estimated model size in MB will "
                "not be accurate. Using 32 bits instead.",
                category=UserWarning,
            )
        self._precision_megabytes = PRECISION_BITS.get(precision, 32) / 8.0 * 1e-6
        self._layer_summary = self.summarize()

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        if self._max_depth == 0:
            return []
        if self._max_depth == 1:
            return list(self._model.named_children())
        return list(self._model.named_modules())[1:]  # not the root

    @property
    def layer_names(self) -> list[str]:
        return list(self._layer_summary)

    @property
    def layer_types(self) -> list[str]:
        return [layer.layer_type for layer in self._layer_summary.values()]

    @property
    def in_sizes(self) -> list:
        return [layer.in_size for layer in self._layer_summary.values()]

    @property
    def out_sizes(self) -> list:
        return [layer.out_size for layer in self._layer_summary.values()]

    @property
    def param_nums(self) -> list[int]:
        return [layer.num_parameters for layer in self._layer_summary.values()]

    @property
    def training_modes(self) -> list[bool]:
        return [layer.training for layer in self._layer_summary.values()]

    @property
    def total_training_modes(self) -> dict[str, int]:
        modes = [m.training for m in list(self._model.modules())[1:]]
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_parameters(self) -> int:
        return _count(self._model.parameters())

    @property
    def trainable_parameters(self) -> int:
        return _count(p for p in self._model.parameters() if p.requires_grad)

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        return self.total_parameters * self._precision_megabytes

    @property
    def total_flops(self) -> int:
        return int(self._flop_counter.get_total_flops())

    @property
    def flop_counts(self) -> dict[str, dict[Any, int]]:
        counts = self._flop_counter.get_flop_counts()
        root = type(self._model).__name__
        return {name: dict(counts.get(f"{root}.{name}", {})) for name in self.layer_names}

    def summarize(self) -> dict[str, LayerSummary]:
        """The layers' rows, after one forward of `example_input_array` (if the model has one)."""
        summary = {name: LayerSummary(module) for name, module in self.named_modules}
        if getattr(self._model, "example_input_array", None) is not None:
            self._forward_example_input()
        for layer in summary.values():
            layer.detach_hook()
        if self._max_depth >= 1:
            summary = {k: v for k, v in summary.items() if k.count(".") < self._max_depth}
        return summary

    def _forward_example_input(self) -> None:
        """The model in eval mode, without gradients, under the trainer's precision, called on its
        `example_input_array` after the batch-transfer hooks; each submodule's mode restored."""
        model = self._model
        trainer = getattr(model, "_trainer", None)
        batch = _transferred(model, model.example_input_array)
        modes = [(m, m.training) for m in model.modules()]
        model.eval()
        forward = (
            trainer.precision_plugin.forward_context() if trainer is not None else contextlib.nullcontext()
        )
        try:
            with torch.no_grad(), forward, self._flop_counter:
                if isinstance(batch, list | tuple):
                    model(*batch)
                elif isinstance(batch, dict):
                    model(**batch)
                else:
                    model(batch)
        finally:
            for (
                m,
                training,
            ) in modes:  # parents first: each call fixes its own subtree, children then their own
                m.train(training)

    def _columns(self) -> list[tuple[str, list[str]]]:
        """The table's columns (header, cells), with a row for parameters outside every layer."""
        flops = [sum(c.values()) for c in self.flop_counts.values()]
        cols = [
            (" ", [str(i) for i in range(len(self._layer_summary))]),
            ("Name", self.layer_names),
            ("Type", self.layer_types),
            ("Params", [get_human_readable_count(n) for n in self.param_nums]),
            ("Mode", ["train" if t else "eval" for t in self.training_modes]),
            ("FLOPs", [get_human_readable_count(n) for n in flops]),
        ]
        if getattr(self._model, "example_input_array", None) is not None:
            cols += [
                ("In sizes", [str(s) for s in self.in_sizes]),
                ("Out sizes", [str(s) for s in self.out_sizes]),
            ]
        leftover = self.total_parameters - self.total_layer_params
        if leftover > 0:
            extra = {" ": " ", "Name": LEFTOVER_PARAMS_NAME, "Params": get_human_readable_count(leftover)}
            for header, cells in cols:
                cells.append(extra.get(header, NOT_APPLICABLE))
        return cols

    def __str__(self) -> str:
        cols = self._columns()
        widths = [max([len(header), *(len(c) for c in cells)]) for header, cells in cols]
        rule = "-" * (sum(widths) + 3 * (len(cols) + 1))
        rows = [" | ".join(h.ljust(w) for (h, _), w in zip(cols, widths)), rule]
        for i in range(len(cols[0][1])):
            rows.append(" | ".join(cells[i].ljust(w) for (_, cells), w in zip(cols, widths)))
        modes = self.total_training_modes
        totals = [
            (get_human_readable_count(self.trainable_parameters), "Trainable params"),
            (
                get_human_readable_count(self.total_parameters - self.trainable_parameters),
                "Non-trainable params",
            ),
            (get_human_readable_count(self.total_parameters), "Total params"),
            (get_formatted_model_size(self.model_size), "Total estimated model params size (MB)"),
            (str(modes["train"]), "Modules in train mode"),
            (str(modes["eval"]), "Modules in eval mode"),
            (get_human_readable_count(self.total_flops), "Total Flops"),
        ]
        rows.append(rule)
        rows += [value.ljust(10) + label for value, label in totals]
        return "\n".join(rows)

    def __repr__(self) -> str:
        return str(self)


def _transferred(model: Any, batch: Any) -> Any:
    """`batch` through the module's batch-transfer hooks to its device, as a training batch goes."""
    if hasattr(model, "on_before_batch_transfer"):
        batch = model.on_before_batch_transfer(batch, 0)
    device = getattr(model, "device", torch.device("cpu"))
    if hasattr(model, "transfer_batch_to_device"):
        batch = model.transfer_batch_to_device(batch, device, 0)
    else:
        batch = move_to_device(batch, device)
    if hasattr(model, "on_after_batch_transfer"):
        batch = model.on_after_batch_transfer(batch, 0)
    return batch


def get_formatted_model_size(total_model_size: float) -> str:
    """Megabytes with three decimals and thousands separators."""
    return f"{total_model_size:,.3f}"


def get_human_readable_count(number: int | float) -> str:
    """`number` in thousands (K), millions (M), billions (B) or trillions (T): "123  ", "1.2 K",
    "400 T", "5,000 T" (nothing above T)."""
    if number < 0:
        raise ValueError(f"get_human_readable_count(number) needs a number >= 0, got {number}")
    digits = int(math.floor(math.log10(number)) + 1) if number > 0 else 1
    group = min(math.ceil(digits / 3), len(PARAMETER_NUM_UNITS)) - 1
    scaled = number * 10 ** (-3 * group)
    if group < 1 or scaled >= 100:
        return f"{int(scaled):,d} {PARAMETER_NUM_UNITS[group]}"
    return f"{scaled:,.1f} {PARAMETER_NUM_UNITS[group]}"


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """`ModelSummary(lightning_module, max_depth)`."""
    return ModelSummary(lightning_module, max_depth=max_depth)


__all__ = [
    "LayerSummary",
    "ModelSummary",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]
