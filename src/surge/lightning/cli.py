"""`LightningCLI`: Lightning's constructor over surge's config CLI (`SurgeCLI`, jsonargparse).

    cli = LightningCLI(Model, DataModule, seed_everything_default=42, trainer_defaults={...},
                       save_config_kwargs={"overwrite": True}, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)

`run=True` (the default) reads a subcommand (`fit`, `validate`, `test`, `predict`) and runs it;
`run=False` reads one command line without a subcommand and only builds. Subclasses may override
`add_arguments_to_parser(parser)`, `before_instantiate_classes()` and `before_<subcommand>()` /
`after_<subcommand>()`, called where Lightning calls them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from ..callbacks.base import Callback
from ..config_cli import SaveConfig, SurgeCLI
from ..datamodule import DataModule
from ..errors import bad_value
from ..module import Module
from ..trainer import Trainer
from .seeding import seed_everything

SaveConfigCallback = SaveConfig
SAVE_CONFIG_KEYS = {"config_filename", "overwrite"}
PARSER_KEYS = {"default_config_files", "description"}
LightningArgumentParser = Any  # jsonargparse's ArgumentParser: add_argument, set_defaults, link_arguments


class LightningCLI(SurgeCLI):
    """Lightning's `LightningCLI(model_class, datamodule_class, save_config_callback,
    save_config_kwargs, trainer_class, trainer_defaults, seed_everything_default, parser_kwargs,
    subclass_mode_model, subclass_mode_data, args, run, auto_configure_optimizers,
    load_from_checkpoint_support)` on surge's config CLI."""

    def __init__(
        self,
        model_class: type[Module] | None = None,
        datamodule_class: type[DataModule] | None = None,
        save_config_callback: type[SaveConfig] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: Sequence[str] | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        _check(
            save_config_callback, save_config_kwargs, trainer_class, seed_everything_default, parser_kwargs
        )
        self.save_config_kwargs = dict(save_config_kwargs or {})
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        self._subcommands, self._trainer_class = run, trainer_class
        super().__init__(
            model_class, datamodule_class, args=args, subclass_mode_model=subclass_mode_model,
            subclass_mode_data=subclass_mode_data, save_config=save_config_callback is not None, run=run,
        )  # fmt: skip
        if not run:
            self.subcommand = None  # type: ignore[assignment]  # Lightning's: no subcommand was read

    # -- Lightning's hooks -------------------------------------------------------------------
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add arguments, defaults or links to a command's parser (jsonargparse's ArgumentParser)."""

    def before_instantiate_classes(self) -> None:
        """Called after parsing, before the model, data and trainer are built."""

    # -- what SurgeCLI asks a subclass -------------------------------------------------------
    def _add_seed_argument(self, parser: Any) -> None:
        parser.add_argument(
            "--seed_everything", type=bool | int, default=self.seed_everything_default,
            help="True: a random seed (recorded in the saved config); an int: that seed; False: no seeding",
        )  # fmt: skip

    def _customize(self, parser: Any, command: str) -> None:
        defaults = {f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"}
        if defaults:
            parser.set_defaults(defaults)
        if self.parser_kwargs.get("default_config_files"):
            parser.default_config_files = list(self.parser_kwargs["default_config_files"])
        if self.parser_kwargs.get("description"):
            parser.description = self.parser_kwargs["description"]
        self.add_arguments_to_parser(parser)

    def _apply_seed(self, cfg: Any) -> None:
        value = cfg.seed_everything
        if value is False:
            return
        if value is True:  # Lightning: a random seed, or the one a parent process chose
            value = int(os.environ.get("PL_GLOBAL_SEED", random.randint(0, 2**32 - 1)))
        cfg.seed_everything = seed_everything(value, workers=True)

    def _for_instantiation(self, cfg: Any) -> Any:
        self.before_instantiate_classes()
        extra = self.trainer_defaults.get("callbacks")
        if extra is None:
            return cfg
        cfg = cfg.clone()
        given = cfg.trainer.callbacks
        given = [] if given is None else (given if isinstance(given, list) else [given])
        cfg.trainer.callbacks = given + (extra if isinstance(extra, list) else [extra])
        return cfg

    def _save_config(self, text: str) -> Callback:
        return SaveConfig(
            text,
            filename=self.save_config_kwargs.get("config_filename", "config.yaml"),
            overwrite=self.save_config_kwargs.get("overwrite", False),
        )

    def _run(self) -> Any:
        getattr(self, f"before_{self.subcommand}", lambda: None)()
        result = super()._run()
        getattr(self, f"after_{self.subcommand}", lambda: None)()
        return result


def _check(
    save_config_callback: Any, save_config_kwargs: Any, trainer_class: Any, seed: Any, parser_kwargs: Any
) -> None:
    """Refuse, before parsing, the constructor values surge cannot honour."""
    if save_config_callback not in (None, SaveConfig):
        raise bad_value(
            "LightningCLI(save_config_callback)", save_config_callback,
            "SaveConfigCallback or None (a subclass of it is not supported)",
        )  # fmt: skip
    unknown = set(save_config_kwargs or {}) - SAVE_CONFIG_KEYS
    if unknown:
        raise bad_value(
            "LightningCLI(save_config_kwargs)", sorted(unknown), f"keys among {sorted(SAVE_CONFIG_KEYS)}"
        )
    if not (isinstance(trainer_class, type) and issubclass(trainer_class, Trainer)):
        raise bad_value("LightningCLI(trainer_class)", trainer_class, "surge.Trainer or a subclass")
    if not isinstance(seed, bool | int):
        raise bad_value("LightningCLI(seed_everything_default)", seed, "True, False or an int seed")
    unknown = set(parser_kwargs or {}) - PARSER_KEYS
    if unknown:
        raise bad_value("LightningCLI(parser_kwargs)", sorted(unknown), f"keys among {sorted(PARSER_KEYS)}")


__all__ = ["LightningArgumentParser", "LightningCLI", "SaveConfigCallback"]
