"""A FLOP count with torch's own formulas, for the whole step only.

`torch.utils.flop_counter.FlopCounterMode` also attributes each op to the modules it ran in: it
enters a module tracker (global module hooks, a hook on every module output) and rebuilds a set
of metadata ops on every op. On a small model that made the counted step cost about 8x a plain
one. `FlopCount` keeps what decides the number (the formulas of `flop_registry`, the same
decompositions first, the same metadata ops left to tensor subclasses) and drops the attribution:
its total equals `FlopCounterMode.get_total_flops()` (tests/test_goodput.py holds them equal).

Higher-order ops (`torch.cond`) run uncounted, and the count says which one it missed
(`uncounted`) instead of returning a smaller number as if it were whole. Flex attention compiles
itself with `fullgraph=True`, which no dispatch mode allows: a first step that uses it fails under
this count as under `FlopCounterMode` (left as found; see benchmarks/README.md, issue 38).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

_aten = torch.ops.aten


def _aten_op(name: str) -> Any:
    packet, overload = name.split(".")
    return getattr(getattr(_aten, packet, None), overload, None)


_SKIPPED = frozenset(
    op
    for op in (
        *(
            _aten_op(name)
            for name in (
                "sym_is_contiguous.default",
                "is_contiguous.default",
                "is_contiguous.memory_format",
                "is_strides_like_format.default",
                "is_non_overlapping_and_dense.default",
                "size.default",
                "sym_size.default",
                "stride.default",
                "sym_stride.default",
                "storage_offset.default",
                "sym_storage_offset.default",
                "numel.default",
                "sym_numel.default",
                "dim.default",
            )  # fmt: skip
        ),
        getattr(getattr(torch.ops.prim, "layout", None), "default", None),
    )
    if op is not None
)
_DEVICE = torch.ops.prim.device.default
_decomposes: dict[Any, bool] = {}  # op -> whether it has a CompositeImplicitAutograd decomposition


class FlopCount(TorchDispatchMode):
    """Counts the FLOPs of the ops dispatched while it is entered (`total`)."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.uncounted: str | None = None  # the first higher-order op the count could not see into

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _SKIPPED:
            return NotImplemented
        if isinstance(func, torch._ops.HigherOrderOperator):
            self.uncounted = self.uncounted or func.name()
            return func(*args, **kwargs)  # (the dispatch took this mode off while it runs)
        if func is not _DEVICE and _decomposable(func):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out


def _decomposable(func: Any) -> bool:
    known = _decomposes.get(func)
    if known is None:
        key = DispatchKey.CompositeImplicitAutograd
        known = _decomposes[func] = key in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), key
        )
    return known
