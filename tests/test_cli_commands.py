"""The `surge` commands as a newcomer meets them, each in its own process: one clean line for an
error, options parsed where a user puts them, errors named after the command that was typed,
every argument described in `--help`, and the shipped example's test and predict data."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import script_server
from surge.cli import build_parser, doctor_argv

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PRELOAD = ("torch", "surge")
OWN_PARSER = {"demo", "fit", "validate", "test", "predict"}  # they parse their own arguments


def _surge(*args: str, cwd: Path, pythonpath: tuple[Path, ...] = (), timeout: int = 300):
    """`python ARGS` in a process of its own: forked from a server that imported torch and surge
    (tests/harness/script_server.py), or a new interpreter where the test puts modules ahead of surge's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (*pythonpath, SRC))), "OMP_NUM_THREADS": "1"}
    if not pythonpath:
        return script_server.run(sys.executable, args, cwd=cwd, env=env, preload=PRELOAD, timeout=timeout)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "surge_logs" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("step,epoch,train_loss\n0,0,2.0\n1,0,1.5\n")
    return run


def test_plot_without_matplotlib_says_so_in_one_line(tmp_path):
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib (shim)')\n")
    run = _surge("-m", "surge", "plot", str(_run_dir(tmp_path)), cwd=tmp_path, pythonpath=(shim.parent,))
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "surge plot: error: plotting needs matplotlib: pip install matplotlib (surge-train's 'plot' extra: "
        'pip install -e ".[plot]" in a clone)'
    ]


def test_plot_of_a_folder_without_metrics_says_so_in_one_line(tmp_path):
    run = _surge("-m", "surge", "plot", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert run.returncode == 1
    assert len(run.stderr.splitlines()) == 1 and "has no metrics.csv" in run.stderr
    assert run.stderr.startswith("surge plot: error: ")


@pytest.mark.parametrize(
    ("argv", "own", "script_args", "steps"),
    [
        (["train.py", "--steps", "30"], ["train.py", "--steps", "30"], [], 30),
        (["--steps", "30", "train.py", "--lr", "0.1"], ["--steps", "30", "train.py"], ["--lr", "0.1"], 30),
        (["train.py", "--lr", "0.1", "--steps=7"], ["train.py", "--steps=7"], ["--lr", "0.1"], 7),
        (
            ["train.py", "--steps", "7", "--", "--steps", "2"],
            ["train.py", "--steps", "7"],
            ["--steps", "2"],
            7,
        ),
        (["train.py", "-h"], ["train.py"], ["-h"], 100),
        (["-h"], ["-h"], [], None),
    ],
)
def test_doctor_takes_steps_before_or_after_the_script(argv, own, script_args, steps):
    assert doctor_argv(argv) == (own, script_args)
    if steps is not None:
        args = build_parser().parse_args(["doctor", *own])
        assert (args.script, args.steps) == ("train.py", steps)


def test_doctor_gives_the_script_only_its_own_arguments(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint('argv', sys.argv[1:], 'steps', os.environ['SURGE_DOCTOR'])\n")
    run = _surge("-m", "surge", "doctor", str(script), "--lr", "0.1", "--steps", "30", "--", "--steps", "2",
                 cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "argv ['--lr', '0.1', '--steps', '2'] steps 30" in run.stdout


def test_an_example_error_names_the_command_that_was_typed(tmp_path):
    script = _surge(str(ROOT / "examples" / "digits.py"), "--bogus", cwd=tmp_path)
    assert script.returncode == 2
    assert "digits.py: error: unrecognized arguments: --bogus" in script.stderr
    assert "surge demo" not in script.stderr
    demo = _surge("-m", "surge", "demo", "--bogus", cwd=tmp_path)
    assert demo.returncode == 2 and "surge demo: error: unrecognized arguments: --bogus" in demo.stderr


def _subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_argument_of_every_subcommand_is_described():
    parsers = _subcommand_parsers()
    assert {"doctor", "launch", "slurm", "run", "plot", "export"} <= set(parsers)
    undescribed = [
        f"surge {name} {action.dest}"
        for name, parser in parsers.items()
        if name not in OWN_PARSER
        for action in parser._actions
        if not action.help
    ]
    assert not undescribed, undescribed


def test_the_demo_describes_its_options(tmp_path):
    run = _surge("-m", "surge", "demo", "--help", cwd=tmp_path)
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    for described in ("--epochs EPOCHS epochs to train (default 20)", "32-true (default), bf16-mixed",
                      "--seed SEED seeds the data split"):  # fmt: skip
        assert described in text, run.stdout


@pytest.mark.slow
def test_doctor_on_the_example_runs_it_to_its_end(tmp_path):
    # the doctor ends the fit after 3 steps as an early stop does: validation runs, the script goes on
    run = _surge("-m", "surge", "doctor", str(ROOT / "examples" / "digits.py"), "--steps", "3",
                 cwd=tmp_path, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    output = run.stdout + run.stderr
    assert "surge doctor:" in output and "bottleneck:" in output
    assert "after 1 epoch (3 optimizer steps)" in output and "Best checkpoint:  surge_logs" in output
    assert "Test (held out):  accuracy" in output


def test_the_example_data_holds_out_a_test_split_and_predicts_it():
    from surge.demo import DigitsData

    data = DigitsData()
    data.setup("fit")
    splits = {"train": data.train.tensors, "val": data.val.tensors, "test": data.test.tensors}
    assert {k: len(v[0]) for k, v in splits.items()} == {"train": 1259, "val": 269, "test": 269}
    flat = {k: v[0].flatten(1) for k, v in splits.items()}
    # no test image is also a validation or training image (the digits set has a few duplicates)
    for other in ("train", "val"):
        same = (flat["test"][:, None, :] == flat[other][None, :, :]).all(-1)
        assert same.any(1).float().mean() < 0.02
    assert not torch.equal(flat["test"], flat["val"])
    (predict_images,) = next(iter(data.predict_dataloader()))
    assert torch.equal(predict_images, data.test.tensors[0][: len(predict_images)])


@pytest.mark.slow
def test_predict_runs_from_the_example_config(tmp_path):
    run = _surge("-m", "surge", "predict", "--config", str(ROOT / "examples" / "digits.yaml"),
                 "--trainer.enable_progress_bar", "false", "--predictions_path", "p.pt", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    predictions = torch.cat(torch.load(tmp_path / "p.pt"))
    assert predictions.shape == (269,) and predictions.min() >= 0 and predictions.max() <= 9


def test_a_config_command_without_its_extra_says_so_in_one_line(tmp_path):
    code = "import sys; sys.modules['jsonargparse'] = None\nfrom surge.cli import main\nraise SystemExit(main(['fit', '--help']))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert run.returncode == 1 and run.stdout == ""
    assert (
        run.stderr.count("\n") == 1
        and "surge fit: error: this command needs jsonargparse: pip install" in run.stderr
    )
