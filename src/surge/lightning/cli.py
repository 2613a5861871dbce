"""`LightningCLI`: Lightning's constructor over surge's config CLI (`SurgeCLI`, jsonargparse).

    cli = LightningCLI(Model, DataModule, seed_everything_default=42, trainer_defaults={...},
                       save_config_kwargs={"overwrite": True}, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)

`run=True` (the default) reads a subcommand (`fit`, `validate`, `test`, `predict`) and runs it;
`run=False` reads one command line without a subcommand and only builds. Subclasses may override
`add_arguments_to_parser(parser)` (a `LightningArgumentParser`: `add_lightning_class_args`,
`add_optimizer_args`, `add_lr_scheduler_args`), `before_instantiate_classes()`,
`after_instantiate_classes()`, `configure_optimizers(module, optimizer, lr_scheduler)`,
`adapt_checkpoint_hparams(subcommand, hparams)` and `before_<subcommand>()` / `after_<subcommand>()`,
called where Lightning calls them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ..callbacks.base import Callback
from ..datamodule import DataModule
from ..errors import CheckpointError, SurgeError, bad_value, install_hint
from ..module import Module
from ..stage_cli.config import CONFIG_ERROR, RUN_ERROR, SaveConfig, SurgeCLI, _fail
from ..trainer import Trainer
from . import cli_checkpoint
from .seeding import seed_everything

if TYPE_CHECKING:  # jsonargparse is optional: the parser module is imported when a CLI is built
    from torch.optim import Optimizer

    from .cli_parser import LightningArgumentParser, ReduceLROnPlateau

SaveConfigCallback = SaveConfig
SAVE_CONFIG_KEYS = {"config_filename", "overwrite"}
PARSER_KEYS = {"default_config_files", "description"}
# Lightning's: the subcommand method's arguments the CLI does not take (it passes the built objects).
SUBCOMMAND_SKIP = {
    "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
    "validate": {"model", "dataloaders", "datamodule"},
    "test": {"model", "dataloaders", "datamodule"},
    "predict": {"model", "dataloaders", "datamodule"},
}
LAZY = {
    "LightningArgumentParser",
    "ReduceLROnPlateau",
    "ArgsType",
    "LRSchedulerTypeTuple",
}  # from cli_parser, on first use


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
        self._method_arguments: dict[str, list[str]] = {}  # per subcommand: the trainer method's own
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support
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

    def after_instantiate_classes(self) -> None:
        """Called once the model, data and trainer are built (`self.config_init` holds them all)."""

    @staticmethod
    def configure_optimizers(lightning_module: Module, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
        """What the module's `configure_optimizers` returns under `--optimizer` (override to change)."""
        from .cli_optimizers import default_configure_optimizers

        return default_configure_optimizers(lightning_module, optimizer, lr_scheduler)

    def adapt_checkpoint_hparams(self, subcommand: str, checkpoint_hparams: dict[str, Any]) -> dict[str, Any]:
        """The `--ckpt_path` hyper-parameters to use as `--model.*` defaults (override to adapt them)."""
        return checkpoint_hparams

    # -- what SurgeCLI asks a subclass -------------------------------------------------------
    def _add_arguments(self, parser: Any, command: str) -> None:
        """Lightning's sections, in its order: `seed_everything`, `trainer` (Lightning's arguments),
        `model`, `data`, the subclass's, `optimizer`/`lr_scheduler`, then the subcommand method's
        own (`ckpt_path`, `weights_only`, ...)."""
        parser.add_argument(
            "--seed_everything", type=bool | int, default=self.seed_everything_default,
            help="True: a random seed (recorded in the saved config); an int: that seed; False: no seeding",
        )  # fmt: skip
        from . import cli_optimizers, cli_parser
        from .cli_trainer import trainer_arguments_class

        parser.add_class_arguments(trainer_arguments_class(self._trainer_class), "trainer")
        defaults = {f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"}
        if defaults:
            parser.set_defaults(defaults)
        self._add_model_and_data(parser)
        if self.parser_kwargs.get("default_config_files"):
            parser.default_config_files = list(self.parser_kwargs["default_config_files"])
        if self.parser_kwargs.get("description"):
            parser.description = self.parser_kwargs["description"]
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            cli_optimizers.add_defaults(parser)
        cli_parser.link_optimizers_and_lr_schedulers(parser)
        if self._subcommands:
            added = parser.add_method_arguments(self._trainer_class, command, skip=SUBCOMMAND_SKIP[command])
            self._method_arguments[command] = list(added)

    def _parser_class(self) -> type:
        try:
            from .cli_parser import LightningArgumentParser
        except ImportError as err:
            raise ImportError(f"LightningCLI needs jsonargparse: {install_hint('cli')} ({err})") from None
        return LightningArgumentParser

    def _reparse(self, args: list[str], cfg: Any) -> Any:
        """With `load_from_checkpoint_support`, parse again with the `--ckpt_path` checkpoint's
        hyper-parameters in front of the command line (Lightning 2.x: they are the defaults)."""
        command = cfg.get("subcommand")
        if not (self.load_from_checkpoint_support and command):
            return cfg
        ckpt_path, model = cfg[command].ckpt_path, cfg[command].model
        try:
            found = cli_checkpoint.model_flag(
                ckpt_path, partial(self.adapt_checkpoint_hparams, command), self._model_subclass, model
            )
        except CheckpointError as err:
            _fail(self.parser.prog, command, f"CheckpointError: {err}", RUN_ERROR)
        if found is None:
            return cfg
        from jsonargparse import ArgumentError

        try:
            return self.parser.parse_args(cli_checkpoint.with_model_flag(args, command, found[0]))
        except ArgumentError as err:
            refused = cli_checkpoint.refused(ckpt_path, found[1], err)
            _fail(self.parser.prog, command, f"CheckpointError: {refused}", CONFIG_ERROR)

    def _apply_seed(self, cfg: Any) -> None:
        value = cfg.seed_everything
        if value is False:
            return
        if value is True:  # Lightning: a random seed, or the one a parent process chose
            value = int(os.environ.get("PL_GLOBAL_SEED", random.randint(0, 2**32 - 1)))
        cfg.seed_everything = seed_everything(value, workers=True)

    def _for_instantiation(self, cfg: Any) -> Any:
        """The config with the trainer's callbacks in Lightning's order: the parsed ones, those of
        `add_lightning_class_args` keys, then `trainer_defaults["callbacks"]`."""
        from .cli_parser import build_callbacks

        self.before_instantiate_classes()
        extra = self.trainer_defaults.get("callbacks")
        extra = [] if extra is None else (extra if isinstance(extra, list) else [extra])
        keyed = build_callbacks(self._parsers[self.subcommand or "fit"], cfg)
        if not (extra or keyed):
            return cfg
        cfg = cfg.clone()
        given = cfg.trainer.callbacks
        given = [] if given is None else (given if isinstance(given, list) else [given])
        cfg.trainer.callbacks = given + keyed + extra
        return cfg

    def _instantiators(self) -> list[tuple[Any, type, bool]]:
        """Lightning's: the model and the datamodule record the config that built them as their
        hyper-parameters, with `_instantiator` (`cli_hparams.py`)."""
        from .cli_hparams import ConfigRecorder

        parser = self._parsers[self.subcommand or "fit"]
        return [
            (ConfigRecorder(parser, self.config, "model"), self._model_class or Module, self._model_subclass),
            (
                ConfigRecorder(parser, self.config, "data"),
                self._data_class or DataModule,
                self._data_subclass,
            ),
        ]

    def _after_instantiation(self, built: Any) -> None:
        from . import cli_optimizers

        if self.auto_configure_optimizers:
            parser = self._parsers[self.subcommand or "fit"]
            cli_optimizers.install(built.model, parser, built, self.configure_optimizers, type(self).__name__)
        self.after_instantiate_classes()

    def _save_config(self, text: str) -> Callback:
        return SaveConfig(
            text,
            filename=self.save_config_kwargs.get("config_filename", "config.yaml"),
            overwrite=self.save_config_kwargs.get("overwrite", False),
        )

    def _run(self) -> Any:
        """`trainer.<subcommand>(model, datamodule=..., **the method's arguments)`, as Lightning
        calls it, between `before_<subcommand>` and `after_<subcommand>`."""
        command = self.subcommand
        getattr(self, f"before_{command}", lambda: None)()
        given = {name: self.config[name] for name in self._method_arguments[command]}
        try:
            result = getattr(self.trainer, command)(self.model, datamodule=self.datamodule, **given)
        except SurgeError as err:
            _fail(self.parser.prog, command, f"{type(err).__name__}: {err}", RUN_ERROR)
        getattr(self, f"after_{command}", lambda: None)()
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


__all__ = ["LightningArgumentParser", "LightningCLI", "ReduceLROnPlateau", "SaveConfigCallback"]


def __getattr__(name: str) -> Any:
    if name in LAZY:
        from . import cli_parser

        return getattr(cli_parser, name)
    if name == "instantiate_class":
        from .cli_optimizers import instantiate_class

        return instantiate_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
