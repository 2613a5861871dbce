"""`plugins=`: where the ranks come from, which signal requeues, who writes checkpoints, which
precision, decided once into one frozen value (`Plugins`) that the Trainer's parts are built from.

A plugin is a surge object (a `surge.precision.Precision`, a `CheckpointWriter`, a
`surge.launch.environment.ClusterEnvironment`, a `RequeuePolicy`) or an object that says what it
stands for (`surge_plugin()`, as Lightning's plugin classes in `surge.lightning.plugins` do). The
Trainer and a strategy given `cluster_environment=`/`checkpoint_io=`/`precision_plugin=` both call
`resolve_plugins`; `Plugins.combined` joins the two with Lightning's rule (one place for each).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..checkpoint.writer import CheckpointWriter
from ..errors import MisconfigurationError
from ..launch.environment import ClusterEnvironment
from ..launch.signals import RequeuePolicy
from ..precision.base import Precision

DEFAULT_PRECISIONS = (None, "32-true", "32", 32)  # what `precision=` is when not given


@dataclass(frozen=True, kw_only=True)
class Plugins:
    """What `plugins=` decided; a field left at its default means "as without plugins"."""

    environment: ClusterEnvironment | None = None  # None: surge's own detection (`detect()`)
    requeue: RequeuePolicy = RequeuePolicy()  # which signal checkpoints and requeues
    checkpoint_writer: CheckpointWriter | None = None  # None: as `async_checkpoint=` says
    precision: Precision | None = None  # None: as `precision=` says
    sync_batchnorm: bool = False
    kinds: tuple[str, ...] = ()  # the kinds given ("ClusterEnvironment", "CheckpointIO", ...)

    def combined(self, strategy: Plugins) -> Plugins:
        """These (the Trainer's `plugins=`) joined with those a strategy object was given; a kind
        given to both is refused with Lightning's message."""
        for kind, arg in BOTH:
            if kind in self.kinds and kind in strategy.kinds:
                raise MisconfigurationError(f"{arg} set through both strategy class and plugins, choose one")
        return _merge(strategy, self)


BOTH = (
    ("Precision", "precision"),
    ("CheckpointIO", "checkpoint_io"),
    ("ClusterEnvironment", "cluster_environment"),
)


@runtime_checkable
class SurgePlugin(Protocol):
    """An object standing for surge parts: Lightning's plugin classes."""

    plugin_kind: str  # Lightning's name for its kind, as its messages count them

    def surge_plugin(self) -> Plugins: ...


def resolve_plugins(plugins: Any, *, precision: Any = None, async_checkpoint: bool = False) -> Plugins:
    """The one decision for `plugins=` (a plugin, a list of them, or None), checked against the
    Trainer's `precision=` and `async_checkpoint=` before any work."""
    if plugins is None or isinstance(plugins, Plugins):
        return plugins or Plugins()
    items = list(plugins) if isinstance(plugins, Iterable) else [plugins]
    parts = [_part(item) for item in items]
    counts = Counter(kind for part in parts for kind in part.kinds)
    repeated = [kind for kind, n in counts.items() if n > 1]
    if repeated:
        raise MisconfigurationError(
            f"Received multiple values for {', '.join(repeated)} flags in `plugins`."
            " Expected one value for each type at most."
        )
    out = Plugins()
    for part in parts:
        out = _merge(out, part)
    _check_flags(out, items, precision, async_checkpoint)
    return out


def _part(item: Any) -> Plugins:
    if isinstance(item, SurgePlugin):
        return item.surge_plugin()
    for cls, field, kind in NATIVE:
        if isinstance(item, cls):
            fields: dict[str, Any] = {field: item}
            return Plugins(**fields, kinds=(kind,))
    raise MisconfigurationError(
        f"Found invalid type for plugin {item}. Expected one of: Precision, CheckpointIO, ClusterEnvironment, "
        "or LayerSync (Lightning's, from lightning.pytorch.plugins), or surge's own: a surge.precision.Precision, "
        "a CheckpointWriter, a surge.launch.environment.ClusterEnvironment or a RequeuePolicy."
    )


NATIVE: tuple[tuple[type, str, str], ...] = (
    (Precision, "precision", "Precision"),
    (CheckpointWriter, "checkpoint_writer", "CheckpointIO"),
    (ClusterEnvironment, "environment", "ClusterEnvironment"),
    (RequeuePolicy, "requeue", "RequeuePolicy"),
)


def _merge(base: Plugins, part: Plugins) -> Plugins:
    """`base` with every field `part` sets (differs from the default) taken from `part`."""
    default = Plugins()
    changes = {
        f.name: getattr(part, f.name)
        for f in dataclasses.fields(Plugins)
        if f.name != "kinds" and getattr(part, f.name) != getattr(default, f.name)
    }
    return dataclasses.replace(base, **changes, kinds=base.kinds + part.kinds)


def _check_flags(out: Plugins, items: list[Any], precision: Any, async_checkpoint: bool) -> None:
    if out.precision is not None and precision not in DEFAULT_PRECISIONS:
        given = next(item for item in items if _part(item).precision is not None)
        raise MisconfigurationError(
            f"Received both `precision={precision}` and `plugins={given}`. Choose one."
        )
    if async_checkpoint and out.checkpoint_writer is not None and not out.checkpoint_writer.asynchronous:
        raise MisconfigurationError(
            "async_checkpoint=True and a CheckpointIO in plugins both choose how checkpoints are written: "
            "pass one (AsyncCheckpointIO(checkpoint_io) writes the plugin's checkpoints in the background)."
        )
