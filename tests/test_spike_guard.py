"""Rollback on a loss spike or a non-finite loss (`SpikeGuard`, `on_nonfinite="rollback"`): a run
with a spike injected at a known batch equals, `torch.equal`, the run that never saw the batches
the rollback skipped and took the same actions; a checkpoint written before or after the rollback
resumes exactly; the guard gives up after `max_rollbacks`. DDP-2: tests/distributed/test_spike_guard_ddp.py.

Batches are 0-based; checks every LOG_EVERY=4 optimizer steps (after batches 3, 7, 11, 15, ...).
A spike at batch 13 is seen at the check after batch 15; the last snapshot is the check after
batch 11, so the rollback skips batches 12..15.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch.utils.data import DataLoader

import spike_workload as w
import surge
from surge.callbacks import SpikeError, SpikeGuard
from surge.errors import MisconfigurationError


def _rollback_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("SpikeGuard:")]


def test_a_loss_spike_is_rolled_back_to_the_run_that_never_saw_its_window(tmp_path, caplog):
    guard = SpikeGuard(threshold=6, window=20)
    with caplog.at_level(logging.INFO, logger="surge"):
        a, ta = w.fit(tmp_path / "spiked", w.samples(1, {13: 30.0}), callbacks=[guard])
    lines = _rollback_lines(caplog)
    b, tb = w.fit(tmp_path / "reference", w.without(w.samples(1, {}), 1, 12, 16))
    assert w.differences(a, ta, b, tb) == []
    assert guard.rollbacks == 1 and ta.global_step == w.BATCHES - 4
    assert len(lines) == 1 and "a loss spike between step 12 and 16" in lines[0]
    assert "restored the state of step 12" in lines[0] and "epoch 0 batch 12 to epoch 0 batch 16" in lines[0]
    assert (12, "rollbacks", 1.0) in ta.logger.rows
    assert float(ta.callback_metrics["rollbacks"]) == 1.0


def test_without_a_spike_the_guard_changes_nothing(tmp_path):
    a, ta = w.fit(tmp_path / "guarded", w.samples(1, {}), callbacks=[SpikeGuard(threshold=6, window=20)])
    b, tb = w.fit(tmp_path / "plain", w.samples(1, {}))
    assert w.differences(a, ta, b, tb) == []
    assert ta.global_step == w.BATCHES


def test_on_nonfinite_rollback_restores_after_a_nan_loss(tmp_path, recwarn):
    a, ta = w.fit(tmp_path / "nan", w.samples(1, {5: math.nan}), on_nonfinite="rollback")
    (guard,) = [cb for cb in ta.callbacks if isinstance(cb, SpikeGuard)]  # added by the Trainer
    assert guard.threshold == math.inf and guard.rollbacks == 1
    b, tb = w.fit(tmp_path / "reference", w.without(w.samples(1, {}), 1, 4, 8))
    assert w.differences(a, ta, b, tb) == []
    assert all(torch.isfinite(p).all() for p in a.parameters())
    assert not [str(r.message) for r in recwarn if "non-finite" in str(r.message)]  # rolled back, not warned


class ShapeOne(w.Net):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx).reshape(1)


def test_a_shape_1_loss_is_judged_like_a_scalar(tmp_path):
    a, ta = w.fit(tmp_path / "nan", w.samples(1, {5: math.nan}), on_nonfinite="rollback", net=ShapeOne)
    b, tb = w.fit(tmp_path / "reference", w.without(w.samples(1, {}), 1, 4, 8))
    assert w.differences(a, ta, b, tb) == []


def test_the_rate_scale_and_accumulation_match_the_run_that_did_the_same_by_hand(tmp_path):
    # windows of 2: a check every 8 batches; the spike in the window of batches 12-13 is seen
    # after batch 15, the snapshot is of batch 8's start: batches 8..15 are skipped
    guard = SpikeGuard(threshold=6, window=20, lr_scale=0.5)
    a, ta = w.fit(tmp_path / "spiked", w.samples(1, {13: 30.0}), callbacks=[guard], accumulate_grad_batches=2)
    b, tb = w.fit(
        tmp_path / "reference", w.without(w.samples(1, {}), 1, 8, 16), callbacks=[w.ScaleAt(8, 0.5)],
        accumulate_grad_batches=2,
    )  # fmt: skip
    assert guard.rollbacks == 1
    assert w.differences(a, ta, b, tb) == []
    assert ta.optimizers[0].param_groups[0]["lr"] < 0.02 * 0.5 + 1e-12


def test_snapshots_every_n_steps_skip_back_to_the_last_one(tmp_path):
    guard = SpikeGuard(threshold=6, window=20, snapshot_every=8)
    a, ta = w.fit(tmp_path / "spiked", w.samples(1, {13: 30.0}), callbacks=[guard])
    b, tb = w.fit(tmp_path / "reference", w.without(w.samples(1, {}), 1, 8, 16))
    assert w.differences(a, ta, b, tb) == []


def test_two_spikes_two_rollbacks_and_the_next_one_raises(tmp_path):
    spikes = {5: math.nan, 13: math.nan}
    guard = SpikeGuard(window=20, max_rollbacks=2)
    a, ta = w.fit(tmp_path / "two", w.samples(1, spikes), callbacks=[guard])
    data = w.without(w.without(w.samples(1, {}), 1, 12, 16).dataset, 1, 4, 8)  # both windows
    keep = [i for i in data.indices if not 12 * w.BATCH <= i < 16 * w.BATCH]
    b, tb = w.fit(tmp_path / "reference", torch.utils.data.Subset(data.dataset, keep))
    assert guard.rollbacks == 2 and w.differences(a, ta, b, tb) == []
    surge.seed_everything(7)
    gives_up = w.Net()
    trainer = surge.Trainer(default_root_dir=tmp_path / "gives_up", max_epochs=1, log_every_n_steps=w.LOG_EVERY,
                            callbacks=[SpikeGuard(window=20, max_rollbacks=1)], logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    with pytest.raises(
        SpikeError,
        match=r"a non-finite loss between step 8 and 12 \(epoch 0, batch 16\) after 1 rollback.*max_rollbacks=1. "
        r"The model and optimizers are back to the last good state, of step 8",
    ):
        trainer.fit(gives_up, DataLoader(w.samples(1, spikes), batch_size=w.BATCH))
    # The model is left as it was at step 8 (the first NaN, at batch 5, rolled back): the run that
    # never saw batches 4-7, stopped at step 8.
    c, tc = w.fit(tmp_path / "step8", w.without(w.samples(1, {}), 1, 4, 8), max_steps=8)
    assert all(torch.equal(p, q) for p, q in zip(gives_up.parameters(), c.parameters()))
    assert all(torch.isfinite(p).all() for p in gives_up.parameters())


@pytest.mark.parametrize("save_after", [14, 18])  # between the spike and the check; after the rollback
def test_a_checkpoint_before_or_after_the_rollback_resumes_exactly(tmp_path, save_after):
    data = w.samples(1, {13: 30.0})
    saver = w.SaveAfter(tmp_path / "saved.ckpt", save_after)
    a, ta = w.fit(tmp_path / "full", data, callbacks=[SpikeGuard(threshold=6, window=20), saver])
    guard = SpikeGuard(threshold=6, window=20)
    b, tb = w.fit(tmp_path / "resumed", data, callbacks=[guard], ckpt=tmp_path / "saved.ckpt")
    assert w.differences(a, ta, b, tb) == []
    assert guard.rollbacks == 1  # the count (and the snapshot) came with the checkpoint
    state = torch.load(tmp_path / "saved.ckpt", weights_only=True)["callbacks"]
    assert any(key.startswith("SpikeGuard") and value["snapshot"] is not None for key, value in state.items())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0}, "threshold=0 is not valid"),
        ({"window": 1}, "window=1 is not valid"),
        ({"max_rollbacks": -1}, "max_rollbacks=-1 is not valid"),
        ({"lr_scale": 0.0}, "lr_scale=0.0 is not valid"),
        ({"snapshot_every": 0}, "snapshot_every=0 is not valid"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        SpikeGuard(**kwargs)


def test_a_snapshot_interval_off_the_checks_is_refused_before_training(tmp_path):
    with pytest.raises(
        MisconfigurationError, match=r"snapshot_every=6\) must be a multiple of .*log_every_n_steps=4"
    ):
        w.fit(tmp_path / "bad", w.samples(1, {}), callbacks=[SpikeGuard(snapshot_every=6)])


def test_manual_optimization_is_refused(tmp_path):
    class Manual(w.Net):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

    trainer = surge.Trainer(
        default_root_dir=tmp_path, accelerator="cpu", logger=False, enable_progress_bar=False, max_steps=2,
        callbacks=[SpikeGuard()], enable_model_summary=False,
    )  # fmt: skip
    with pytest.raises(MisconfigurationError, match="needs automatic optimization"):
        trainer.fit(Manual(), torch.utils.data.DataLoader(w.samples(1, {}), batch_size=4))


def test_on_nonfinite_rollback_is_a_valid_mode_and_others_are_refused():
    surge.Trainer(on_nonfinite="rollback", logger=False)
    with pytest.raises(MisconfigurationError, match="rollback"):
        surge.Trainer(on_nonfinite="undo", logger=False)


class StateIds(surge.callbacks.Callback):
    """The identities of the optimizer's state tensors at every batch start."""

    def __init__(self) -> None:
        self.seen: list[set[int]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        opt = trainer.optimizers[0]
        self.seen.append({id(t) for state in opt.state.values() for t in state.values()})


def test_a_rollback_restores_the_optimizer_state_in_place(tmp_path):
    ids = StateIds()
    guard = SpikeGuard(threshold=6, window=20)
    w.fit(tmp_path / "spiked", w.samples(1, {13: 30.0}), callbacks=[guard, ids])
    assert guard.rollbacks == 1
    assert len({frozenset(s) for s in ids.seen[1:]}) == 1  # the same momentum tensors before and after


def test_a_guard_used_again_starts_from_nothing(tmp_path):
    guard = SpikeGuard(threshold=6, window=20)
    w.fit(tmp_path / "spiked", w.samples(1, {13: 30.0}), callbacks=[guard])
    assert guard.rollbacks == 1
    a, ta = w.fit(tmp_path / "again", w.samples(1, {}), callbacks=[guard])
    b, tb = w.fit(tmp_path / "plain", w.samples(1, {}))
    assert guard.rollbacks == 0 and w.differences(a, ta, b, tb) == []


def test_the_guard_reads_the_host_once_per_check_and_never_per_step(tmp_path, host_reads):
    w.fit(tmp_path / "plain", w.samples(1, {}), logger=False)
    plain = dict(host_reads)
    w.fit(tmp_path / "guarded", w.samples(1, {}), logger=False, callbacks=[SpikeGuard()])
    guarded = {key: host_reads[key] - plain[key] for key in plain}
    assert guarded == {"item": w.BATCHES // w.LOG_EVERY, "tolist": plain["tolist"]}  # 6 checks in 24 steps


class EpochData(w.Net):
    """The reference of a spike in epoch 0's last window: epoch 0 without batches 20..23, epoch 1
    whole (asked for again each epoch)."""

    def train_dataloader(self):
        clean = w.samples(1, {})
        data = w.without(clean, 1, 20, 24) if self.trainer.current_epoch == 0 else clean
        return torch.utils.data.DataLoader(data, batch_size=w.BATCH)


def test_a_spike_in_an_epochs_last_window_is_rolled_back_before_the_epochs_end(tmp_path):
    # checks every 5 steps and at each epoch's end: snapshot after batch 19, spike at batch 22, judged
    # after batch 23, before the epoch's end; epoch 1 starts from the restored state (dropout: exact)
    kw = dict(max_epochs=2, max_steps=40, log_every_n_steps=5)
    guard = SpikeGuard(threshold=6, window=20)
    a, ta = w.fit(tmp_path / "spiked", w.samples(1, {22: 30.0}), callbacks=[guard], **kw)
    b, tb = w.fit(
        tmp_path / "reference", None, reload_dataloaders_every_n_epochs=1, **{**kw, "net": EpochData}
    )
    assert guard.rollbacks == 1 and w.differences(a, ta, b, tb) == []
