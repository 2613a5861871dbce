"""Config-driven runs: `surge fit|validate|test|predict --config run.yaml`, built on jsonargparse.

A config has three sections, each type-checked against a signature before anything runs:

    model:   {class_path: my_pkg.MyModel, init_args: {lr: 0.01}}   # a surge.Module subclass
    data:    {class_path: my_pkg.MyData, init_args: {...}}        # a surge.DataModule (optional)
    trainer: {max_epochs: 5, callbacks: [{class_path: ..., init_args: ...}]}   # Trainer(...)

plus `ckpt_path` and `seed_everything`. Dotted flags override it (`--trainer.max_epochs 5
--model.init_args.lr 0.01`), `--print_config` prints the merged result as YAML (a config that
reproduces the run), and a fit saves that YAML as `config.yaml` in the run directory.
A script gets the same command line with `SurgeCLI(MyModel, MyData)`.

A config is code: each `class_path` is imported and called. `--allow_class_paths torch.optim,mypkg`
(or `SurgeCLI(allow_class_paths=[...])`) refuses any other before anything is built (config/guard.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..callbacks.base import Callback
from ..config import guard as config_guard
from ..config import targets as config_targets
from ..datamodule import DataModule
from ..errors import MisconfigurationError, SurgeError, bad_value, install_hint
from ..module import Module
from ..rank_zero import info
from ..trainer import Trainer
from .commands import COMMANDS
from .parse_errors import command_error, parse_error

CONFIG_ERROR, RUN_ERROR = 2, 1  # exit codes: the config was refused / the run failed
ALLOW_FLAG = "--allow_class_paths"
CONFIG_IS_CODE = (
    "A config file is code, like a Python script: every class_path in it (or in a --*.class_path "
    "flag) names an importable class that is imported and called with its init_args. Run only "
    "configs you trust, or pass --allow_class_paths PREFIX[,PREFIX...] (e.g. "
    "--allow_class_paths surge,torch.optim,mypkg) to refuse every class_path outside those modules "
    "before anything is built. That flag is read from the command line only, never from a config."
)


__all__ = ["SurgeCLI", "run_cli"]  # the public API


class SaveConfig(Callback):
    """Writes the merged config to `<log_dir>/<filename>` when a fit starts (rank zero); with
    `overwrite=False` an existing file there stops the fit before any work (as Lightning's). A
    resumed fit continues its run's directory: it keeps the first config and writes its own beside
    it (`config.resume-1.yaml`, ...) unless it is the same."""

    def __init__(self, text: str, filename: str = "config.yaml", overwrite: bool = True) -> None:
        self.text, self.filename, self.overwrite = text, filename, overwrite

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit" and trainer.is_global_zero:
            path = Path(trainer.log_dir) / self.filename
            if path.exists() and trainer.ckpt_path is not None:  # a resume continues this run
                free = _beside(path, self.text)
                if free is None:
                    return
                path = free
            elif path.exists() and not self.overwrite:
                raise MisconfigurationError(
                    f"{path} exists and save_config_kwargs={{'overwrite': False}}: delete it, pass "
                    "save_config_kwargs={'overwrite': True}, or save_config_callback=None."
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.text)


def _beside(path: Path, text: str) -> Path | None:
    """The first free `<stem>.resume-N<suffix>` next to `path`; None when `path` or one of those
    already holds `text`."""
    n = 0
    while path.exists():
        if path.read_text() == text:
            return None
        n += 1
        path = path.with_name(f"{path.name.split('.')[0]}.resume-{n}{path.suffix}")
    return path


class SurgeCLI:
    """Parse a config-driven command line, build the model, data and Trainer, and run the command.

    `SurgeCLI()` takes any `surge.Module` by `class_path`; `SurgeCLI(MyModel, MyData)` fixes the
    classes, and the sections hold their init arguments directly (`model: {lr: 0.01}`) unless
    `subclass_mode_model`/`subclass_mode_data` ask for `class_path` (subclasses of the given one).
    A refused config or a failed run exits with a message on stderr (status 2 or 1), no traceback.
    `run=False` only builds: `cli.model`, `cli.datamodule`, `cli.trainer`, `cli.config`.
    `allow_class_paths=["torch.optim", "mypkg"]` refuses any `class_path` outside those module
    prefixes (as `--allow_class_paths` does; given both, a class_path must pass both).
    """

    def __init__(
        self,
        model_class: type[Module] | None = None,
        datamodule_class: type[DataModule] | None = None,
        *,
        args: Sequence[str] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        save_config: bool = True,
        run: bool = True,
        prog: str | None = None,
        allow_class_paths: Sequence[str] | None = None,
    ) -> None:
        self._subcommands: bool = getattr(self, "_subcommands", True)  # LightningCLI(run=False): none
        self._trainer_class: type[Trainer] = getattr(self, "_trainer_class", Trainer)
        self._model_class = model_class
        self._data_class = datamodule_class
        self._model_subclass = model_class is None or subclass_mode_model
        self._data_subclass = datamodule_class is None or subclass_mode_data
        _import_every_plugin()
        self.parser = self._root_parser(prog)
        args = list(sys.argv[1:] if args is None else args)
        args, self.class_path_policy = self._policy(args, allow_class_paths)
        self.subcommand, self.config = self._parse(args)
        self.model, self.datamodule, self.trainer = self._instantiate(save_config)
        self.result: Any = self._run() if run else None

    # -- the parsers -------------------------------------------------------------------------
    def _root_parser(self, prog: str | None) -> Any:
        if not self._subcommands:  # one command line: the fit's, without --ckpt_path
            self._parsers = {"fit": self._command_parser("fit", prog)}
            return self._parsers["fit"]
        parser = _new_parser(prog=prog, description="Run surge from a config: model, data and trainer.")
        commands = parser.add_subcommands(required=True, dest="subcommand")
        self._parsers = {name: self._command_parser(name) for name in COMMANDS}
        for name, help_text in COMMANDS.items():
            commands.add_subcommand(name, self._parsers[name], help=help_text)
        return parser

    def _command_parser(self, command: str, prog: str | None = None) -> Any:
        from jsonargparse import ActionConfigFile

        parser = _new_parser(
            self._parser_class(), prog=prog, description=f"{COMMANDS[command]}.\n\n{CONFIG_IS_CODE}"
        )
        parser.add_argument(
            "--config", action=ActionConfigFile, help="a YAML config (several merge in order)"
        )
        self._add_arguments(parser, command)
        return parser

    def _add_arguments(self, parser: Any, command: str) -> None:
        """A command's sections and options (LightningCLI: Lightning's, in Lightning's order)."""
        from .help import group_trainer_options

        self._add_model_and_data(parser)
        parser.add_class_arguments(self._trainer_class, "trainer")
        group_trainer_options(parser)
        if self._subcommands:
            parser.add_argument(
                "--ckpt_path", type=str | None, default=None,
                help='a checkpoint, "last" or "best": resume a fit, or the weights to evaluate',
            )  # fmt: skip
        self._add_seed_argument(parser)
        if command == "predict":
            parser.add_argument(
                "--predictions_path", type=str | None, default=None, help="torch.save the predictions here"
            )
        self._customize(parser, command)

    def _add_model_and_data(self, parser: Any) -> None:
        if self._model_subclass:
            parser.add_subclass_arguments(self._model_class or Module, "model", required=True)
        else:
            parser.add_class_arguments(self._model_class, "model")
        if self._data_subclass:
            parser.add_subclass_arguments(self._data_class or DataModule, "data", required=False)
        else:
            parser.add_class_arguments(self._data_class, "data")

    def _add_seed_argument(self, parser: Any) -> None:
        parser.add_argument(
            "--seed_everything", type=int | None, default=None, help="seed python, numpy and torch first"
        )

    def _customize(self, parser: Any, command: str) -> None:
        """A subclass's changes to a command's parser (LightningCLI: defaults, its hook)."""

    def _parser_class(self) -> type | None:
        """The class of the command parsers (None: jsonargparse's ArgumentParser)."""
        return None

    def _reparse(self, args: list[str], cfg: Any) -> Any:
        """A subclass's second look at the parsed command line (LightningCLI: --ckpt_path hparams)."""
        return cfg

    def _policy(
        self, args: list[str], allowed: Sequence[str] | None
    ) -> tuple[list[str], config_guard.ClassPathPolicy | None]:
        """Take `--allow_class_paths` out of the arguments (jsonargparse would also accept it from
        a config, which must not widen its own allowlist); combine it with the constructor's."""
        command = args[0] if args and args[0] in COMMANDS else None
        try:
            args, flagged = _take_flag(args, ALLOW_FLAG)
            given = None if allowed is None else config_guard.ClassPathPolicy(allowed)
            from_flag = None if flagged is None else config_guard.ClassPathPolicy(flagged)
        except SurgeError as err:
            _fail(self.parser.prog, command, str(err), CONFIG_ERROR)
        return args, (given.combine(from_flag) if given is not None else from_flag)

    def _parse(self, args: list[str]) -> tuple[str, Any]:
        from jsonargparse import ArgumentError

        command = args[0] if args and args[0] in COMMANDS else None
        try:
            with config_guard.applying(self.class_path_policy):
                cfg = self._reparse(args, self.parser.parse_args(args))
            if not self._subcommands:
                cfg = _as_fit(cfg)
            if self.class_path_policy is not None:  # also catches bare names and dotted flags
                config_guard.check_namespace(cfg[cfg.subcommand], self.class_path_policy)
                declared = config_targets.declared_types(self._parsers[cfg.subcommand])
                config_targets.check_targets(cfg[cfg.subcommand], declared, self.class_path_policy)
        except config_guard.ConfigRefused as err:
            _fail(self.parser.prog, command, str(err), CONFIG_ERROR)
        except ArgumentError as err:
            _fail(
                self.parser.prog, command, parse_error(err, self._parsers.get(command or "fit")), CONFIG_ERROR
            )
        return cfg.subcommand, cfg[cfg.subcommand]

    def _instantiate(self, save_config: bool) -> tuple[Module, DataModule | None, Trainer]:
        parser = self._parsers[self.subcommand]
        cfg = self.config
        self._apply_seed(cfg)
        try:
            built = self.config_init = _instantiate(
                parser, self._for_instantiation(cfg), self._instantiators()
            )
            self._after_instantiation(built)
        except (SurgeError, TypeError, ValueError) as err:
            _fail(self.parser.prog, self.subcommand, f"{type(err).__name__}: {err}", CONFIG_ERROR)
        trainer = built.trainer
        if save_config and self.subcommand == "fit":
            trainer.callbacks.insert(0, self._save_config(_dump(parser, cfg)))  # hooks bind at fit()
        return built.model, built.data, trainer

    def _apply_seed(self, cfg: Any) -> None:
        if cfg.seed_everything is not None:
            _seed(cfg.seed_everything, self.parser.prog, self.subcommand)

    def _for_instantiation(self, cfg: Any) -> Any:
        """The config the classes are built from (a subclass may add objects; the saved one is `cfg`)."""
        return cfg

    def _instantiators(self) -> list[tuple[Any, type, bool]]:
        """jsonargparse instantiators `(function, class, subclasses)` for this build (LightningCLI:
        the model's and the datamodule's, which record the config as their hyper-parameters)."""
        return []

    def _after_instantiation(self, built: Any) -> None:
        """A subclass's changes to the built objects (LightningCLI: --optimizer, its hook)."""

    def _save_config(self, text: str) -> Callback:
        return SaveConfig(text)

    # -- running -----------------------------------------------------------------------------
    def _run(self) -> Any:
        cfg, trainer, model, data = self.config, self.trainer, self.model, self.datamodule
        try:
            if self.subcommand == "fit":
                trainer.fit(model, datamodule=data, ckpt_path=cfg.ckpt_path)
                _report_fit(trainer)
                return None
            if self.subcommand == "predict":
                out = trainer.predict(model, datamodule=data, ckpt_path=cfg.ckpt_path)
                if cfg.predictions_path and trainer.is_global_zero:
                    import torch

                    torch.save(out, cfg.predictions_path)
                    info(f"predictions: {cfg.predictions_path}")
                return out
            run = trainer.validate if self.subcommand == "validate" else trainer.test
            metrics = run(model, datamodule=data, ckpt_path=cfg.ckpt_path)
            _report_metrics(metrics)
            return metrics
        except SurgeError as err:
            _fail(self.parser.prog, self.subcommand, f"{type(err).__name__}: {err}", RUN_ERROR)


def run_cli(
    args: Sequence[str] | None = None,
    model_class: type[Module] | None = None,
    datamodule_class: type[DataModule] | None = None,
    **kwargs: Any,
) -> int:
    """`SurgeCLI(...)` as a function that returns the exit status instead of exiting."""
    try:
        SurgeCLI(model_class, datamodule_class, args=args, **kwargs)
    except SystemExit as done:  # --help, --print_config, or a reported error
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def _as_fit(cfg: Any) -> Any:
    """A command line parsed without subcommands, shaped as a `fit` one."""
    from jsonargparse import Namespace

    return Namespace(subcommand="fit", fit=cfg)


def _import_every_plugin() -> None:
    """Import each callback, logger, profiler and strategy surge has: their packages load a name
    when it is first used (config/lazy_names.py), and jsonargparse resolves a short class_path
    (`class_path: EarlyStopping`) only among the subclasses imported already."""
    from .. import callbacks, loggers, profiler, strategies

    for package in (callbacks, loggers, profiler, strategies):
        for name in package.__all__:
            getattr(package, name)


def _new_parser(parser_class: type | None = None, **kwargs: Any) -> Any:
    try:
        from jsonargparse import ArgumentParser
    except ImportError:
        raise ImportError(
            f"surge fit/validate/test/predict need jsonargparse: {install_hint('cli')}"
        ) from None
    from .help import HelpFormatter

    # No abbreviations: a misspelt key must be refused, not silently expanded to a real one.
    # The guarded YAML mode refuses alias bombs (and, under an allowlist, class paths) as it loads.
    return (parser_class or ArgumentParser)(
        exit_on_error=False,
        allow_abbrev=False,
        parser_mode=config_guard.yaml_mode(),
        formatter_class=HelpFormatter,
        **kwargs,
    )


def _take_flag(args: list[str], flag: str) -> tuple[list[str], str | None]:
    """Remove every `flag VALUE` / `flag=VALUE` from `args`; the values joined by commas (or None)."""
    rest, values, i = [], [], 0
    while i < len(args):
        if args[i] == flag:
            if i + 1 == len(args):
                raise config_guard.ConfigRefused(
                    f"{flag} needs a value: module prefixes, e.g. torch.optim,mypkg"
                )
            values.append(args[i + 1])
            i += 2
            continue
        if args[i].startswith(flag + "="):
            values.append(args[i].split("=", 1)[1])
        else:
            rest.append(args[i])
        i += 1
    return rest, (None if not values else ",".join(values))


def _seed(value: int, prog: str | None, command: str) -> None:
    from ..seed import seed_everything

    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        err = bad_value("seed_everything", value, "an int in [0, 2**32), or null to leave the seed alone")
        _fail(prog, command, str(err), CONFIG_ERROR)
    seed_everything(value)


def _instantiate(parser: Any, cfg: Any, instantiators: list[tuple[Any, type, bool]]) -> Any:
    """The objects `cfg` describes, built with `instantiators` first."""
    if hasattr(parser, "instantiate"):  # jsonargparse >= 4.50: instantiators for this call only
        return parser.instantiate(cfg, instantiators=instantiators)
    for function, class_type, subclasses in instantiators:
        parser.add_instantiator(function, class_type, subclasses=subclasses)
    return parser.instantiate_classes(cfg)


def _dump(parser: Any, cfg: Any) -> str:
    """The config as YAML, `null`s kept (as `--print_config` shows it)."""
    try:
        return parser.dump(cfg, skip_unset=False)  # jsonargparse >= 4.49
    except TypeError:
        return parser.dump(cfg, skip_none=False)


def _fail(prog: str | None, command: str | None, message: str, code: int) -> None:
    sys.stderr.write(command_error(prog, command, message))
    raise SystemExit(code)


def _report_fit(trainer: Trainer) -> None:
    lines = [f"fit finished: {trainer.current_epoch} epochs, {trainer.global_step} optimizer steps"]
    cb = trainer.checkpoint_callback
    if cb is not None and cb.best_model_path:
        lines.append(f"best checkpoint: {cb.best_model_path}")
    if cb is not None and cb.last_model_path:
        lines.append(f"last checkpoint: {cb.last_model_path}")
    lines.append(f"run directory:   {trainer.log_dir}")
    info("\n".join(lines))


def _report_metrics(metrics: list[dict[str, float]]) -> None:
    for i, values in enumerate(metrics):
        title = "" if len(metrics) == 1 else f"dataloader {i}: "
        info(title + ", ".join(f"{k} {v:.6g}" for k, v in values.items()))
