"""Config-driven runs: `surge fit|validate|test|predict --config run.yaml`, built on jsonargparse.

A config has three sections, each type-checked against a signature before anything runs:

    model:   {class_path: my_pkg.MyModel, init_args: {lr: 0.01}}   # a surge.Module subclass
    data:    {class_path: my_pkg.MyData, init_args: {...}}        # a surge.DataModule (optional)
    trainer: {max_epochs: 5, callbacks: [{class_path: ..., init_args: ...}]}   # Trainer(...)

plus `ckpt_path` and `seed_everything`. Dotted flags override it (`--trainer.max_epochs 5
--model.init_args.lr 0.01`), `--print_config` prints the merged result as YAML (a config that
reproduces the run), and a fit saves that YAML as `config.yaml` in the run directory.
A script gets the same command line with `SurgeCLI(MyModel, MyData)`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .callbacks.base import Callback
from .datamodule import DataModule
from .errors import SurgeError
from .module import Module
from .rank_zero import info
from .trainer import Trainer

COMMANDS = {
    "fit": "train the model (resume with --ckpt_path)",
    "validate": "run validation_step over the validation data (weights from --ckpt_path)",
    "test": "run test_step over the test data (weights from --ckpt_path)",
    "predict": "run predict_step over the predict data (weights from --ckpt_path)",
}
CONFIG_ERROR, RUN_ERROR = 2, 1  # exit codes: the config was refused / the run failed


class SaveConfig(Callback):
    """Writes the merged config to `<log_dir>/config.yaml` when a fit starts (rank zero)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit" and trainer.is_global_zero:
            path = Path(trainer.log_dir) / "config.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.text)


class SurgeCLI:
    """Parse a config-driven command line, build the model, data and Trainer, and run the command.

    `SurgeCLI()` takes any `surge.Module` by `class_path`; `SurgeCLI(MyModel, MyData)` fixes the
    classes, and the sections hold their init arguments directly (`model: {lr: 0.01}`) unless
    `subclass_mode_model`/`subclass_mode_data` ask for `class_path` (subclasses of the given one).
    A refused config or a failed run exits with a message on stderr (status 2 or 1), no traceback.
    `run=False` only builds: `cli.model`, `cli.datamodule`, `cli.trainer`, `cli.config`.
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
    ) -> None:
        self._model_class = model_class
        self._data_class = datamodule_class
        self._model_subclass = model_class is None or subclass_mode_model
        self._data_subclass = datamodule_class is None or subclass_mode_data
        self.parser = self._root_parser(prog)
        self.subcommand, self.config = self._parse(list(sys.argv[1:] if args is None else args))
        self.model, self.datamodule, self.trainer = self._instantiate(save_config)
        self.result: Any = self._run() if run else None

    # -- the parsers -------------------------------------------------------------------------
    def _root_parser(self, prog: str | None) -> Any:
        parser = _new_parser(prog=prog, description="Run surge from a config: model, data and trainer.")
        commands = parser.add_subcommands(required=True, dest="subcommand")
        self._parsers = {name: self._command_parser(name) for name in COMMANDS}
        for name, help_text in COMMANDS.items():
            commands.add_subcommand(name, self._parsers[name], help=help_text)
        return parser

    def _command_parser(self, command: str) -> Any:
        from jsonargparse import ActionConfigFile

        parser = _new_parser(description=COMMANDS[command])
        parser.add_argument(
            "--config", action=ActionConfigFile, help="a YAML config (several merge in order)"
        )
        if self._model_subclass:
            parser.add_subclass_arguments(self._model_class or Module, "model", required=True)
        else:
            parser.add_class_arguments(self._model_class, "model")
        if self._data_subclass:
            parser.add_subclass_arguments(self._data_class or DataModule, "data", required=False)
        else:
            parser.add_class_arguments(self._data_class, "data")
        parser.add_class_arguments(Trainer, "trainer")
        parser.add_argument(
            "--ckpt_path", type=str | None, default=None,
            help='a checkpoint, "last" or "best": resume a fit, or the weights to evaluate',
        )  # fmt: skip
        parser.add_argument(
            "--seed_everything", type=int | None, default=None, help="seed python, numpy and torch first"
        )
        if command == "predict":
            parser.add_argument(
                "--predictions_path", type=str | None, default=None, help="torch.save the predictions here"
            )
        return parser

    def _parse(self, args: list[str]) -> tuple[str, Any]:
        from jsonargparse import ArgumentError

        command = args[0] if args and args[0] in COMMANDS else None
        try:
            cfg = self.parser.parse_args(args)
        except ArgumentError as err:
            _fail(self.parser.prog, command, str(err), CONFIG_ERROR)
        return cfg.subcommand, cfg[cfg.subcommand]

    def _instantiate(self, save_config: bool) -> tuple[Module, DataModule | None, Trainer]:
        parser = self._parsers[self.subcommand]
        cfg = self.config
        if cfg.seed_everything is not None:
            from .seed import seed_everything

            seed_everything(cfg.seed_everything)
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
        try:
            built = instantiate(cfg)
        except (SurgeError, TypeError, ValueError) as err:
            _fail(self.parser.prog, self.subcommand, f"{type(err).__name__}: {err}", CONFIG_ERROR)
        trainer = built.trainer
        if save_config and self.subcommand == "fit":
            trainer.callbacks.insert(0, SaveConfig(_dump(parser, cfg)))  # the loops bind hooks at fit()
        return built.model, built.data, trainer

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


def _new_parser(**kwargs: Any) -> Any:
    try:
        from jsonargparse import ArgumentParser
    except ImportError:
        raise ImportError(
            "surge fit/validate/test/predict need jsonargparse: pip install surge[cli]"
        ) from None
    # No abbreviations: a misspelt key must be refused, not silently expanded to a real one.
    return ArgumentParser(exit_on_error=False, allow_abbrev=False, **kwargs)


def _dump(parser: Any, cfg: Any) -> str:
    """The config as YAML, `null`s kept (as `--print_config` shows it)."""
    try:
        return parser.dump(cfg, skip_unset=False)  # jsonargparse >= 4.49
    except TypeError:
        return parser.dump(cfg, skip_none=False)


def _fail(prog: str | None, command: str | None, message: str, code: int) -> None:
    where = " ".join(p for p in (prog or "surge", command) if p)
    hint = f"\n(`{where} --help` lists the options; `--print_config` shows the merged config)\n"
    sys.stderr.write(f"{where}: error: {message.strip()}{hint}")
    raise SystemExit(code)


def _report_fit(trainer: Trainer) -> None:
    lines = [f"fit finished: {trainer.current_epoch} epochs, {trainer.global_step} optimizer steps"]
    cb = trainer.checkpoint_callback
    if cb is not None and getattr(cb, "best_model_path", ""):
        lines.append(f"best checkpoint: {cb.best_model_path}")
    if cb is not None and getattr(cb, "last_model_path", ""):
        lines.append(f"last checkpoint: {cb.last_model_path}")
    lines.append(f"run directory:   {trainer.log_dir}")
    info("\n".join(lines))


def _report_metrics(metrics: list[dict[str, float]]) -> None:
    for i, values in enumerate(metrics):
        title = "" if len(metrics) == 1 else f"dataloader {i}: "
        info(title + ", ".join(f"{k} {v:.6g}" for k, v in values.items()))
