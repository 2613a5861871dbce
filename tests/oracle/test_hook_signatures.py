"""The hooks surge declares (`ModelHooks`, `CallbackHooks`) take the parameters real Lightning's
take: the same names, kinds and defaults, read from Lightning's own classes (its `ModelHooks` and
`CheckpointHooks` for the Module, `Callback` for callbacks), so an override written for Lightning
fits surge's and an IDE shows Lightning's arguments."""

from __future__ import annotations

import inspect
import json
from functools import cache

import pytest
from oracle_runs import lightning_prints

from surge.callbacks.base import CALLBACK_HOOKS, CallbackHooks
from surge.module.model_hooks import HOOKS, ModelHooks

DUMP = """
import inspect, json, warnings
warnings.simplefilter("ignore")
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import CheckpointHooks, ModelHooks

def params(cls, name):
    fn = getattr(cls, name, None)
    if fn is None:
        return None
    return [[p.name, p.kind.name, repr(p.default)] for p in inspect.signature(fn).parameters.values()]

module, callback = json.loads(__import__("sys").argv[1])
print(json.dumps({
    "module": {n: params(ModelHooks, n) or params(CheckpointHooks, n) for n in module},
    "callback": {n: params(Callback, n) for n in callback},
}))
"""


@cache
def lightning_hooks() -> dict[str, dict[str, list[list[str]] | None]]:
    names = json.dumps([list(HOOKS), list(CALLBACK_HOOKS)])
    return json.loads(lightning_prints(DUMP, names).strip().splitlines()[-1])


def ours(cls: type, name: str) -> list[list[str]]:
    return [
        [p.name, p.kind.name, repr(p.default)]
        for p in inspect.signature(getattr(cls, name)).parameters.values()
    ]


@pytest.mark.parametrize(
    ("side", "cls", "name"),
    [("module", ModelHooks, n) for n in HOOKS] + [("callback", CallbackHooks, n) for n in CALLBACK_HOOKS],
)
def test_each_hook_takes_lightnings_parameters(side, cls, name):
    theirs = lightning_hooks()[side][name]
    assert theirs is not None, f"{name} is not a Lightning {side} hook"
    assert ours(cls, name) == theirs
