"""`surge fit|validate|test|predict --config`: typed configs, overrides, merged config, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import script_server
from surge.callbacks import EarlyStopping
from surge.cli import main
from surge.demo import DigitsCNN, DigitsData
from surge.loggers import CSVLogger
from surge.stage_cli.config import SurgeCLI, run_cli

SRC = Path(__file__).resolve().parents[1] / "src"
TINY = {
    "seed_everything": 0,
    "model": {"class_path": "surge.demo.DigitsCNN", "init_args": {"channels": 4}},
    "data": {"class_path": "surge.demo.DigitsData", "init_args": {"batch_size": 32}},
    "trainer": {
        "max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1, "num_sanity_val_steps": 0,
        "enable_progress_bar": False, "enable_model_summary": False,
    },
}  # fmt: skip


def write_config(tmp_path: Path, **sections) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**TINY, **sections}))
    return str(path)


def test_fit_from_a_config_trains_and_saves_the_merged_config(tmp_path):
    cli = SurgeCLI(args=["fit", "--config", write_config(tmp_path)])
    assert cli.trainer.global_step == 2 and isinstance(cli.model, DigitsCNN)
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())
    assert saved["model"]["init_args"]["channels"] == 4 and saved["trainer"]["limit_train_batches"] == 2


def test_dotted_overrides_win_over_the_file(tmp_path):
    args = ["fit", "--config", write_config(tmp_path), "--trainer.max_epochs", "5",
            "--model.init_args.lr", "0.01", "--data.init_args.batch_size", "16"]  # fmt: skip
    cli = SurgeCLI(args=args, run=False)
    assert cli.trainer.max_epochs == 5
    assert cli.model.hparams.lr == 0.01 and cli.model.hparams.channels == 4
    assert cli.datamodule.hparams.batch_size == 16


def test_callbacks_and_loggers_come_from_class_path_lists(tmp_path):
    trainer = {**TINY["trainer"],
               "callbacks": [{"class_path": "surge.callbacks.EarlyStopping", "init_args": {"monitor": "val_acc", "mode": "max"}}],
               "logger": [{"class_path": "surge.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path / "logs")}}]}  # fmt: skip
    cli = SurgeCLI(args=["fit", "--config", write_config(tmp_path, trainer=trainer)], run=False)
    stopper = cli.trainer.early_stopping_callback
    assert isinstance(stopper, EarlyStopping) and stopper.monitor == "val_acc"
    assert isinstance(cli.trainer.logger, CSVLogger)


def test_a_short_class_path_names_any_callback_logger_strategy_or_profiler(tmp_path):
    """In a fresh interpreter, where no callback, logger, strategy or profiler module was imported
    yet (their packages load a name when first used): a short class_path still names any of them."""
    trainer = {**TINY["trainer"], "default_root_dir": str(tmp_path),
               "callbacks": [{"class_path": "StochasticWeightAveraging", "init_args": {"swa_lrs": 0.01}}],
               "logger": {"class_path": "TensorBoardLogger", "init_args": {"save_dir": str(tmp_path)}},
               "strategy": {"class_path": "SingleDeviceStrategy"}, "profiler": {"class_path": "AdvancedProfiler"}}  # fmt: skip
    code = (
        "import sys\nfrom surge.stage_cli.config import SurgeCLI\n"
        "t = SurgeCLI(args=['fit', '--config', sys.argv[1], '--trainer.callbacks+=LearningRateMonitor'], run=False).trainer\n"
        "print(*(type(x).__name__ for x in (*t.callbacks, t.logger, t.strategy, t.profiler)))\n"
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    config = write_config(tmp_path, trainer=trainer)
    out = subprocess.run(
        [sys.executable, "-c", code, config], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    names = out.stdout.split()
    assert {"StochasticWeightAveraging", "LearningRateMonitor", "TensorBoardLogger"} <= set(names), names
    assert names[-2:] == ["SingleDeviceStrategy", "AdvancedProfiler"], names


def test_print_config_prints_yaml_that_round_trips(tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(["fit", "--config", config, "--trainer.max_epochs", "3", "--print_config"]) == 0
    printed = capsys.readouterr().out
    merged = yaml.safe_load(printed)
    assert merged["trainer"]["max_epochs"] == 3 and merged["model"]["init_args"]["dropout"] == 0.25
    (tmp_path / "printed.yaml").write_text(printed)
    assert main(["fit", "--config", str(tmp_path / "printed.yaml"), "--print_config"]) == 0
    assert capsys.readouterr().out == printed


@pytest.mark.parametrize(
    ("where", "key"),
    [("file", "max_epoch"), ("flag", "trainer.max_epoch"), ("model", "lrr")],
)
def test_an_unknown_key_is_refused_by_name(tmp_path, capsys, where, key):
    args = ["fit"]
    if where == "file":
        args += ["--config", write_config(tmp_path, trainer={**TINY["trainer"], "max_epoch": 2})]
    elif where == "flag":
        args += ["--config", write_config(tmp_path), "--trainer.max_epoch", "2"]  # no silent abbreviation
    else:
        args += [
            "--config",
            write_config(tmp_path, model={"class_path": "surge.demo.DigitsCNN", "init_args": {"lrr": 1}}),
        ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert key in err and "surge fit: error" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--trainer.max_epochs", "abc", "trainer.max_epochs"), ("--trainer.precision", "17", "precision"),
     ("--model.init_args.lr", "fast", "lr")],
)  # fmt: skip
def test_a_wrong_type_is_named(tmp_path, capsys, flag, value, named):
    assert main(["fit", "--config", write_config(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err
    assert named in err and value in err and "Traceback" not in err


def test_validate_and_test_load_the_checkpoint(tmp_path, capsys):
    config = write_config(tmp_path)
    fitted = SurgeCLI(args=["fit", "--config", config])
    ckpt = fitted.trainer.checkpoint_callback.best_model_path
    expected = fitted.trainer.callback_metrics["val_acc"].item()
    common = ["--config", config, "--ckpt_path", str(ckpt), "--seed_everything", "1"]  # other random init
    validated = SurgeCLI(args=["validate", *common]).result[0]
    tested = SurgeCLI(args=["test", *common, "--trainer.limit_test_batches", "1"]).result[0]
    data = DigitsData(
        batch_size=32
    )  # the test split is held out: its accuracy, by hand, with the saved weights
    data.setup("test")
    x, y = next(iter(data.test_dataloader()))
    with torch.no_grad():
        expected_test = (DigitsCNN.load_from_checkpoint(ckpt).eval()(x).argmax(1) == y).float().mean().item()
    assert validated["val_acc"] == pytest.approx(expected) and tested["test_acc"] == pytest.approx(
        expected_test
    )
    assert (
        main(["test", "--config", config, "--ckpt_path", str(tmp_path / "gone.ckpt")]) == 1
    )  # the run failed
    assert "gone.ckpt" in capsys.readouterr().err


def test_a_script_fixes_its_classes(tmp_path):
    args = ["fit", "--model.lr", "0.05", "--data.batch_size", "8", "--trainer.max_epochs", "2"]
    cli = SurgeCLI(DigitsCNN, DigitsData, args=args, run=False)
    assert cli.model.hparams.lr == 0.05 and cli.datamodule.hparams.batch_size == 8
    assert cli.trainer.max_epochs == 2


def test_the_surge_command_exits_non_zero_on_a_bad_config(tmp_path):
    config = write_config(tmp_path, trainer={**TINY["trainer"], "max_epoch": 2})
    env = {**os.environ, "PYTHONPATH": str(SRC)}  # this checkout's surge, from any working directory
    # a process of its own, forked from a server that imported torch and surge (tests/harness/script_server.py)
    argv = ["-m", "surge", "fit", "--config", config]
    proc = script_server.run(sys.executable, argv, cwd=tmp_path, env=env, preload=("torch", "surge"))
    assert proc.returncode == 2 and "max_epoch" in proc.stderr and "Traceback" not in proc.stderr


# -- the class_path allowlist (a config is code; --allow_class_paths limits what it may name) ----
LOGGER = {"class_path": "surge.loggers.CSVLogger", "init_args": {"save_dir": "logs"}}
STOPPER = {"class_path": "surge.callbacks.EarlyStopping", "init_args": {"monitor": "val_acc", "mode": "max"}}


def refused(capsys, args, **kwargs) -> str:
    assert run_cli(args, **kwargs) == 2
    err = capsys.readouterr().err
    assert "not allowed" in err and "Traceback" not in err
    return err


def test_allowed_class_paths_still_build(tmp_path):
    config = write_config(tmp_path, trainer={**TINY["trainer"], "callbacks": [STOPPER], "logger": LOGGER})
    args = ["fit", "--config", config, "--allow_class_paths", "surge.demo,surge.callbacks,surge.loggers"]
    cli = SurgeCLI(args=args, run=False)
    assert isinstance(cli.model, DigitsCNN) and isinstance(cli.trainer.early_stopping_callback, EarlyStopping)
    assert isinstance(cli.trainer.logger, CSVLogger)
    assert cli.class_path_policy.prefixes == ("surge.demo", "surge.callbacks", "surge.loggers")


def test_a_nested_class_path_outside_the_allowlist_is_refused_naming_where(tmp_path, capsys):
    config = write_config(tmp_path, trainer={**TINY["trainer"], "callbacks": [STOPPER]})
    err = refused(capsys, ["fit", "--config", config, "--allow_class_paths=surge.demo"])
    assert "'surge.callbacks.EarlyStopping'" in err and "trainer.callbacks[0]" in err
    assert "run.yaml" in err and "['surge.demo']" in err


@pytest.mark.parametrize(
    "override",
    [["--trainer.logger", "surge.loggers.CSVLogger"], ["--trainer.logger", "CSVLogger"],
     ["--trainer.logger", json.dumps(LOGGER)], ["--trainer.logger.class_path", "surge.loggers.CSVLogger"]],
    ids=["class-path", "bare-name", "inline-yaml", "dotted-class-path"],
)  # fmt: skip
def test_a_command_line_override_outside_the_allowlist_is_refused(tmp_path, capsys, override):
    args = ["fit", "--config", write_config(tmp_path), "--allow_class_paths", "surge.demo", *override]
    err = refused(capsys, args)
    assert "'surge.loggers.CSVLogger'" in err and "['surge.demo']" in err
    assert not (tmp_path / "logs").exists()


def test_an_allowed_name_that_re_exports_another_module_is_refused(tmp_path, capsys):
    # surge.demo does `from torch.utils.data import DataLoader`: the name is under the prefix, the class is not
    config = write_config(
        tmp_path, trainer={**TINY["trainer"], "callbacks": [{"class_path": "surge.demo.DataLoader"}]}
    )
    err = refused(capsys, ["fit", "--config", config, "--allow_class_paths", "surge.demo"])
    assert "surge.demo.DataLoader" in err and "torch.utils.data.dataloader.DataLoader" in err


def test_the_constructor_and_the_flag_must_both_allow(tmp_path, capsys):
    config = write_config(tmp_path, trainer={**TINY["trainer"], "callbacks": [STOPPER]})
    args = ["fit", "--config", config]
    assert SurgeCLI(args=args, allow_class_paths=["surge"], run=False).trainer.early_stopping_callback
    refused(capsys, [*args, "--allow_class_paths", "surge.demo"], allow_class_paths=["surge"])  # narrows
    refused(capsys, [*args, "--allow_class_paths", "surge"], allow_class_paths="surge.demo")  # never widens


def test_a_config_cannot_set_its_own_allowlist(tmp_path, capsys):
    config = write_config(tmp_path, allow_class_paths=["subprocess"])
    assert run_cli(["fit", "--config", config]) == 2
    assert "allow_class_paths" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["torch optim", "torch..optim"])
def test_a_malformed_allowlist_is_refused_by_name(tmp_path, capsys, value):
    assert run_cli(["fit", "--config", write_config(tmp_path), "--allow_class_paths", value]) == 2
    err = capsys.readouterr().err
    assert "allow_class_paths" in err and repr(value.split(",")[0]) in err


def test_help_says_a_config_is_code(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "A config file is code" in text and "--allow_class_paths PREFIX" in text


def test_a_resumed_fit_continues_the_run_directory_and_keeps_its_config(tmp_path):
    config = write_config(tmp_path, trainer={**TINY["trainer"], "default_root_dir": str(tmp_path / "runs")})
    first = SurgeCLI(args=["fit", "--config", config])
    run = Path(first.trainer.log_dir)
    ckpt = first.trainer.checkpoint_callback.best_model_path
    original = (run / "config.yaml").read_text()
    resumed = SurgeCLI(args=["fit", "--config", config, "--ckpt_path", ckpt, "--trainer.max_epochs", "2"])
    assert Path(resumed.trainer.log_dir) == run  # the same version_N, not a new one
    assert (run / "config.yaml").read_text() == original  # the first config is kept...
    assert "max_epochs: 2" in (run / "config.resume-1.yaml").read_text()  # ...and the resume's beside it
    assert resumed.trainer.global_step == 4
