"""Declared once: each Trainer argument is a field of `TrainerConfig` and nothing else declares it
(the Trainer's signature and argument views are generated from the fields); `compile=` is parsed
once, by the config, into the `CompileSpec` every part reads; the Module's and the Callback's hooks
are methods written in a class body, and the lists of their names are read from those classes."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from functools import cache
from pathlib import Path

import pytest

import surge
from surge.accelerators.base import Accelerator
from surge.arguments import TrainerConfig
from surge.arguments.declared import ArgumentView, Resolves
from surge.callbacks.base import CALLBACK_HOOKS, Callback, CallbackHooks
from surge.loggers.base import Logger
from surge.loops.hooks import Hooks
from surge.module import Module
from surge.module.model_hooks import HOOKS, ModelHooks
from surge.precision.base import Precision
from surge.speed.activation_checkpointing import CheckpointPolicy, Policy
from surge.speed.compiling import CompileSpec
from surge.strategies.base import Strategy

SRC = Path(surge.__file__).resolve().parent
FIELDS = [f for f in dataclasses.fields(TrainerConfig) if f.init]
NAMES = {f.name for f in FIELDS}
MANY = 5  # more argument names than this in one signature or class body is a second declaration


@cache
def parsed() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(SRC.rglob("*.py"))]


def test_the_trainer_signature_is_the_config_fields_in_order_with_their_defaults_and_types():
    params = list(inspect.signature(surge.Trainer).parameters.values())
    assert [p.name for p in params] == [f.name for f in FIELDS]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    hints = typing.get_type_hints(surge.Trainer.__init__)
    named = {c.__name__: c for c in (Accelerator, Callback, Logger, Precision, Strategy, Resolves)}
    named |= {"CheckpointPolicy": CheckpointPolicy, "Policy": Policy}
    declared = typing.get_type_hints(TrainerConfig, localns=named)
    for p, f in zip(params, FIELDS, strict=True):
        assert p.default == (f.default if f.default is not dataclasses.MISSING else f.default_factory()), (
            p.name
        )
        assert p.annotation == hints[p.name], p.name
        given = typing.get_args(declared[p.name])[0] if f.type.startswith("Resolves[") else declared[p.name]
        assert p.annotation == given, p.name
    # a Resolves field shows what a caller may pass; the Trainer is typed the same for get_type_hints
    assert params[0].name == "max_epochs" and params[0].annotation == int | None
    assert inspect.signature(surge.Trainer.__init__).parameters["self"].kind.name == "POSITIONAL_OR_KEYWORD"


def test_a_call_the_signature_does_not_take_fails_as_python_would():
    with pytest.raises(
        TypeError, match=r"Trainer.__init__\(\) got an unexpected keyword argument 'max_epoch'"
    ):
        surge.Trainer(max_epoch=1)
    with pytest.raises(TypeError, match=r"Trainer.__init__\(\) too many positional arguments"):
        surge.Trainer(1)  # type: ignore[misc]


def defaulted(node: ast.AST) -> set[str]:
    """The names `node` declares with a default: a function's parameters, a class body's fields."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        with_default = positional[len(positional) - len(a.defaults) :] if a.defaults else []
        with_default += [arg for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        return {arg.arg for arg in with_default}
    if isinstance(node, ast.ClassDef):
        fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and s.value is not None]
        return {s.target.id for s in fields if isinstance(s.target, ast.Name)}
    return set()


def test_no_other_signature_or_class_body_declares_the_arguments_again():
    """A declaration is a name with a default (and a type): more than MANY of the arguments with
    defaults anywhere but TrainerConfig is a copy of it. (A record of resolved values such as the
    fit loop's settings has no defaults and is not counted.)"""
    found = [
        f"{path.relative_to(SRC)}:{node.lineno} {node.name}: {sorted(names)}"
        for path, tree in parsed()
        for node in ast.walk(tree)
        if getattr(node, "name", None) != "TrainerConfig" and len(names := defaulted(node) & NAMES) > MANY
    ]
    assert not found, "Trainer arguments declared outside TrainerConfig:\n" + "\n".join(found)


def test_the_check_above_catches_a_copied_signature_or_dataclass():
    names = sorted(NAMES)[: MANY + 1]
    copied = ast.parse("def __init__(self, *, " + ", ".join(f"{n}: int = 1" for n in names) + "): ...").body[
        0
    ]
    fields = ast.parse("class Copy:\n" + "".join(f"    {n}: int = 1\n" for n in names)).body[0]
    record = ast.parse("class Record:\n" + "".join(f"    {n}: int\n" for n in names)).body[0]
    assert len(defaulted(copied) & NAMES) > MANY and len(defaulted(fields) & NAMES) > MANY
    assert not defaulted(record)


def test_the_trainers_argument_views_are_config_fields_and_give_the_validated_value():
    views = {
        name
        for klass in surge.Trainer.__mro__
        for name, v in vars(klass).items()
        if isinstance(v, ArgumentView)
    }
    assert views and views <= NAMES
    trainer = surge.Trainer(max_time="00:00:01:00", limit_val_batches=None, fast_dev_run=False, logger=False)
    assert trainer.max_time.total_seconds() == 60 and trainer.limit_val_batches == 1.0
    assert (
        trainer.max_epochs == -1 and trainer.fast_dev_run == 0 and isinstance(trainer.default_root_dir, str)
    )
    assert (
        surge.Trainer(logger=False).max_epochs == 1000 and surge.Trainer(fast_dev_run=True).fast_dev_run == 1
    )
    with pytest.raises(AttributeError, match="max_steps"):
        trainer.max_steps = 3  # type: ignore[misc]  # read-only, as the property it replaces


def test_compile_is_parsed_once_by_the_config_into_a_frozen_spec():
    spec = TrainerConfig(compile={"scope": "step", "backend": "eager"}).compile
    assert spec == CompileSpec("step", {"backend": "eager"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.scope = "forward"  # type: ignore[misc]
    assert TrainerConfig(compile=True).compile == CompileSpec("forward")
    assert TrainerConfig().compile is None
    callers = sorted(
        str(path.relative_to(SRC))
        for path, tree in parsed()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "compile_spec"
    )
    assert callers == ["arguments/__init__.py"], callers


def test_no_part_reads_the_compile_argument_as_given():
    """What the parts read is the spec: none compares `x.compile` with a literal or tests its type."""
    found = []
    for path, tree in parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                reads = any(isinstance(s, ast.Attribute) and s.attr == "compile" for s in sides)
                if reads and any(isinstance(s, ast.Constant) and s.value is not None for s in sides):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("isinstance", "bool")
                and any(isinstance(a, ast.Attribute) and a.attr == "compile" for a in node.args)
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, found


@pytest.mark.parametrize(
    ("names", "body", "base"), [(HOOKS, ModelHooks, Module), (CALLBACK_HOOKS, CallbackHooks, Callback)]
)
def test_hooks_are_functions_written_in_a_class_body_and_the_names_are_read_from_it(names, body, base):
    assert len(names) >= 32 and len(set(names)) == len(names)
    for name in names:
        fn = vars(body)[name]
        assert inspect.isfunction(fn), name
        assert getattr(base, name) is fn, name  # nothing in between replaces the declaration
        assert fn.__code__.co_filename.endswith(".py") and fn.__qualname__ == f"{body.__name__}.{name}"
    source = Path(inspect.getsourcefile(body)).read_text()  # no loop sets hooks on the class
    assert "setattr(" not in source


def test_only_overridden_hooks_are_called():
    class Quiet(Module):
        def training_step(self, batch, batch_idx): ...

    class Loud(Quiet):
        def on_train_epoch_end(self) -> None: ...

    class Watch(Callback):
        def on_fit_start(self, trainer, pl_module) -> None: ...

    quiet = Hooks(None, Quiet(), [Callback()])
    assert not set(quiet.module_fns) & set(HOOKS) and not quiet.callback_fns
    loud = Hooks(None, Loud(), [Watch(), Callback()])
    assert set(loud.module_fns) & set(HOOKS) == {"on_train_epoch_end"} and set(loud.callback_fns) == {
        "on_fit_start"
    }
