"""A rollback equals the run that never saw the batches it skipped, `torch.equal` on the weights,
the optimizer's and schedulers' states, the step and the callbacks' states (an EMA callback, SWA),
for a bad batch at every position of every window of a two-epoch fit (the epoch's and the fit's last
windows included), with an epoch StepLR, an epoch ReduceLROnPlateau or SWA; a bad batch is a NaN
loss, or a finite loss with a NaN gradient. Every stop judges what is pending; a damaged SpikeGuard
state is refused at load by entry. DDP-2: tests/distributed/test_rollback_ddp.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import rollback_workload as w
import spike_workload as sw
import surge
from surge.callbacks import Callback, SpikeError, SpikeGuard
from surge.checkpoint import load_checkpoint, save_atomic
from surge.errors import CheckpointError, MisconfigurationError

POSITIONS = [(epoch, j) for epoch in range(w.EPOCHS) for j in range(w.N)]
CASES = (
    [("step", kind, e, j) for kind in ("nan", "grad") for e, j in POSITIONS]
    + [("plateau", "nan", e, j) for e, j in POSITIONS]
    + [("swa", "grad", 0, j) for j in range(w.N)]  # (SWA averages at epoch 1's start)
)


@pytest.mark.parametrize(("sched", "kind", "epoch", "j"), CASES)
def test_a_rollback_equals_the_run_that_never_saw_the_window(tmp_path, sched, kind, epoch, j):
    a, ta = w.bad_run(tmp_path / "bad", sched, kind, epoch, j)
    b, tb = w.reference(tmp_path / "reference", sched, epoch, j)
    (guard,) = [cb for cb in ta.callbacks if isinstance(cb, SpikeGuard)]
    assert guard.rollbacks == 1
    assert w.differences(w.state(a, ta), w.state(b, tb)) == []


class StopAt(Callback):
    """`trainer.should_stop` at the end of batch `at` of epoch 0."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx == self.at:
            trainer.should_stop = True


@pytest.mark.parametrize("kind", ["nan", "grad"])
def test_a_stop_and_max_steps_judge_the_pending_window(tmp_path, kind):
    # should_stop after batch 4 (bad, not a check): judged at the stop, back to step 4, the fit ends there
    clean = w.samples(1, None)
    data = {0: w.samples(1, (kind, 4)), 1: clean}
    a, ta = w.fit(
        tmp_path / "stop", data, "none", guard=True, callbacks=[w.EMA(), StopAt(4), SpikeGuard(math.inf)]
    )
    b, tb = w.fit(tmp_path / "ref", {0: clean}, "none", guard=False, max_steps=4)
    assert ta.global_step == 4
    assert w.differences(w.state(a, ta), w.state(b, tb)) == []
    # max_steps=5 ends on the bad batch 4: judged there, rolled back, and training goes on to step 5
    a, ta = w.fit(tmp_path / "max", data, "step", guard=True, max_steps=5)
    b, tb = w.fit(
        tmp_path / "max_ref", {0: w.without(clean, 1, range(4, 5))}, "step", guard=False, max_steps=5
    )
    assert ta.global_step == 5
    assert w.differences(w.state(a, ta), w.state(b, tb)) == []


def test_on_nonfinite_rollback_keeps_the_per_step_check_of_warn(tmp_path):
    a, ta = sw.fit(tmp_path / "nan", sw.samples(1, {5: math.nan}), on_nonfinite="rollback")
    assert ta.fit_loop.ctx.optim.guard.mode == "warn"  # every loss summed on the device, read at epoch ends


def test_giving_up_on_a_nan_gradient_leaves_the_last_judged_weights(tmp_path):
    # a finite loss with a NaN gradient as a window's last batch: never snapshotted as good
    data = {0: w.samples(1, ("grad", 3)), 1: w.samples(1, None)}
    surge.seed_everything(7)
    model = w.Net("none")
    model.data = data
    trainer = surge.Trainer(default_root_dir=tmp_path, max_epochs=2, log_every_n_steps=w.EVERY, logger=False,
                            callbacks=[SpikeGuard(threshold=math.inf, max_rollbacks=0)], enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    with pytest.raises(SpikeError, match=r"non-finite weights after a step .* of step 0"):
        trainer.fit(model)
    assert all(torch.isfinite(p).all() for p in model.parameters())


class Uncopyable(Callback):
    def state_dict(self):
        return {"gen": (i for i in range(3))}


def test_a_callback_state_a_snapshot_cannot_hold_is_refused_before_training(tmp_path):
    with pytest.raises(MisconfigurationError, match=r"Uncopyable's state_dict\(\) cannot be copied"):
        sw.fit(tmp_path, sw.samples(1, {}), callbacks=[Uncopyable(), SpikeGuard()])


def _damaged(state: dict, key: str) -> None:
    snap = state["snapshot"]
    if key == "rollbacks":
        state["rollbacks"] = "2"
    elif key == "stats":
        state["stats"] = torch.zeros(2)
    elif key == "pending":
        state["pending"] = torch.zeros(3, 2)
    elif key == "snapshot.rng":
        del snap["rng"]
    elif key == "snapshot.global_step":
        snap["global_step"] = -1
    elif key == "model_shape":
        name = next(iter(snap["model"]))
        snap["model"][name] = torch.zeros(1)
    elif key == "model_nan":
        name = next(iter(snap["model"]))
        snap["model"][name] = torch.full_like(snap["model"][name], math.nan)
    elif key == "optim_count":
        snap["optim"]["optimizer_states"] = []


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("rollbacks", r"'rollbacks' entry is '2'"),
        ("stats", r"'stats' entry is a torch.float32 tensor of shape \(2,\)"),
        ("pending", r"'pending' entry is a torch.float32 tensor of shape \(3, 2\)"),
        ("snapshot.rng", r"'snapshot' entry has no \['rng'\]"),
        ("snapshot.global_step", r"'snapshot.global_step' entry is -1"),
        ("model_shape", r"snapshot\['model'\]\['net.0.weight'\] is \(1,\)"),
        ("model_nan", r"snapshot\['model'\]\['net.0.weight'\] holds inf/NaN"),
        ("optim_count", r"snapshot\['optim'\]\['optimizer_states'\] holds 0 entries"),
    ],
)
def test_a_damaged_spike_guard_state_is_refused_at_load_by_entry(tmp_path, key, message):
    saved = tmp_path / "saved.ckpt"
    if not saved.exists():
        sw.fit(tmp_path / "full", sw.samples(1, {}), callbacks=[SpikeGuard(), sw.SaveAfter(saved, 14)])
    ckpt = load_checkpoint(saved)
    (state_key,) = [k for k in ckpt["callbacks"] if k.startswith("SpikeGuard")]
    _damaged(ckpt["callbacks"][state_key], key)
    save_atomic(ckpt, tmp_path / "damaged.ckpt")  # a valid digest: the damage is in what it says
    trained = []

    class Steps(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            trained.append(batch_idx)

    with pytest.raises(CheckpointError, match=message):
        sw.fit(tmp_path / "resumed", sw.samples(1, {}), callbacks=[SpikeGuard(), Steps()],
               ckpt=tmp_path / "damaged.ckpt")  # fmt: skip
    assert trained == []  # refused before any training step
