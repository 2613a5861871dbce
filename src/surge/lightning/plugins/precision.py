"""Lightning's precision plugins (`lightning.pytorch.plugins.precision`), each standing for one of
surge's (`surge.precision`): the same numeric format, run by surge's precision object. Called
directly, a plugin's methods answer as Lightning's (`precision_methods`).

A subclass that overrides one of Lightning's precision hooks is refused when the Trainer is built:
surge's hooks are `surge.precision.Precision`'s (forward_context, convert_module, backward,
optimizer_step); subclass that and pass `precision=<it>`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from ... import precision as surge_precision
from ...arguments.plugins import Plugins
from ...data import cast_floating
from ...errors import MisconfigurationError
from .loop_methods import LoopMethods
from .precision_methods import AutocastMethods, PrecisionMethods

KIND = "Precision"
HOOKS = (
    "backward", "clip_grad_by_norm", "clip_grad_by_value", "clip_gradients", "connect", "convert_input",
    "convert_module", "convert_output", "forward_context", "load_state_dict", "main_params",
    "module_init_context", "optimizer_step", "post_backward", "pre_backward", "predict_step_context",
    "state_dict", "teardown", "tensor_init_context", "test_step_context", "train_step_context",
    "unscale_gradients", "val_step_context",
)  # fmt: skip
DTYPES = {"16": torch.float16, "bf16": torch.bfloat16}


class Precision(LoopMethods, PrecisionMethods):
    """Full precision ("32-true"): surge's `FullPrecision`."""

    plugin_kind = KIND
    precision: str = "32-true"

    def surge_precision(self) -> surge_precision.Precision:
        return surge_precision.FullPrecision()

    def surge_plugin(self) -> Plugins:
        hooks = [h for h in HOOKS if any(h in vars(c) for c in type(self).__mro__ if c not in BUILT_IN)]
        if hooks:
            raise MisconfigurationError(
                f"plugins=[{type(self).__name__}(...)] overrides Lightning's precision hook(s) {hooks}, which "
                "surge does not call: subclass surge.precision.Precision (forward_context, convert_module, "
                "backward, optimizer_step) and pass precision=<it>."
            )
        return Plugins(precision=self.surge_precision(), kinds=(KIND,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r})"


class DoublePrecision(Precision):
    """ "64-true": surge's `DoublePrecision`."""

    precision = "64-true"
    init_dtype = torch.float64

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.double()

    def surge_precision(self) -> surge_precision.Precision:
        return surge_precision.DoublePrecision()


class HalfPrecision(Precision):
    """ "16-true" / "bf16-true": surge's `HalfPrecision` (module and inputs cast)."""

    def __init__(self, precision: str = "16-true") -> None:
        self.precision = precision
        self.init_dtype = DTYPES[precision.split("-")[0]]

    def surge_precision(self) -> surge_precision.Precision:
        return surge_precision.HalfPrecision(DTYPES[self.precision.split("-")[0]])


class MixedPrecision(AutocastMethods, Precision):
    """ "16-mixed" (with a GradScaler, yours or a new one) / "bf16-mixed": surge's `MixedPrecision`."""

    def __init__(self, precision: str, device: str, scaler: torch.amp.GradScaler | None = None) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise MisconfigurationError(
                f"`Passed `{type(self).__name__}(precision={precision!r})`. Precision must be '16-mixed' or 'bf16-mixed'."
            )
        if scaler is None and precision == "16-mixed":
            scaler = torch.amp.GradScaler(device=device)
        if scaler is not None and precision == "bf16-mixed":
            raise MisconfigurationError(f"`precision='bf16-mixed'` does not use a scaler, found {scaler}.")
        self.precision, self.device, self.scaler = precision, device, scaler
        self.dtype = DTYPES[precision.split("-")[0]]

    def surge_precision(self) -> surge_precision.Precision:
        dtype = DTYPES[self.precision.split("-")[0]]
        return surge_precision.MixedPrecision(dtype, self.device, self.scaler)


FSDP_PRECISIONS = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")


class FSDPPrecision(Precision):
    """FSDP's precision: the same format as surge's plugin of that name (its FSDP strategy shards
    the loss scaling itself)."""

    unscale_when_skipped, refuses_lbfgs = True, False  # Lightning's FSDP plugin's optimizer_step

    def __init__(self, precision: str, scaler: Any = None) -> None:
        if precision not in FSDP_PRECISIONS:
            raise MisconfigurationError(
                f"`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {FSDP_PRECISIONS}."
            )
        if scaler is not None and precision != "16-mixed":
            raise MisconfigurationError(f"`precision={precision!r}` does not use a scaler, found {scaler}.")
        if scaler is None and precision == "16-mixed":
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            scaler = ShardedGradScaler()
        self.precision, self.scaler = precision, scaler
        self.init_dtype = (
            DTYPES[precision.split("-")[0]]
            if precision.endswith("-true") and precision != "32-true"
            else None
        )

    def forward_context(self) -> contextlib.AbstractContextManager:
        if self.precision.endswith("-mixed"):
            return torch.autocast("cuda", dtype=DTYPES[self.precision.split("-")[0]])
        return super().forward_context()

    def convert_output(self, data: Any) -> Any:
        return cast_floating(data, torch.get_default_dtype())

    def clip_grad_by_norm(self, optimizer: Any, clip_val: float) -> None:
        raise MisconfigurationError(
            f"`gradient_clip_algorithm='norm'` is currently not supported for `{type(self).__name__}`: "
            "clip by value, or clip in configure_gradient_clipping."
        )

    @property
    def mixed_precision_config(self) -> Any:
        """FSDP's `MixedPrecision` for what surge's FSDP does with this format: parameters and buffers
        in the 16-bit dtype, gradients reduced in fp32 under "-mixed" (Lightning reduces in 16 bits)."""
        from torch.distributed.fsdp import MixedPrecision as TorchMixedPrecision

        if self.precision in ("16-true", "bf16-true"):
            warnings.warn(
                f"FSDP with `{self.precision}` enables computation in lower precision: the module is cast to it "
                "(surge's FSDP shards the cast parameters; it keeps no full-precision copy).",
                UserWarning,
                stacklevel=2,
            )
        dtype = DTYPES.get(self.precision.split("-")[0], torch.float32)
        reduce = torch.float32 if self.precision.endswith("-mixed") else dtype
        return TorchMixedPrecision(param_dtype=dtype, reduce_dtype=reduce, buffer_dtype=dtype)

    def surge_precision(self) -> surge_precision.Precision:
        if self.precision.endswith("-mixed"):
            return surge_precision.MixedPrecision(DTYPES[self.precision.split("-")[0]], "cuda", self.scaler)
        return surge_precision.precision_plugin(self.precision, "cuda")


class _Refused(Precision):
    alternative = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(f"{type(self).__name__} is not supported by surge: {self.alternative}")


class BitsandbytesPrecision(_Refused):
    alternative = (
        "surge does not quantize layers. Quantize the model yourself (bitsandbytes' Linear8bitLt/Linear4bit "
        "in configure_model) and train with precision='bf16-mixed' or '16-mixed'."
    )


class TransformerEnginePrecision(_Refused):
    alternative = (
        "surge has no FP8 training. Use precision='bf16-mixed', or swap in transformer_engine layers "
        "in your module yourself."
    )


class DeepSpeedPrecision(Precision):
    """Constructible, and its methods answer as Lightning's (the format alone); a Trainer given it
    refuses it: surge has no DeepSpeed engine to run it."""

    def __init__(self, precision: str) -> None:
        if precision not in FSDP_PRECISIONS:
            raise MisconfigurationError(
                f"`Invalid precision={precision!r})` is not supported. `precision` must be one of: {FSDP_PRECISIONS}."
            )
        self.precision = precision
        self.init_dtype = DTYPES[precision.split("-")[0]] if precision in ("16-true", "bf16-true") else None

    def forward_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # DeepSpeed's engine casts; the steps run as they are

    def convert_input(self, data: Any) -> Any:
        """Floating inputs in the format's 16-bit dtype, "-mixed" included (DeepSpeed's engine wants them so)."""
        return cast_floating(data, DTYPES.get(self.precision.split("-")[0], torch.float32))

    def surge_plugin(self) -> Plugins:
        raise MisconfigurationError(
            "plugins=[DeepSpeedPrecision(...)] is not supported by surge: surge has no DeepSpeed. "
            "Use strategy='fsdp' with precision='bf16-mixed' or '16-mixed'."
        )


class XLAPrecision(_Refused):
    alternative = "surge has no TPU/XLA support. Use accelerator='cuda' with precision='bf16-mixed'."


BUILT_IN = (
    Precision, DoublePrecision, HalfPrecision, MixedPrecision, FSDPPrecision, DeepSpeedPrecision,
    LoopMethods, PrecisionMethods, AutocastMethods, object,
)  # fmt: skip

__all__ = [
    "BitsandbytesPrecision",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "FSDPPrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "TransformerEnginePrecision",
    "XLAPrecision",
]
