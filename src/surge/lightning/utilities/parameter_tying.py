"""`lightning.pytorch.utilities.parameter_tying`: find the parameters a module shares between its
submodules (tied weights) and tie them again, e.g. after a strategy copied the module."""

from __future__ import annotations

from torch import nn


def find_shared_parameters(module: nn.Module) -> list[list[str]]:
    """The names of each parameter reachable under more than one name, one list per parameter, in
    registration order (`named_parameters` would give each only once)."""
    names: dict[nn.Parameter, list[str]] = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for name, param in sub._parameters.items():
            if param is not None:
                names.setdefault(param, []).append(f"{prefix}.{name}" if prefix else name)
    return [found for found in names.values() if len(found) > 1]


def set_shared_parameters(module: nn.Module, shared_params: list[list[str]]) -> nn.Module:
    """Make every name of each group in `shared_params` refer to the object the first name refers to;
    returns `module`."""
    for first, *others in shared_params:
        ref = _get(module, first)
        for path in others:
            owner, _, attr = path.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, attr, ref)
    return module


def _get(module: nn.Module, path: str) -> object:
    """The attribute at dotted `path` under `module` (a parameter, buffer or submodule)."""
    owner, _, attr = path.rpartition(".")
    return getattr(module.get_submodule(owner) if owner else module, attr)


__all__ = ["find_shared_parameters", "set_shared_parameters"]
