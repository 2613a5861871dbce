"""A strategy or a precision written by the user: passed as an object, or registered under a name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

import surge
from helpers import fast_trainer, make_loaders, make_model, params_of, same_params
from surge.config.registry import PRECISIONS, STRATEGIES
from surge.errors import MisconfigurationError
from surge.precision import MixedPrecision, Precision, register_precision
from surge.strategies import FSDPStrategy, Layout, SingleDeviceStrategy, register_strategy
from surge.strategies.fsdp import _fsdp


class CountingStrategy(SingleDeviceStrategy):
    """The single-device strategy, counting what the Trainer asked of it."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {"layout": 0, "setup_module": 0, "step_fn": 0}

    def check_layout(self, layout: Layout) -> None:
        self.calls["layout"] += 1
        self.layout = layout

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self.calls["setup_module"] += 1
        return super().setup_module(module)

    def step_fn(self, module, hook):
        self.calls["step_fn"] += 1
        return super().step_fn(module, hook)


class CountingPrecision(Precision):
    """Full precision whose steps run under its own context; counts contexts entered and backwards."""

    name = "counting-32"

    def __init__(self) -> None:
        self.entered = self.backwards = 0

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        self.entered += 1
        yield

    def forward_context(self) -> contextlib.AbstractContextManager:
        return self._counted()

    def backward(self, loss: torch.Tensor) -> None:
        self.backwards += 1
        loss.backward()


def _fit(**kw) -> tuple[surge.Trainer, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = make_model()
    train, _ = make_loaders(n_train=32, batch_size=8)  # 4 batches
    trainer = fast_trainer(**kw)
    trainer.fit(model, train)
    return trainer, params_of(model)


@pytest.fixture
def reference() -> dict[str, torch.Tensor]:
    return _fit()[1]


def test_a_strategy_object_trains_like_the_built_in_one(reference):
    strategy = CountingStrategy()
    trainer, params = _fit(strategy=strategy)
    assert trainer.strategy is strategy
    assert strategy.calls["layout"] == 1 and strategy.layout.processes == 1
    assert strategy.calls["setup_module"] == 1 and strategy.calls["step_fn"] >= 1
    assert same_params(params, reference)
    assert not same_params(params, params_of(_untrained()))


def test_a_precision_object_runs_every_step_and_backward(reference):
    precision = CountingPrecision()
    trainer, params = _fit(precision=precision)
    assert trainer.precision_plugin is precision
    assert precision.backwards == 4 and precision.entered >= 4
    assert same_params(params, reference)


def test_a_registered_name_is_accepted_as_a_string(reference):
    register_strategy("counting")(CountingStrategy)
    register_precision("counting-32", aliases=("c32",))(CountingPrecision)
    try:
        trainer, params = _fit(strategy="counting", precision="c32")
        assert type(trainer.strategy) is CountingStrategy and trainer.strategy.calls["layout"] == 1
        assert type(trainer.precision_plugin) is CountingPrecision
        assert trainer.precision_plugin.backwards == 4
        assert same_params(params, reference)
        with pytest.raises(MisconfigurationError, match="'counting'"):
            fast_trainer(strategy="nope")
    finally:
        STRATEGIES.remove("counting")
        PRECISIONS.remove("counting-32")
    with pytest.raises(MisconfigurationError, match="strategy='counting' is not valid"):
        fast_trainer(strategy="counting")
    with pytest.raises(MisconfigurationError, match="precision='c32' is not valid"):
        fast_trainer(precision="c32")


@pytest.mark.parametrize(("register", "taken"), [(register_strategy, "ddp"), (register_precision, "bf16")])
def test_a_taken_name_cannot_be_registered_again(register, taken):
    with pytest.raises(MisconfigurationError, match=f"'{taken}' is registered already"):
        register(taken)(CountingStrategy)


def test_fsdp_asks_the_precision_for_its_sharding_needs():
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    fsdp = _fsdp()
    fp16 = MixedPrecision(torch.float16, "cpu")
    strategy = FSDPStrategy()
    strategy.connect_precision(fp16)
    assert isinstance(fp16.scaler, ShardedGradScaler)
    policy = strategy._shard_options(fsdp)["mp_policy"]
    assert isinstance(policy, fsdp.MixedPrecisionPolicy)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.float16, torch.float32)
    strategy.connect_precision(CountingPrecision())  # no loss scaling; parameters gathered as stored
    assert "mp_policy" not in strategy._shard_options(fsdp)


def _untrained() -> torch.nn.Module:
    torch.manual_seed(0)
    return make_model()
