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

from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, shape_wrapper

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
_SHAPE_WRAPPED = shape_wrapper(lambda: 0).__code__  # the code of torch's formula wrapper (`nf`)
_SKIP, _HIGHER, _DECOMPOSE, _RUN = range(4)
Count = Callable[[Any, Any, Any], int]  # (args, kwargs, out) -> FLOPs
_plans: dict[Any, tuple[int, Count | None]] = {}  # op -> what the count does with it (`_plan`)


class FlopCount(TorchDispatchMode):
    """Counts the FLOPs of the ops dispatched while it is entered (`total`)."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.uncounted: str | None = None  # the first higher-order op the count could not see into

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        plan = _plans.get(func)
        if plan is None:
            plan = _plans[func] = _plan(func)
        action, count = plan
        if action == _SKIP:
            return NotImplemented
        if action == _HIGHER:
            self.uncounted = self.uncounted or func.name()
            return func(*args, **kwargs)  # (the dispatch took this mode off while it runs)
        if action == _DECOMPOSE:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if count is not None:
            self.total += count(args, kwargs, out)
        return out


def _plan(func: Any) -> tuple[int, Count | None]:
    """What the count does with `func`, decided once per op: skip it (a metadata op left to tensor
    subclasses), run a higher-order op uncounted, decompose a CompositeImplicitAutograd op first
    (counting it whole if it has no decomposition after all), or run it; and its formula."""
    if func in _SKIPPED:
        return _SKIP, None
    if isinstance(func, torch._ops.HigherOrderOperator):
        return _HIGHER, None
    key = DispatchKey.CompositeImplicitAutograd
    decomposes = func is not _DEVICE and (
        key in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)
    )
    return (_DECOMPOSE if decomposes else _RUN), _counted(func)


def _counted(func: Any) -> Any:
    """`(args, kwargs, out) -> FLOPs` from torch's formula for `func` (None: it has none). A formula
    behind torch's shape wrapper gets the shapes straight from `_shapes`, the same values its
    wrapper's tree_map gives, without that walk on every call."""
    formula = flop_registry.get(func._overloadpacket)
    if formula is None:
        return None
    raw = getattr(formula, "__wrapped__", None)
    if raw is None or getattr(formula, "__code__", None) is not _SHAPE_WRAPPED:
        return lambda args, kwargs, out: formula(*args, **kwargs, out_val=out)
    return lambda args, kwargs, out: raw(
        *_shapes(args), out_shape=_shapes(out), **{k: _shapes(v) for k, v in kwargs.items()}
    )


def _shapes(value: Any) -> Any:
    """`value` with every tensor in it replaced by its shape, through the containers torch's pytree
    walks (lists, tuples, dicts; a torch.Size is a leaf there too); anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, list):
        return [_shapes(v) for v in value]
    if isinstance(value, tuple) and type(value) is not torch.Size:  # (a structseq: as a plain tuple)
        return tuple(_shapes(v) for v in value)
    if isinstance(value, dict):
        return {k: _shapes(v) for k, v in value.items()}
    return value
