"""What `self.log` records: detached values kept on the device, epoch sums and counts, read rarely.

Nothing here reads a tensor to the host except `read_*`, which the loops call at log intervals,
progress refreshes and epoch ends, and which moves every value it needs in one transfer.

A logged `torchmetrics.Metric` keeps its own state: its step value is the batch value its last
call (`metric(preds, target)`, i.e. `forward`) returned, its epoch value is `metric.compute()`
(which torchmetrics syncs over processes itself, so surge does not reduce it again), and it is
reset when its epoch's values are dropped.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Protocol

import torch
from torch import Tensor

from ..errors import MisconfigurationError, bad_value
from .slot import Slot, Value

REDUCE_FX = ("mean", "sum", "max", "min")


class Reducer(Protocol):
    """The collectives that results need from a distributed strategy."""

    def all_reduce(self, tensor: Tensor, op: str) -> Tensor: ...

    def mean(self, tensor: Tensor) -> Tensor: ...


class SharedReads(Protocol):
    """A reducer whose reads come from one source rank (a pipeline's last stage): every rank takes
    the source's values and its slots' options at each read."""

    def share_read(
        self, values: dict[str, float], options: dict[str, tuple[Any, ...]]
    ) -> tuple[dict[str, float], dict[str, tuple[Any, ...]]]: ...


_UNMARKED = object()  # a slot without a step value at the marks: anything logged since is new


def infer_batch_size(batch: Any) -> int:
    """The size of the first dimension of the first tensor found in a batch (1 if none)."""
    if isinstance(batch, Tensor):
        return batch.shape[0] if batch.ndim else 1
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    elif hasattr(batch, "__dataclass_fields__"):
        batch = [getattr(batch, f) for f in batch.__dataclass_fields__]
    if isinstance(batch, list | tuple):
        for item in batch:
            size = infer_batch_size(item)
            if size != 1 or isinstance(item, Tensor):
                return size
    return 1


class Results:
    """The slots of one stage (train, validate, test) for one dataloader.

    `reduce` (the strategy, when there are several processes) sums over processes: an epoch mean
    becomes sum(total) / sum(weight), the same on 1 or N processes with uneven shards, in the
    logged tensor's dtype (as on one process). In the Lightning mode a name logged without
    `sync_dist` keeps each process's own epoch value, as Lightning's does.
    """

    def __init__(
        self,
        stage: str,
        reduce: Reducer | None = None,
        reduce_unsynced: bool = True,
        uncalled_metric_step: str = "refused",
    ) -> None:
        self.stage = stage
        self.slots: dict[str, Slot] = {}
        self.batch: Any = None
        self.default_on_step = stage == "train"
        self.default_on_epoch = stage != "train"
        self._reduce = reduce
        self._own_unsynced = not reduce_unsynced  # `Semantics.epoch_reduces_unsynced`
        self._uncalled_left_out = uncalled_metric_step == "left_out"  # `Semantics.uncalled_metric_step`
        self._share: SharedReads | None = reduce if hasattr(reduce, "share_read") else None  # type: ignore[assignment]

    def at_epoch_end(self, on: bool) -> None:
        """While the training epoch's end hooks run (`on`), a bare `self.log` logs per epoch, as Lightning's."""
        self.default_on_step, self.default_on_epoch = not on, on

    def log(
        self,
        name: str,
        value: Any,
        *,
        on_step: bool | None,
        on_epoch: bool | None,
        prog_bar: bool,
        logger: bool,
        reduce_fx: str,
        batch_size: int | None,
        sync_dist: bool,
        add_dataloader_idx: bool = True,
    ) -> None:
        """Record a value: a reference for its step value, and a device-side epoch sum if asked."""
        slot = self.slots.get(name)
        tensor = isinstance(value, Tensor)
        metric = None if tensor else _as_metric(value)
        if slot is None:
            slot = self._new_slot(name, value, on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist)
            slot.add_dataloader_idx = bool(add_dataloader_idx)
        if metric is not None:
            slot.metric = metric
            if slot.on_step:
                slot.last = _batch_value(name, metric, self._uncalled_left_out)
            return
        if tensor:
            value = value.detach()
        elif not isinstance(value, int | float) or isinstance(value, bool):
            value = _as_number(name, value)
        slot.last = value
        if slot.on_epoch:
            if batch_size is None:
                batch_size = infer_batch_size(self.batch) if slot.reduce_fx == "mean" else 1
            slot.accumulate(value, batch_size)

    def _new_slot(self, name, value, on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist) -> Slot:
        if not isinstance(name, str) or not name:
            raise bad_value("self.log(name)", name, "a non-empty string")
        if reduce_fx not in REDUCE_FX:
            raise bad_value(f"self.log({name!r}, reduce_fx)", reduce_fx, f"one of {REDUCE_FX}")
        if isinstance(value, Tensor) and value.numel() != 1:
            raise MisconfigurationError(
                f"self.log({name!r}, value) got a tensor of shape {tuple(value.shape)}; log a scalar "
                "(one element), e.g. value.mean(), or log each element under its own name."
            )
        on_step = self.default_on_step if on_step is None else bool(on_step)
        on_epoch = self.default_on_epoch if on_epoch is None else bool(on_epoch)
        if not (on_step or on_epoch):
            raise MisconfigurationError(
                f"`self.log({name!r}, on_step=False, on_epoch=False)` is not useful: nothing would be logged."
            )
        slot = Slot(name, on_step, on_epoch, bool(prog_bar), bool(logger), reduce_fx, bool(sync_dist))
        self.slots[name] = slot
        return slot

    def reset(self) -> None:
        """Start a new epoch: drop values (and reset logged Metrics), keep the validated options."""
        for slot in self.slots.values():
            slot.last = None
            slot.total = None
            slot.weight = 0.0
            if slot.metric is not None:
                slot.metric.reset()
                slot.metric = None

    def state_dict(self) -> dict[str, Any]:
        """The epoch aggregates so far, so that a run resumed inside the epoch reports the whole epoch.
        A logged torchmetrics Metric keeps its own state and is not included."""
        return {
            s.name: {
                "options": [s.on_step, s.on_epoch, s.prog_bar, s.logger, s.reduce_fx, s.sync_dist],
                "total": s.total.detach().cpu() if isinstance(s.total, Tensor) else s.total,
                "weight": s.weight,
            }
            for s in self.slots.values()
            if s.total is not None and s.metric is None
        }

    def load_state_dict(self, state: Mapping[str, Any], device: torch.device) -> None:
        """Continue the epoch aggregates `state_dict` saved, on `device`."""
        for name, saved in state.items():
            slot = self.slots.get(name)
            if slot is None:
                slot = self.slots[name] = Slot(name, *saved["options"])
            total = saved["total"]
            slot.total = total.to(device) if isinstance(total, Tensor) else total
            slot.weight = saved["weight"]

    def _key(self, slot: Slot, step: bool) -> str:
        if slot.on_step and slot.on_epoch:
            return f"{slot.name}_step" if step else f"{slot.name}_epoch"
        return slot.name

    def read_step(
        self, only_prog_bar: bool = False, since: Mapping[int, Any] | None = None
    ) -> dict[str, float]:
        """Host floats of the latest step values (one transfer); `sync_dist` ones reduced over ranks by
        their `reduce_fx`. `since` (`step_marks`): only the values logged after those marks, each
        rank's own read (no collective but the `sync_dist` values', which every rank logs)."""
        picked: dict[str, Value] = {}
        for s in self.slots.values():
            if since is not None and since.get(id(s), _UNMARKED) is s.last:
                continue
            if s.on_step and s.last is not None and (s.prog_bar or not only_prog_bar):
                value = s.last
                if s.sync_dist and self._reduce is not None:
                    floating = isinstance(value, Tensor) and value.is_floating_point()
                    dtype = value.dtype if isinstance(value, Tensor) and floating else torch.float64
                    value = torch.as_tensor(value, dtype=dtype)
                    # as Lightning: over the ranks by the value's `reduce_fx` (a mean, a sum, ...)
                    value = (
                        self._reduce.mean(value)
                        if s.reduce_fx == "mean"
                        else self._reduce.all_reduce(value, s.reduce_fx)
                    )
                picked[self._key(s, True)] = value
        floats = to_floats(picked)
        if only_prog_bar or since is not None or self._share is None:  # (no call: hot path)
            return floats
        return self._shared(floats)

    def syncs_step_values(self) -> bool:
        """Whether a latest step value is reduced over several processes (`sync_dist`): `read_step`
        is then a collective."""
        return self._reduce is not None and any(
            s.on_step and s.sync_dist and s.last is not None for s in self.slots.values()
        )

    def synced_step_marks(self) -> tuple[tuple[str, int], ...]:
        """The latest step values `read_step` reduces over processes, by name and identity (empty
        when none): evaluation compares two to tell whether a hook logged one in between."""
        if self._reduce is None:
            return ()
        return tuple(
            (s.name, id(s.last))
            for s in self.slots.values()
            if s.on_step and s.sync_dist and s.last is not None
        )

    def step_marks(self) -> dict[int, Any]:
        """Each latest step value by its slot (the object itself, held so none is reused meanwhile):
        `read_step(since=...)` reads only what was logged after (a log point's check, not the step's)."""
        return {id(s): s.last for s in self.slots.values() if s.on_step and s.last is not None}

    def read_own_since(self, since: Mapping[int, Any]) -> tuple[dict[str, float], set[str]]:
        """`read_step(since=...)` as one rank reads it alone (a checkpoint's, on rank zero): no
        collective, so the `sync_dist` values of several processes logged since are not read but
        named (the second item: their reduced value is not known here)."""
        if self._reduce is None:
            return self.read_step(since=since), set()
        picked: dict[str, Value] = {}
        unknown: set[str] = set()
        for s in self.slots.values():
            if s.on_step and s.last is not None and since.get(id(s), _UNMARKED) is not s.last:
                if s.sync_dist:
                    unknown.add(self._key(s, True))
                else:
                    picked[self._key(s, True)] = s.last
        return to_floats(picked), unknown

    def logs_step_values(self) -> bool:
        """Whether a value with `on_step` goes to the loggers (evaluation writes a row per batch then)."""
        return any(s.on_step and s.logger and s.last is not None for s in self.slots.values())

    def step_tensors(self) -> dict[str, Tensor]:
        """The latest step values as they are (on the device, no host read), for `callback_metrics`
        during training: under the key and under the logged name. `sync_dist` values on several
        processes are left to `read_step` (a collective)."""
        out: dict[str, Tensor] = {}
        for s in self.slots.values():
            if s.on_step and s.last is not None and not (s.sync_dist and self._reduce is not None):
                value = s.last if isinstance(s.last, Tensor) else torch.tensor(float(s.last))
                out[s.name] = out[self._key(s, True)] = value
        return out

    def step_values(self, prog_bar: bool = False) -> dict[str, Tensor]:
        """The latest step values sent to loggers (`prog_bar`: those shown on the progress bar)
        under their keys, as they are (on the device, no host read); `sync_dist` values on several
        processes are left to `read_step` (a collective)."""
        out: dict[str, Tensor] = {}
        for s in self.slots.values():
            if (
                s.on_step
                and s.last is not None
                and (s.prog_bar if prog_bar else s.logger)
                and not (s.sync_dist and self._reduce is not None)
            ):
                out[self._key(s, True)] = (
                    s.last if isinstance(s.last, Tensor) else torch.tensor(float(s.last))
                )
        return out

    def read_epoch(self) -> dict[str, float]:
        """Host floats of the epoch aggregates, reduced over processes (one transfer)."""
        values: dict[str, Value] = {}
        for slot in self.slots.values():
            if slot.on_epoch and (value := self._global_epoch_value(slot)) is not None:
                values[self._key(slot, False)] = value
        floats = to_floats(values)
        return floats if self._share is None else self._shared(floats)

    def _shared(self, values: dict[str, float]) -> dict[str, float]:
        """`values`, or the source rank's where the reducer shares reads (its slots mirrored here, so
        `flags()` names them); a progress-bar read on one rank stays local (no collective)."""
        assert self._share is not None
        options = {
            s.name: (
                s.on_step,
                s.on_epoch,
                s.prog_bar,
                s.logger,
                s.reduce_fx,
                s.sync_dist,
                s.add_dataloader_idx,
            )
            for s in self.slots.values()
        }
        values, options = self._share.share_read(values, options)
        for name, saved in options.items():
            if name not in self.slots:
                self.slots[name] = Slot(name, *saved)
        return values

    def _global_epoch_value(self, slot: Slot) -> Value | None:
        """The epoch aggregate over every process; None when nothing was logged this epoch."""
        if slot.metric is not None:  # compute() gathers the states of every process
            return _scalar(slot.name, slot.metric.compute(), "compute()")
        if slot.total is None or self._reduce is None or (self._own_unsynced and not slot.sync_dist):
            return slot.epoch_value()
        dtype = slot.total.dtype if isinstance(slot.total, Tensor) else torch.float64
        total = torch.as_tensor(slot.total, dtype=dtype)
        if slot.reduce_fx == "mean":
            weight = torch.tensor(slot.weight, dtype=dtype, device=total.device)
            pair = self._reduce.all_reduce(torch.stack([total, weight]), "sum")
            return pair[0] / pair[1]
        return self._reduce.all_reduce(total, slot.reduce_fx)

    def unsuffixed_keys(self) -> set[str]:
        """Keys `read_*` yields for names logged with `add_dataloader_idx=False`."""
        return {
            self._key(s, step)
            for s in self.slots.values()
            if not s.add_dataloader_idx
            for step in (True, False)
        }

    def flags(self) -> dict[str, tuple[bool, bool, str]]:
        """Per key that `read_*` yields: (shown on the progress bar, sent to loggers, logged name)."""
        out: dict[str, tuple[bool, bool, str]] = {}
        for s in self.slots.values():
            for step in (True, False):
                if s.on_step if step else s.on_epoch:
                    out[self._key(s, step)] = (s.prog_bar, s.logger, s.name)
        return out


def _as_metric(value: Any) -> Any:
    """`value` if it is a torchmetrics Metric (no import: if torchmetrics is not loaded, it is not one)."""
    tm = sys.modules.get("torchmetrics")
    return value if tm is not None and isinstance(value, tm.Metric) else None


def _batch_value(name: str, metric: Any, left_out: bool = False) -> Tensor | None:
    """The value of the metric's last call on a batch (torchmetrics keeps it as `_forward_cache`);
    `left_out`: None (no step value) when it was never called, as Lightning leaves it out."""
    value = getattr(metric, "_forward_cache", None)
    if value is None and left_out:
        return None
    if value is None:
        raise MisconfigurationError(
            f"self.log({name!r}, {type(metric).__name__}) logs a step value, but the metric was not called "
            f"on this batch (update() returns nothing to log): call it, `self.metric(preds, target)`, "
            f"or log it with on_step=False."
        )
    return _scalar(name, value, "its batch value").detach()


def _scalar(name: str, value: Any, what: str) -> Tensor:
    if not isinstance(value, Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise MisconfigurationError(
            f"self.log({name!r}, metric): {what} is {shape}, not a scalar; log a metric that yields one "
            "value (e.g. average='micro'/'macro'), or log each element under its own name."
        )
    return value


def _as_number(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MisconfigurationError(
            f"self.log({name!r}, value) got {type(value).__name__}; log a scalar tensor, an int or a float."
        ) from None


def to_floats(values: Mapping[str, Value]) -> dict[str, float]:
    """Host floats of many scalars, with one device-to-host transfer per device. A Python number
    comes back as the default dtype holds it (float32), as Lightning, which logs it as a tensor, shows it."""
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[tuple[str, Tensor]]] = {}
    numbers = {key: float(value) for key, value in values.items() if not isinstance(value, Tensor)}
    if numbers:
        out.update(zip(numbers, torch.tensor(list(numbers.values())).tolist()))  # on the host
    for key, value in values.items():
        if isinstance(value, Tensor):
            by_device.setdefault(value.device, []).append((key, value))
    for items in by_device.values():
        stacked = torch.stack(
            [v.reshape(()).to(torch.float64 if v.device.type != "mps" else torch.float32) for _, v in items]
        )
        for (key, _), number in zip(items, stacked.tolist()):  # the one host read
            out[key] = number
    return {key: out[key] for key in values}
