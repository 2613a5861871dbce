"""on_nonfinite: a NaN loss or gradient never silently ruins the weights."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.optim.nonfinite import NonFiniteError


class Poisoned(surge.Module):
    """A linear regression whose loss (or only its gradient) turns NaN at the batches in `bad`."""

    def __init__(self, bad=(), where="loss", fused=False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 1)
        self.bad, self.where, self.fused = set(bad), where, fused

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.lin(x)
        if batch_idx in self.bad and self.where == "grad":
            out = _NanGrad.apply(out)  # the loss stays finite; the gradient does not
        loss = torch.nn.functional.mse_loss(out, y)
        if batch_idx in self.bad and self.where == "loss":
            loss = loss * float("nan")
        return loss

    def configure_optimizers(self):
        if self.fused:
            return torch.optim.AdamW(self.parameters(), lr=0.01, fused=True)
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


def _loader(n: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n * 2, 3, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)


def _fit(tmp_path, model, **kwargs) -> surge.Trainer:
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, logger=False, **kwargs,
    )  # fmt: skip
    trainer.fit(model, _loader())
    return trainer


@pytest.fixture
def item_reads(monkeypatch) -> dict[str, int]:
    """Counts `Tensor.item` calls (host reads) while the test runs."""
    reads = {"n": 0}
    real = torch.Tensor.item

    def item(self):
        reads["n"] += 1
        return real(self)

    monkeypatch.setattr(torch.Tensor, "item", item)
    return reads


def test_raise_stops_at_the_step_before_applying_it(tmp_path):
    model = Poisoned(bad={3})
    with pytest.raises(NonFiniteError, match=r"step 4 \(epoch 0, batch 3\).*not applied"):
        _fit(tmp_path, model, on_nonfinite="raise")
    reference = Poisoned()
    _fit(tmp_path, reference, on_nonfinite="raise", max_steps=3)
    assert torch.equal(model.lin.weight, reference.lin.weight)  # steps 1-3 only; step 4 never applied


@pytest.mark.parametrize("where", ["loss", "grad"])
def test_skip_drops_the_bad_steps_and_counts_them(tmp_path, where):
    model = Poisoned(bad={2, 5}, where=where)
    trainer = _fit(tmp_path, model, on_nonfinite="skip")
    assert trainer._optim.guard.skipped == 2
    assert torch.isfinite(model.lin.weight).all()

    class Without(Poisoned):  # the same run, without the two bad batches ever stepping
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss * 0.0 if batch_idx in (2, 5) else loss

    reference = Without()
    _fit(tmp_path, reference, on_nonfinite=None)
    # Plain SGD: a step on zero gradients changes nothing, so the weights must be equal.
    assert torch.equal(model.lin.weight, reference.lin.weight)


def test_warn_says_so_at_the_epoch_end_without_a_per_step_read(tmp_path, item_reads):
    reads = item_reads
    _fit(tmp_path, Poisoned(bad={4}), on_nonfinite=None)
    unchecked, reads["n"] = reads["n"], 0
    with pytest.warns(UserWarning, match="non-finite loss"):
        _fit(tmp_path, Poisoned(bad={4}), on_nonfinite="warn")
    assert reads["n"] == unchecked  # the guard adds no .item() (its one read per epoch is a tolist)


class _Losses(surge.Module):
    """Returns `value(batch_idx)` times a trainable zero-gradient term as its loss (any value, any shape)."""

    def __init__(self, value) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.value = value

    def training_step(self, batch, batch_idx):
        return self.value(batch_idx) + self.w * 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _long_fit(tmp_path, model, batches: int, **kwargs):
    loader = DataLoader(TensorDataset(torch.zeros(batches, 1)), batch_size=1)
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, logger=False, on_nonfinite="warn", **kwargs,
    )  # fmt: skip
    trainer.fit(model, loader)
    return trainer


@pytest.mark.parametrize("bad_at", [0, 255, 256, 700, 899])
def test_warn_sees_a_nan_at_any_point_of_a_long_epoch_with_no_read_inside(tmp_path, bad_at):
    """No logger: the epoch's end is the only read point, 900 losses after its start (past the
    point where the kept losses are counted on the device and let go)."""
    nan = float("nan")
    model = _Losses(lambda i: torch.tensor(nan if i == bad_at else 1.0))
    with pytest.warns(UserWarning, match="non-finite loss was seen between step 0 and 900"):
        trainer = _long_fit(tmp_path, model, 900)
    assert len(trainer._optim.guard._pending) == 0  # counted at the read point


def test_the_losses_kept_between_reads_stay_bounded(tmp_path):
    seen: list[int] = []

    class Watching(_Losses):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(len(self.trainer._optim.guard._pending))

    _long_fit(tmp_path, Watching(lambda i: torch.tensor(1.0)), 600)
    assert max(seen) < 256 and len(seen) == 600


def test_a_loss_viewing_a_large_tensor_does_not_keep_that_tensor_alive(tmp_path):
    """A loss that is one element of a bigger tensor (`per_sample[0]`): what the watch keeps until
    its read point is that element, not the whole tensor each step (256 of them between folds)."""
    kept: list[int] = []

    class Viewing(_Losses):
        def training_step(self, batch, batch_idx):
            per_sample = torch.ones(100_000) + self.w * 0
            return per_sample[0]

        def on_train_batch_end(self, outputs, batch, batch_idx):
            pending = self.trainer._optim.guard._pending
            kept.append(sum(p.untyped_storage().nbytes() for p in pending))

    _long_fit(tmp_path, Viewing(None), 20)
    assert max(kept) <= 20 * 8  # a few bytes per kept loss (the view alone would keep 400 kB each)


def test_large_finite_losses_and_mixed_shapes_and_dtypes_are_no_false_alarm(tmp_path, recwarn):
    """Finite losses whose sum would overflow float32 (or float16), one-element shapes () and (1,)
    and half-precision losses mixed: not one of them is inf/NaN, so nothing is said."""

    def value(i: int) -> torch.Tensor:
        shape = () if i % 2 else (1,)
        dtype = torch.float16 if i % 3 == 0 else torch.float32
        big = 6e4 if dtype == torch.float16 else 3e38
        return torch.full(shape, big, dtype=dtype)

    _long_fit(tmp_path, _Losses(value), 600)
    assert not [w for w in recwarn if "non-finite" in str(w.message)]


class ManualPoisoned(Poisoned):
    """`Poisoned` stepping its optimizer itself (automatic_optimization=False)."""

    def __init__(self, bad=()) -> None:
        super().__init__(bad)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()


def test_manual_optimization_warns_of_a_nan_loss_given_to_manual_backward(tmp_path):
    with pytest.warns(UserWarning, match="non-finite loss was seen between step 0 and 8"):
        _fit(tmp_path, ManualPoisoned(bad={2}))


def test_manual_optimization_warns_at_the_log_interval_too(tmp_path):
    """Both loops read the count at the loggers' log intervals: batch 2's NaN is named at step 4."""
    trainer = surge.Trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, logger=surge.loggers.CSVLogger(tmp_path), log_every_n_steps=4,
    )  # fmt: skip
    with pytest.warns(UserWarning, match="non-finite loss was seen between step 0 and 4"):
        trainer.fit(ManualPoisoned(bad={2}), _loader())


@pytest.mark.parametrize("mode", ["skip", "raise"])
def test_manual_optimization_refuses_what_only_the_loop_can_decide(tmp_path, mode):
    """The module steps its optimizers: surge cannot skip a step or stop before it, so the mode is
    refused by name before any batch (it used to be ignored: the NaN step was applied)."""
    model = ManualPoisoned(bad={2})
    before = model.lin.weight.detach().clone()
    with pytest.raises(surge.MisconfigurationError, match=f'on_nonfinite="{mode}".*manual optimization'):
        _fit(tmp_path, model, on_nonfinite=mode)
    assert torch.equal(model.lin.weight, before)


def test_a_fused_optimizer_skips_on_the_device(tmp_path, item_reads):
    reads = item_reads
    _fit(tmp_path, Poisoned(fused=True), on_nonfinite=None)
    unchecked, reads["n"] = reads["n"], 0
    model = Poisoned(bad={1, 2}, fused=True)
    with pytest.warns(UserWarning, match="skipped 2 optimizer step"):
        trainer = _fit(tmp_path, model, on_nonfinite="skip")
    assert trainer._optim.guard.device_skip and trainer._optim.guard.skipped == 2
    assert torch.isfinite(model.lin.weight).all()
    assert reads["n"] == unchecked
    state = trainer.optimizers[0].state[model.lin.weight]
    assert int(state["step"]) == 8 - 2  # the skipped steps did not count for Adam either


class Watched(torch.optim.AdamW):
    """A fused AdamW that records, at each step, the flag handed to it (torch's `found_inf`), and
    fails at the step numbered `fail_at` (from 1) to stand for an error in the middle of a step."""

    def __init__(self, params, fail_at: int | None = None) -> None:
        super().__init__(params, lr=0.01, fused=True)
        self.seen: list[float | None] = []
        self.fail_at = fail_at

    def step(self, closure=None):
        found = vars(self).get("found_inf")
        self.seen.append(None if found is None else float(found))
        if len(self.seen) == self.fail_at:
            raise RuntimeError("a step that fails halfway")
        return super().step(closure)


class PoisonedWatched(Poisoned):
    def __init__(self, bad=(), fail_at=None) -> None:
        super().__init__(bad=bad)
        self.fail_at = fail_at

    def configure_optimizers(self):
        self.opt = Watched(self.parameters(), fail_at=self.fail_at)
        return self.opt


@pytest.mark.parametrize("ending", ["finished", "failed mid-step"])
def test_the_flag_handed_to_a_fused_optimizer_is_taken_back_after_each_step(tmp_path, ending):
    """torch's fused optimizers read `grad_scale`/`found_inf` off the optimizer (as GradScaler hands
    them): set for the step, removed after it, also after a skipped step and a step that raised."""
    fail_at = 4 if ending == "failed mid-step" else None
    model = PoisonedWatched(bad={1}, fail_at=fail_at)
    built = set(vars(Watched(torch.nn.Linear(1, 1).parameters())))
    if fail_at is None:
        with pytest.warns(UserWarning, match="skipped 1 optimizer step"):
            _fit(tmp_path, model, on_nonfinite="skip")
    else:
        with pytest.raises(RuntimeError, match="fails halfway"):
            _fit(tmp_path, model, on_nonfinite="skip")
    opt = model.opt
    assert opt.seen[:3] == [0.0, 1.0, 0.0]  # handed each step; set for the non-finite batch 1
    assert len(opt.seen) == (fail_at or 8)
    assert not {"grad_scale", "found_inf"} & set(vars(opt))  # taken back, whatever the ending
    assert set(vars(opt)) == built  # and nothing else left on it


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="on_nonfinite.*'ignore'.*raise"):
        surge.Trainer(on_nonfinite="ignore")


def test_warn_says_so_at_the_next_log_interval_not_only_at_the_epochs_end(tmp_path):
    """One long epoch (a pretraining run's): a NaN at batch 3 is named within its log interval
    (steps 0-10), while the fit is still inside the epoch, not only when the epoch or the fit ends."""
    nan = float("nan")
    seen_at: list[int] = []

    class Noting(_Losses):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            if not seen_at and any("non-finite loss" in str(w.message) for w in caught):
                seen_at.append(batch_idx)

    loader = DataLoader(TensorDataset(torch.zeros(1000, 1)), batch_size=1)
    trainer = surge.Trainer(
        max_steps=300, default_root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, logger=surge.loggers.CSVLogger(tmp_path), log_every_n_steps=10,
    )  # fmt: skip
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Noting(lambda i: torch.tensor(nan if i == 3 else 1.0)), loader)
    said = [str(w.message) for w in caught if "non-finite loss" in str(w.message)]
    assert len(said) == 1 and "between step 0 and 10" in said[0]
    assert seen_at == [9]  # said at step 10's log point, during the epoch


def test_a_hook_changing_the_outputs_loss_in_place_hides_no_nan(tmp_path):
    """`on_train_batch_end` gets a copy of the loss (Lightning's `detach().clone()`): a hook that
    cleans it in place changes neither what the watch kept nor the loss training_step returned."""
    nan = float("nan")
    returned: list[torch.Tensor] = []

    class Cleaning(_Losses):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            returned.append(loss)
            return loss

        def on_train_batch_end(self, outputs, batch, batch_idx):
            assert outputs["loss"].data_ptr() != returned[-1].data_ptr()
            outputs["loss"].nan_to_num_(0.0)

    with pytest.warns(UserWarning, match="non-finite loss was seen between step 0 and 20"):
        _long_fit(tmp_path, Cleaning(lambda i: torch.tensor(nan if i == 7 else 1.0)), 20)
    assert torch.isnan(returned[7])
