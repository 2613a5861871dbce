"""What a module or datamodule that `LightningCLI` builds records as its hyper-parameters, as
Lightning's CLI: its `save_hyperparameters()` gets the config's section (class-typed arguments as
their `class_path`/`init_args`, in subclass mode the class as `_class_path` and its init arguments
beside it, the values instantiation links applied) and `_instantiator`, the name of Lightning's
function that builds the class from them again. hparams.yaml and the checkpoint keep these;
`load_from_checkpoint` reads them (`surge/module/instantiated.py`) without importing what they name."""

from __future__ import annotations

from typing import Any

import yaml

from ..module.hparams import given_hyperparameters
from ..module.instantiated import CLASS_PATH_KEY, INSTANTIATOR_KEY, TRUSTED_INSTANTIATORS

INSTANTIATOR = TRUSTED_INSTANTIATORS[0]  # "lightning.pytorch.cli.instantiate_module"


class ConfigRecorder:
    """A jsonargparse instantiator for the config's `key` section ("model" or "data")."""

    def __init__(self, parser: Any, config: Any, key: str) -> None:
        self.parser, self.config, self.key = parser, config, key

    def __call__(self, class_type: type, *args: Any, applied_instantiation_links: dict, **kwargs: Any) -> Any:
        section = self.section(applied_instantiation_links)
        if not _agrees(section, kwargs):  # not this section's object (Lightning records it all the same)
            return class_type(*args, **kwargs)
        with given_hyperparameters({**section, INSTANTIATOR_KEY: INSTANTIATOR}):
            return class_type(*args, **kwargs)

    def section(self, links: dict[str, Any]) -> dict[str, Any]:
        """The section as the config dump holds it, flattened out of `class_path`/`init_args`."""
        values = _dumped(self.parser, self.config).get(self.key) or {}
        if "class_path" in values:  # the same keys in subclass mode as with a fixed class
            values = {
                CLASS_PATH_KEY: values["class_path"],
                **(values.get("init_args") or {}),
                **(values.get("dict_kwargs") or {}),
            }
        for target, value in links.items():
            if target.startswith(f"{self.key}."):
                _set_nested(values, target[len(self.key) + 1 :].removeprefix("init_args."), value)
        return values


def _dumped(parser: Any, config: Any) -> dict[str, Any]:
    """The config as `--print_config` would write it, link targets included where they serialize."""
    for skip_link_targets in (False, True):  # a parse-time link's target may hold what only its source writes
        try:
            return yaml.safe_load(_dump(parser, config, skip_link_targets)) or {}
        except (AttributeError, TypeError, ValueError):
            if skip_link_targets:
                raise
    raise AssertionError("unreachable")


def _dump(parser: Any, config: Any, skip_link_targets: bool) -> str:
    try:
        return parser.dump(
            config, skip_link_targets=skip_link_targets, skip_unset=False
        )  # jsonargparse >= 4.49
    except TypeError as err:
        if "skip_unset" not in str(err):
            raise
        return parser.dump(config, skip_link_targets=skip_link_targets, skip_none=False)


def _agrees(section: dict[str, Any], kwargs: dict[str, Any]) -> bool:
    """Whether `kwargs` could be the section's: no plain value differs (another key of the same
    class, e.g. an `add_lightning_class_args` one, records its own arguments)."""
    plain = (bool, int, float, str, type(None))
    return all(
        not (isinstance(value, plain) and isinstance(section[key], plain)) or value == section[key]
        for key, value in kwargs.items()
        if key in section
    )


def _set_nested(values: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for name in parents:
        values = values.setdefault(name, {})
    values[last] = value
