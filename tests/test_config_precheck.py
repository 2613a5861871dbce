"""`surge fit|validate|test|predict` find a config's mistakes before torch loads (stage_cli/precheck.py):
each named with its fix, in a process that never imports torch; the check never refuses a config
the full parse accepts, and knows exactly the sections and Trainer arguments that parse knows."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from surge.stage_cli.precheck import config_mistake, sections

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GOOD = {
    "seed_everything": 0,
    "model": {"class_path": "surge.demo.DigitsCNN", "init_args": {"channels": 4}},
    "data": {"class_path": "surge.demo.DigitsData", "init_args": {"batch_size": 32}},
    "trainer": {"max_epochs": 1, "limit_train_batches": 2, "enable_progress_bar": False},
}

# (what the config file holds or None, the flags, phrases the message must hold: problem and fix)
MISTAKES = {
    "misspelt trainer key": (
        {**GOOD, "trainer": {"max_epoch": 2}}, [], ["'max_epoch' is not a Trainer argument", "'max_epochs'"]
    ),
    "misspelt section": (
        {"model": GOOD["model"], "trainr": {"max_epochs": 1}}, [], ["'trainr' is not a section", "'trainer'"]
    ),
    "section cut short": ({**GOOD, "seed": 3}, [], ["'seed' is not a section", "'seed_everything'"]),
    "misspelt trainer flag": (GOOD, ["--trainer.max_epoch", "3"], ["--trainer.max_epoch", "'max_epochs'"]),
    "flag cut short": (GOOD, ["--seed=3"], ["no option --seed", "'--seed_everything'"]),
    "missing package": (
        {**GOOD, "model": {"class_path": "my_modle.Net"}}, [], ["no module named 'my_modle'", "my_modle.py"]
    ),
    "missing package in a flag": (GOOD, ["--model", "my_modle.Net"], ["--model", "no module named 'my_modle'"]),
    "missing callback package": (
        {**GOOD, "trainer": {"callbacks": [{"class_path": "surge_callbacks.Stop"}]}}, [],
        ["trainer.callbacks[0].class_path", "'surge_callbacks'"],
    ),
    "misspelt dotted key": (
        {"model": GOOD["model"], "trainer.max_epoch": 2}, [], ["'max_epoch' is not a Trainer argument", "'max_epochs'"]
    ),
    "missing subclass file": (GOOD, ["--data", "data.yaml"], ["--data 'data.yaml': no such file in the current directory"]),
    "missing package, short form": (
        {**GOOD, "model": "my_modle.Net"}, [], ["model 'my_modle.Net'", "no module named 'my_modle'"]
    ),
    "config as a list": (["model", "trainer"], [], ["a config is a mapping of sections", "not a list"]),
    "trainer as a number": ({**GOOD, "trainer": 5}, [], ["trainer must be a mapping", "max_epochs: 5"]),
}  # fmt: skip
REFUSED_BY_BOTH = [name for name in MISTAKES if name != "trainer as a number"]


def _args(tmp_path: Path, config, flags: list[str]) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["--config", str(path), *flags]


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_is_named_with_its_fix(tmp_path, name):
    config, flags, phrases = MISTAKES[name]
    message = config_mistake("fit", _args(tmp_path, config, flags))
    assert message is not None and all(p in message for p in phrases), message


def test_a_file_that_is_missing_or_not_yaml_is_named_with_its_place(tmp_path):
    missing = config_mistake("fit", ["--config", "nothere.yaml"])
    assert "nothere.yaml: no such file" in missing and os.getcwd() in missing
    for given in (["--config"], ["--config="], ["--config", ""]):
        assert "--config needs a value: a config file" in config_mistake("fit", given)
    (tmp_path / "broken.yaml").write_text("trainer:\n  max_epochs: [1, 2\n")
    broken = config_mistake("test", ["--config", str(tmp_path / "broken.yaml")])
    assert "broken.yaml: not valid YAML at line 3" in broken
    (tmp_path / "latin.yaml").write_bytes("# café\n".encode("latin-1"))
    latin = config_mistake("fit", ["--config", str(tmp_path / "latin.yaml")])
    assert "latin.yaml: not UTF-8 text" in latin and "save it as UTF-8" in latin


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdef", "bcdefg", strict=True)
    )
    (tmp_path / "bomb.yaml").write_text(bomb)
    assert "alias" in config_mistake("fit", ["--config", str(tmp_path / "bomb.yaml")])


@pytest.mark.parametrize("name", REFUSED_BY_BOTH)
def test_the_full_parse_refuses_each_of_them_too(tmp_path, capsys, name):
    """The early check only answers sooner: without it (a script's SurgeCLI) the same line is refused."""
    from surge.stage_cli.config import run_cli

    config, flags, _ = MISTAKES[name]
    assert run_cli(["fit", *_args(tmp_path, config, flags)]) == 2
    assert "error" in capsys.readouterr().err


def test_the_command_answers_without_importing_torch(tmp_path):
    """Every mistake above, through `surge fit` in a fresh interpreter: exit 2, the message, no torch."""
    argvs = []
    for i, (config, flags, _) in enumerate(MISTAKES.values()):
        (tmp_path / f"run{i}.yaml").write_text(yaml.safe_dump(config))
        argvs.append(["fit", "--config", str(tmp_path / f"run{i}.yaml"), *flags])
    code = (
        "import sys\nfrom surge.cli import main\n"
        f"codes = [main(argv) for argv in {argvs!r}]\n"
        "print(codes, 'torch' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip
    assert run.stdout.strip() == f"{[2] * len(MISTAKES)} False", run.stderr
    assert run.stderr.count("surge fit: error:") == len(MISTAKES) and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--trainer.max_epochs", "5", "--model.init_args.lr", "0.01", "--data.init_args.batch_size=16"],
        ["--print_config=skip_null", "--seed_everything", "1", "--ckpt_path", "last"],
        ["--trainer.callbacks+=surge.callbacks.EarlyStopping", "--trainer.callbacks.monitor", "val_loss"],
        ["--model", "surge.demo.DigitsCNN", "--allow_class_paths", "surge"],
        ["--model.help", "surge.demo.DigitsCNN"],
        ["--config", "trainer: {max_epochs: 2}"],  # a config written inline
    ],
)
def test_valid_command_lines_pass(tmp_path, flags):
    assert config_mistake("fit", _args(tmp_path, GOOD, flags)) is None


def test_the_examples_pass_and_an_empty_or_scalar_file_is_named(tmp_path):
    for path in EXAMPLES.glob("*.yaml"):
        assert config_mistake("fit", ["--config", str(path)]) is None, path
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")  # refused by the full parse too
    assert "empty.yaml: holds no config (it is empty)" in config_mistake(
        "fit", ["--config", str(tmp_path / "empty.yaml")]
    )
    from surge.stage_cli.config import run_cli

    assert run_cli(["fit", "--config", str(tmp_path / "empty.yaml"), "--model", "surge.demo.DigitsCNN"]) == 2
    (tmp_path / "word.yaml").write_text("hello\n")
    assert "a config is a mapping of sections" in config_mistake(
        "fit", ["--config", str(tmp_path / "word.yaml")]
    )
    assert config_mistake("predict", _args(tmp_path, {**GOOD, "predictions_path": "p.pt"}, [])) is None
    assert "predictions_path" in config_mistake("fit", _args(tmp_path, {**GOOD, "predictions_path": "p"}, []))


@pytest.mark.parametrize("command", ["fit", "validate", "test", "predict"])
def test_it_knows_exactly_what_the_full_parser_knows(tmp_path, command):
    """The sections and Trainer arguments checked early are those of the parser that runs the command."""
    from surge.stage_cli.config import SurgeCLI

    cli = SurgeCLI(args=[command, *_args(tmp_path, GOOD, [])], run=False)
    options = [opt[2:] for opt in cli._parsers[command]._option_string_actions if opt.startswith("--")]
    tops = {opt.split(".")[0] for opt in options} - {"config", "print_config", "help"}
    trainer = {opt.split(".")[1].rstrip("+") for opt in options if opt.startswith("trainer.")} - {"help"}
    from surge.config.meanings import names

    assert tops == set(sections(command))
    assert trainer == set(names())


def test_what_the_full_parse_also_takes_passes(tmp_path, monkeypatch):
    """Dotted keys (at the top and inside trainer), jsonargparse's own keys, and a subclass given
    as a file (`--model model.yaml`, whose name looks like a module path)."""
    keys = {
        "__path__": "run.yaml",
        "model.class_path": "surge.demo.DigitsCNN",
        "model.init_args.channels": 4,
        "trainer.max_epochs": 1,
        "trainer": {"logger.class_path": "surge.loggers.CSVLogger", "callbacks+": []},
    }
    assert config_mistake("fit", _args(tmp_path, keys, [])) is None
    assert config_mistake("fit", ["--config", "ckpt_path: 2024-13-01"]) is None  # text, not a date
    monkeypatch.chdir(tmp_path)
    Path("model.yaml").write_text(yaml.safe_dump(GOOD["model"]))
    assert config_mistake("fit", ["--model", "model.yaml", "--data=model.yaml"]) is None
    Path("sub").mkdir()  # a subclass's file is found beside the config that names it
    Path("sub/net.yaml").write_text(yaml.safe_dump(GOOD["model"]))
    Path("sub/run.yaml").write_text("model: net.yaml\n")
    assert config_mistake("fit", ["--config", "sub/run.yaml"]) is None
    monkeypatch.setenv("HOME", str(tmp_path))  # `--config=~/run.yaml`: no shell expands that `~`
    Path("outer.yaml").write_text("config: run.yaml\n")  # a config that reads another
    assert config_mistake("fit", ["--config=~/run.yaml", "--config", "outer.yaml"]) is None


@pytest.mark.skipif(importlib.util.find_spec("lightning") is not None, reason="Lightning is installed")
def test_a_lightning_class_path_is_pointed_at_surges(tmp_path):
    cb = {"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "val_loss"}}
    message = config_mistake("fit", _args(tmp_path, {**GOOD, "trainer": {"callbacks": [cb]}}, []))
    assert "Lightning is not installed" in message and "surge.lightning.callbacks.EarlyStopping" in message


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_pipe_is_left_whole_to_the_full_parse_and_a_folder_is_named(tmp_path):
    """`--config <(...)` is a pipe: read here, the full parse would find it empty."""
    read, write = os.pipe()
    os.write(write, b"trainer: {max_epochs: 1}\n")
    os.close(write)
    try:
        assert config_mistake("fit", ["--config", f"/dev/fd/{read}"]) is None
        assert os.read(read, 100) == b"trainer: {max_epochs: 1}\n"
    finally:
        os.close(read)
    assert "a folder, not a config file" in config_mistake("fit", ["--config", str(tmp_path)])
