"""The division-free backward (`surge.loops.window_backward`): the gradients of `(loss / window).backward()`
bit for bit, for any window and dtype, kept correct when the seed would go stale, and what the fit
loop runs where nothing sees the divided loss."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.loops.window_backward import SeededBackward


def _net(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(dtype)


def _batches(n: int, dtype: torch.dtype = torch.float32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(4, 5, generator=g).to(dtype), torch.randint(0, 3, (4,), generator=g)) for _ in range(n)
    ]


def _grads(net: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in net.parameters()]


def _accumulate(dtype: torch.dtype, window: float, seeded: bool, micro: int = 5) -> list[torch.Tensor]:
    """`micro` micro-batches' gradients accumulated, each loss divided by `window` (or seeded)."""
    net, backward = _net(dtype), SeededBackward()
    for x, y in _batches(micro, dtype):
        loss = F.cross_entropy(net(x), y)
        if seeded:
            backward.run(loss, window)
        else:
            (loss / window if window != 1 else loss).backward()
    return _grads(net)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("window", [1, 2, 3, 4, 5, 7, 12])
def test_the_gradients_are_the_divided_losses_bit_for_bit(dtype, window):
    seeded, divided = _accumulate(dtype, window, True), _accumulate(dtype, window, False)
    for a, b in zip(seeded, divided):
        assert torch.equal(a, b)


def _ops_of(fn: Any) -> list[str]:
    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    with Ops() as ops:
        fn()
    return ops.names


def test_a_kept_seed_costs_one_copy_where_the_division_costs_three_ops():
    net, backward = _net(), SeededBackward()
    (x, y), (x2, y2) = _batches(2)
    backward.run(F.cross_entropy(net(x), y), 4)  # the first makes the seed
    loss, same = (F.cross_entropy(net(x2), y2) for _ in range(2))
    seeded = _ops_of(lambda: backward.run(loss, 4))
    divided = _ops_of(lambda: (same / 4).backward())
    assert [op for op in seeded if "clone" in op] == ["aten.clone.default"]
    assert not [op for op in seeded if "div" in op or "ones_like" in op or "fill" in op], seeded
    assert len(divided) - len(seeded) == 2, (
        divided,
        seeded,
    )  # division, its backward, ones_like; less the copy


class _Doubling(torch.autograd.Function):
    """Its backward writes into the gradient it is handed (allowed, and bad manners)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.mul_(2)


def _seeded_equals_divided(loss_of: Any, window: int, micro: int = 4) -> None:
    """`micro` micro-batches, each loss from `loss_of(net, x, y)`: seeded, the same gradients as divided."""

    def run(seeded: bool) -> list[torch.Tensor]:
        net, backward = _net(), SeededBackward()
        for x, y in _batches(micro):
            loss = loss_of(net, x, y)
            if seeded:
                backward.run(loss, window)
            else:
                (loss / window).backward()
        return _grads(net)

    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)


def test_a_backward_that_writes_into_its_gradient_changes_nothing_for_the_next():
    _seeded_equals_divided(lambda net, x, y: _Doubling.apply(F.cross_entropy(net(x), y)), 3)


def test_a_new_window_dtype_or_shape_makes_a_new_seed():
    net, backward = _net(torch.float64), SeededBackward()
    reference = _net(torch.float64)
    cases = [(3, torch.float64, ()), (3, torch.float32, ()), (2, torch.float32, ()), (2, torch.float32, (1,))]
    for (x, y), (window, dtype, shape) in zip(_batches(len(cases), torch.float64), cases):
        loss = F.cross_entropy(net(x), y).to(dtype).reshape(shape)
        backward.run(loss, window)
        (F.cross_entropy(reference(x), y).to(dtype).reshape(shape) / window).backward()
    for a, b in zip(_grads(net), _grads(reference)):
        assert torch.equal(a, b)


def test_a_loss_of_another_dtype_gets_a_seed_of_its_own_not_a_conversion_per_step():
    net, backward = _net(torch.float64), SeededBackward()
    (x, y), (x2, y2), (x3, y3) = _batches(3, torch.float64)
    backward.run(F.cross_entropy(net(x), y), 3)  # a float64 seed
    backward.run(F.cross_entropy(net(x2), y2).float(), 3)  # float32 from here on: a seed of its own
    loss, same = (F.cross_entropy(net(x3), y3).float() for _ in range(2))
    seed = torch.ones_like(same) / 3
    ops = _ops_of(lambda: backward.run(loss, 3))
    assert ops == _ops_of(lambda: torch.autograd.backward(same, seed.clone()))  # no conversion of a kept seed


class _Marked(torch.Tensor):
    """A Tensor subclass (its `backward` could dispatch its own way): divided as before."""


def test_a_tensor_subclass_loss_takes_the_division():
    net, reference, backward = _net(), _net(), SeededBackward()
    for x, y in _batches(3):
        backward.run(F.cross_entropy(net(x), y).as_subclass(_Marked), 3)
        (F.cross_entropy(reference(x), y) / 3).backward()
    for a, b in zip(_grads(net), _grads(reference)):
        assert torch.equal(a, b)


# -- through the Trainer --------------------------------------------------------------------


class Model(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net, self.batch_idx, self.after_backward = _net(), -1, 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batch_idx = batch_idx
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WithBackwardHook(Model):
    def on_after_backward(self) -> None:
        self.after_backward += 1


def _data(n: int) -> DataLoader:
    xs, ys = zip(*_batches(n))
    return DataLoader(TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=4)


def _hand_written(k: int, n: int) -> torch.nn.Module:
    """The loop an expert writes: each loss divided by its window (the last one may be short)."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    batches = _batches(n)
    for start in range(0, n, k):
        window = batches[start : start + k]
        for x, y in window:
            (F.cross_entropy(net(x), y) / len(window)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return net


def _fit_counting_divisions(trainer: surge.Trainer, module: Model, n: int) -> list[int]:
    """Fit on `n` batches; the batch whose step ran each division (`aten.div`, forward or backward)."""
    divided_at: list[int] = []

    class CountDivisions(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten.div.Tensor:
                divided_at.append(module.batch_idx)
            return func(*args, **(kwargs or {}))

    with CountDivisions():
        trainer.fit(module, _data(n))
    return divided_at


@pytest.mark.parametrize("model", [Model, WithBackwardHook])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_fit_equals_the_hand_written_loop_bit_for_bit(tmp_path, k, model):
    n = 4 * k + 2  # full windows and a short last one
    module = model()
    trainer = surge.Trainer(
        max_epochs=1, accumulate_grad_batches=k, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    divided_at = _fit_counting_divisions(trainer, module, n)
    for a, b in zip(module.net.parameters(), _hand_written(k, n).parameters()):
        assert torch.equal(a, b)
    inside = [
        i for i in divided_at if 0 < i < n - 1
    ]  # (the first step: the FLOP count; the last: the epoch's end)
    if model is WithBackwardHook:  # the hook may look at each micro-batch's gradients: divided, as Lightning
        assert module.after_backward == n
        assert inside == ([] if k == 1 else [i for i in range(1, n - 1) for _ in ("forward", "backward")])
    else:  # one division where a seed is made: the first seeded batch, and a short last window's first
        assert inside == ([] if k == 1 else [1] + ([n - n % k] if n % k else []))


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true", "64-true"])
def test_a_fit_in_another_precision_equals_the_hand_written_loop_bit_for_bit(tmp_path, precision):
    k, n = 3, 8
    dtype = {"bf16-true": torch.bfloat16, "64-true": torch.float64}.get(precision, torch.float32)
    module = Model()
    trainer = surge.Trainer(
        max_epochs=1, accumulate_grad_batches=k, precision=precision, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )  # fmt: skip
    divided_at = _fit_counting_divisions(trainer, module, n)
    net = _net(dtype)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    batches = _batches(n)
    for start in range(0, n, k):
        window = batches[start : start + k]
        for x, y in window:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                loss = F.cross_entropy(net(x.to(dtype)), y)
            (loss / len(window)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(module.net.parameters(), net.parameters()):
        assert torch.equal(a, b)
    assert [i for i in divided_at if 0 < i < n - 1] == [1, 6]  # only where a seed is made (window 3, then 2)


def test_a_loss_of_several_values_is_refused_as_backward_refuses_it():
    net, backward = _net(), SeededBackward()
    (x, y), (x2, y2) = _batches(2)
    backward.run(F.cross_entropy(net(x), y), 2)  # a seed for one value
    with pytest.raises(RuntimeError, match="scalar outputs"):
        backward.run(F.cross_entropy(net(x2), y2, reduction="none"), 2)  # not summed silently


def _offset_loss(
    net: torch.nn.Module, offset: torch.nn.Parameter, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """A loss that reaches `offset` through a view only: autograd hands `offset.grad` a view of the seed
    as it is (no copy), and the next micro-batch accumulates into it in place, mid-backward."""
    return F.cross_entropy(net(x), y) + offset.squeeze()


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_gradient_that_keeps_a_view_of_the_seed_does_not_change_the_others(window):
    def run(seeded: bool) -> list[torch.Tensor]:
        net, offset, backward = _net(), torch.nn.Parameter(torch.zeros(1)), SeededBackward()
        for x, y in _batches(2 * window):
            loss = _offset_loss(net, offset, x, y)
            if seeded:
                backward.run(loss, window)
            else:
                (loss / window if window != 1 else loss).backward()
        return [*_grads(net), offset.grad.clone()]

    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)


def test_a_gradient_written_through_data_after_the_backward_does_not_change_the_next_seed():
    def run(seeded: bool) -> list[torch.Tensor]:
        net, offset, backward = _net(), torch.nn.Parameter(torch.zeros(1)), SeededBackward()
        seen = []
        for x, y in _batches(3):
            loss = _offset_loss(net, offset, x, y)
            if seeded:
                backward.run(loss, 1)
            else:
                loss.backward()
            seen += _grads(net)
            for p in [*net.parameters(), offset]:
                p.grad.data.clamp_(-0.01, 0.01)  # (no version counter moves: `.data`)
                p.grad = None
        return seen

    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)


class WithOffset(Model):
    def __init__(self) -> None:
        super().__init__()
        self.offset = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batch_idx = batch_idx
        return _offset_loss(self.net, self.offset, *batch)


@pytest.mark.parametrize("k", [2, 3])
def test_a_fit_whose_loss_reaches_a_parameter_through_a_view_equals_the_hand_written_loop(tmp_path, k):
    n = 3 * k + 1
    module = WithOffset()
    trainer = surge.Trainer(
        max_epochs=1, accumulate_grad_batches=k, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, _data(n))
    net, offset = _net(), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([*net.parameters(), offset], lr=0.1)
    batches = _batches(n)
    for start in range(0, n, k):
        window = batches[start : start + k]
        for x, y in window:
            (_offset_loss(net, offset, x, y) / len(window)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip([*module.net.parameters(), module.offset], [*net.parameters(), offset]):
        assert torch.equal(a, b)


def test_a_loss_hook_writing_into_its_gradient_through_data_does_not_carry_to_the_next_step():
    def hooked(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(net(x), y)
        loss.register_hook(lambda g: g.data.mul_(2))  # (no version counter moves: `.data`)
        return loss

    _seeded_equals_divided(hooked, 3)
