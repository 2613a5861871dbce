"""Hostile configs for `surge fit --config`: code named by class_path, alias bombs, bad seeds.

The class_path payloads are real: `subprocess.Popen` runs a script and `logging.FileHandler`
creates a file; with the allowlist neither file may appear, without it both do (current behaviour).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from surge.stage_cli.config import SurgeCLI, run_cli

HOSTILE_MODULE = """
from typing import Any, Optional

from surge.demo import DigitsCNN


class Model(DigitsCNN):
    def __init__(self, extra: Any = None, other: Optional[object] = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.extra, self.other = extra, other
"""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A model whose `Any`/`object` arguments take any class_path, and a script that leaves a mark."""
    (tmp_path / "hostile_model.py").write_text(HOSTILE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    script = tmp_path / "script.sh"
    script.write_text(f"#!/bin/sh\ntouch {tmp_path / 'RAN'}\n")
    script.chmod(0o755)
    return tmp_path


def payload(tmp: Path, kind: str) -> tuple[str, dict, Path]:
    if kind == "popen":
        return (
            "extra",
            {"class_path": "subprocess.Popen", "init_args": {"args": str(tmp / "script.sh")}},
            tmp / "RAN",
        )
    handler = {"class_path": "logging.FileHandler", "init_args": {"filename": str(tmp / "CREATED")}}
    return "other", handler, tmp / "CREATED"


def hostile_config(tmp: Path, key: str, spec: dict) -> str:
    path = tmp / "hostile.yaml"
    model = {"class_path": "hostile_model.Model", "init_args": {"channels": 4, key: spec}}
    path.write_text(yaml.safe_dump({"model": model, "trainer": {"max_epochs": 1}}))
    return str(path)


@pytest.mark.parametrize("kind", ["popen", "file-handler"])
def test_a_class_path_outside_the_allowlist_never_runs(hostile, capsys, kind):
    key, spec, mark = payload(hostile, kind)
    args = [
        "fit",
        "--config",
        hostile_config(hostile, key, spec),
        "--allow_class_paths",
        "surge,hostile_model",
    ]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert f"class_path {spec['class_path']!r}" in err and f"model.init_args.{key}" in err
    assert "hostile.yaml" in err and "['surge', 'hostile_model']" in err and "Traceback" not in err
    time.sleep(0.3)  # what a spawned script would need to leave its mark (it takes milliseconds)
    assert not mark.exists()


@pytest.mark.parametrize("kind", ["popen", "file-handler"])
def test_without_the_allowlist_a_config_runs_what_it_names(hostile, kind):
    key, spec, mark = payload(hostile, kind)
    cli = SurgeCLI(args=["fit", "--config", hostile_config(hostile, key, spec)], run=False, save_config=False)
    built = getattr(cli.model, key)
    if kind == "popen":
        assert built.wait(timeout=10) == 0
    else:
        built.close()
    assert mark.exists()  # so the refusal above is what kept it from running


def _bomb(levels: int) -> str:
    """`levels` lists of 9 aliases of the one below: 9**levels values once expanded."""
    lines = ['  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return (
        "x:\n"
        + "\n".join(lines)
        + f"\nmodel:\n  class_path: surge.demo.DigitsCNN\n  init_args:\n    channels: *l{levels - 1}\n"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [(_bomb(10), "more than 100000 values"), ("model: &a [*a]\n", "inside its own anchor"),
     ("model: " + "[" * 100_000 + "]" * 100_000 + "\n", "more than 100 deep")],
    ids=["billion-laughs", "self-alias", "deep-nesting"],
)  # fmt: skip
def test_a_yaml_bomb_is_refused_before_it_is_expanded(tmp_path, capsys, text, words):
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    started = time.perf_counter()
    assert run_cli(["fit", "--config", str(path)]) == 2  # 9**10 values: expanded, it would never finish
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert "bomb.yaml" in err and words in err and "Traceback" not in err


def test_a_config_that_uses_aliases_modestly_still_loads(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "model:\n  class_path: surge.demo.DigitsCNN\n  init_args: {channels: &c 4}\n"
        "data:\n  class_path: surge.demo.DigitsData\n  init_args: {batch_size: *c}\n"
    )
    cli = SurgeCLI(args=["fit", "--config", str(path)], run=False, save_config=False)
    assert cli.model.hparams.channels == 4 and cli.datamodule.hparams.batch_size == 4


@pytest.mark.parametrize("value", [-1, 2**32])
@pytest.mark.parametrize("where", ["file", "flag"])
def test_seed_everything_out_of_range_is_a_config_error(tmp_path, capsys, value, where):
    config = {"model": {"class_path": "surge.demo.DigitsCNN"}}
    if where == "file":
        config["seed_everything"] = value
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(config))
    flag = ["--seed_everything", str(value)] if where == "flag" else []
    assert run_cli(["fit", "--config", str(path), *flag]) == 2
    err = capsys.readouterr().err
    assert f"seed_everything={value}" in err and "[0, 2**32)" in err and "Traceback" not in err


def test_a_refused_class_path_in_a_file_is_never_imported(hostile, capsys):
    (hostile / "marks_on_import.py").write_text(
        f"open({str(hostile / 'IMPORTED')!r}, 'w').close()\nclass X: ...\n"
    )
    config = hostile_config(hostile, "extra", {"class_path": "marks_on_import.X"})
    assert run_cli(["fit", "--config", config, "--allow_class_paths", "surge,hostile_model"]) == 2
    assert "'marks_on_import.X'" in capsys.readouterr().err
    assert not (hostile / "IMPORTED").exists()  # checked as the file was read, before jsonargparse imports
