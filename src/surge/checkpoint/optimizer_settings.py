"""Whether a saved optimizer's group settings are another optimizer class's: what a checkpoint's
restore refuses (a whole state dict's and a sharded one's alike)."""

from __future__ import annotations

from torch.optim import Optimizer

_GROUP_BOOKKEEPING = {"params", "param_names", "initial_lr"}


def settings_mismatch(opt: Optimizer, saved: set[str]) -> str | None:
    """Why group settings named `saved` (a sharded checkpoint's) are not `opt`'s, or None."""
    if not saved:
        return None  # nothing recorded to compare
    return settings_differ(opt, saved, {k for group in opt.param_groups for k in group})


def settings_differ(opt: Optimizer, saved: set[str], own: set[str]) -> str | None:
    theirs, ours = saved - _GROUP_BOOKKEEPING, own - _GROUP_BOOKKEEPING
    if theirs - ours and ours - theirs:
        return (
            f"it was saved from another optimizer class: its settings {sorted(theirs - ours)} are not "
            f"{type(opt).__name__}'s, which needs {sorted(ours - theirs)}"
        )
    return None
