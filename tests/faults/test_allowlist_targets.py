"""Under `--allow_class_paths`, a config builds only classes of the types its arguments declare.

The prefixes say whose code a config may name; these payloads stay inside the allowed prefixes and
still ran code before: a function (surge's own `run_script`), a class at an `Any` argument, a
`functools.partial`, a builtin, a class passed through `dict_kwargs` or a `dict[str, Any]`, a function
returning an optimizer given to `--optimizer`, an import string at a `Callable` argument. Each payload
leaves a mark when it runs; refused, exit status 2 names it and no mark appears.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml

from surge.stage_cli.config import SurgeCLI, run_cli

PAYLOADS = """
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from surge.callbacks import Callback
from surge.demo import DigitsCNN

MARK = Path(__file__).with_name("RAN")


def leave_mark(path: str = str(MARK)) -> None:
    Path(path).touch()


def make_sgd(params, lr: float = 0.1) -> torch.optim.SGD:
    leave_mark()
    return torch.optim.SGD(params, lr=lr)


class Marker:
    def __init__(self, path: str = str(MARK)) -> None:
        leave_mark(path)


class MarkingCallback(Callback):
    def __init__(self, note: Any = None) -> None:
        self.note = note


class Model(DigitsCNN):
    def __init__(
        self, extra: Any = None, loss: Optional[Callable] = None, act: Callable = torch.tanh, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.extra, self.loss, self.act = extra, loss, act
"""


@pytest.fixture
def payloads(tmp_path, monkeypatch):
    (tmp_path / "payloads.py").write_text(PAYLOADS)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "evil.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').close()\n")
    return tmp_path


def _config(tmp: Path, model: dict | None = None, **trainer) -> str:
    path = tmp / "run.yaml"
    model = model or {"class_path": "surge.demo.DigitsCNN"}
    path.write_text(yaml.safe_dump({"model": model, "trainer": {"max_epochs": 1, **trainer}}))
    return str(path)


def _model(**init_args) -> dict:
    return {"class_path": "payloads.Model", "init_args": {"channels": 4, **init_args}}


def _refused(tmp: Path, capsys, args: list[str], *words: str) -> None:
    assert run_cli(["fit", *args, "--trainer.fast_dev_run", "true"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err
    time.sleep(0.2)
    assert not (tmp / "RAN").exists()


def test_the_documented_allowlist_never_runs_a_script(payloads, capsys):
    """The issue's payload: `surge`'s own run_script at the `Any`-typed `trainer.plugins`."""
    spec = {"class_path": "surge.lightning.mode.run_script",
            "init_args": {"script": str(payloads / "evil.py"), "args": []}}  # fmt: skip
    config = _config(payloads, plugins=spec)
    _refused(
        payloads,
        capsys,
        ["--config", config, "--allow_class_paths", "surge"],
        "run_script",
        "trainer.plugins",
    )


@pytest.mark.parametrize(
    ("where", "spec", "allow", "words"),
    [
        ("plugins", {"class_path": "payloads.leave_mark"}, "surge,payloads", "names a function, not a class"),
        ("plugins", {"class_path": "payloads.Marker"}, "surge,payloads", "typed Optional[Any], which takes no"),
        ("plugins", {"class_path": "functools.partial", "init_args": {"func": "payloads.leave_mark"}},
         "surge,payloads,functools", "takes no class_path"),
        ("plugins", {"class_path": "builtins.exec", "init_args": {"source": "open('RAN','w')"}},
         "surge,builtins,payloads", "builtin_function_or_method, not a class"),
        ("extra", {"class_path": "payloads.Marker"}, "surge,payloads", "model.init_args.extra"),
        ("compile", {"mode": {"class_path": "payloads.Marker"}}, "surge,payloads", "trainer.compile.mode"),
        ("callbacks", [{"class_path": "payloads.MarkingCallback",
                        "init_args": {"note": {"class_path": "payloads.Marker"}}}],
         "surge,payloads", "trainer.callbacks[0].init_args.note"),
    ],
    ids=["function", "class-at-Any", "partial", "builtin", "nested-init-args", "dict-of-Any", "in-a-callback"],
)  # fmt: skip
def test_an_allowed_prefix_builds_only_classes_of_the_declared_type(
    payloads, capsys, where, spec, allow, words
):
    if where == "extra":
        config = _config(payloads, model=_model(extra=spec))
    else:
        config = _config(payloads, model=_model(), **{where: spec})
    _refused(payloads, capsys, ["--config", config, "--allow_class_paths", allow], words)


def test_dict_kwargs_take_no_class_path(payloads, capsys):
    model = {**_model(), "dict_kwargs": {"unknown": {"class_path": "payloads.Marker"}}}
    config = _config(payloads, model=model)
    _refused(
        payloads,
        capsys,
        ["--config", config, "--allow_class_paths", "surge,payloads"],
        "model.dict_kwargs.unknown",
    )


def test_an_import_string_at_a_callable_argument_is_under_the_allowlist(payloads, capsys):
    config = _config(payloads, model=_model(loss="os.system"))
    _refused(payloads, capsys, ["--config", config, "--allow_class_paths", "surge,payloads"],
             "system' at model.init_args.loss is not allowed")  # fmt: skip


def test_lightning_cli_optimizer_must_be_an_optimizer_class(payloads, capsys):
    from surge.lightning.cli import LightningCLI

    args = ["fit", "--config", _config(payloads), "--optimizer", "payloads.make_sgd",
            "--allow_class_paths", "surge,payloads", "--trainer.fast_dev_run", "true"]  # fmt: skip
    with pytest.raises(SystemExit) as done:
        LightningCLI(args=args)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "payloads.make_sgd" in err and "not a class" in err
    assert not (payloads / "RAN").exists()


def test_configs_of_the_declared_types_still_build(payloads):
    model = _model(extra=None, loss="torch.nn.functional.mse_loss")
    callbacks = [{"class_path": "payloads.MarkingCallback", "init_args": {"note": 3}},
                 {"class_path": "surge.callbacks.EarlyStopping", "init_args": {"monitor": "val_loss"}}]  # fmt: skip
    config = _config(payloads, model=model, callbacks=callbacks)
    cli = SurgeCLI(
        args=["fit", "--config", config, "--allow_class_paths", "surge,payloads,torch.nn.functional"],
        run=False, save_config=False,
    )  # fmt: skip
    assert cli.model.loss.__name__ == "mse_loss" and cli.model.act is torch.tanh  # a default is the code's
    assert [type(c).__name__ for c in cli.trainer.callbacks][:2] == ["MarkingCallback", "EarlyStopping"]


def test_checkpoint_hyper_parameters_build_only_what_the_allowlist_permits(payloads, capsys):
    """`--ckpt_path` puts the checkpoint's hyper-parameters in front of the command line (LightningCLI)."""
    from surge.checkpoint import save_atomic
    from surge.lightning.cli import LightningCLI

    hparams = {"_class_path": "payloads.Model", "channels": 4, "extra": {"class_path": "payloads.Marker"}}
    ckpt = save_atomic({"hyper_parameters": hparams, "state_dict": {}}, payloads / "given.ckpt")
    args = ["fit", "--config", _config(payloads, model=_model()), "--ckpt_path", str(ckpt),
            "--allow_class_paths", "surge,payloads", "--trainer.fast_dev_run", "true"]  # fmt: skip
    with pytest.raises(SystemExit) as done:
        LightningCLI(args=args)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "'payloads.Marker' at model.init_args.extra" in err and "takes no class_path" in err
    time.sleep(0.2)
    assert not (payloads / "RAN").exists()
