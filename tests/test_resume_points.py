"""A resume from any save point ends where the uninterrupted run ends: weights, momentum, scheduler,
step count and the per-step logs (`torch.equal`, nothing logged twice or missed). One process here;
tests/distributed/test_ddp_resume_points.py runs the same on two."""

from __future__ import annotations

import pytest
import torch

import resume_points as rp

BATCHES = 14  # 84 samples in batches of 6


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    model, trainer = rp.uninterrupted(root, devices=1, batches_per_epoch=BATCHES)
    return root, model, trainer


def test_the_reference_run_wrote_every_kind_of_save_point(reference):
    root, _, trainer = reference
    names = set(rp.checkpoints(root))
    assert trainer.global_step == rp.EPOCHS * 5  # 14 batches in windows of 3: 5 optimizer steps an epoch
    assert {"hook:batch_end-e0-b1", "hook:batch_end-e1-b4", "hook:batch_end-e1-b5"} <= names
    assert "hook:batch_end-e1-b13" in names and "hook:validation_end-e0" in names
    assert sum(n.startswith("epoch_end:") for n in names) == rp.EPOCHS
    assert sum(n.startswith("every_2_steps:") for n in names) >= 2


def _check(root, model, trainer, ckpt, name):
    resumed, t = rp.resume(root / f"resumed-{name.replace(':', '_')}", 1, ckpt)
    problems = rp.differences(model, trainer, resumed, t) + rp.log_problems(trainer, t, ckpt)
    assert not problems, f"resume from {name}: {problems}"


def test_every_save_point_of_the_run_resumes_exactly(reference, tmp_path):
    root, model, trainer = reference
    for name, ckpt in rp.checkpoints(root).items():
        _check(tmp_path, model, trainer, ckpt, name)


def test_a_checkpoint_saved_after_fit_returned_resumes_exactly(reference, tmp_path):
    _, model, trainer = reference
    ckpt = rp.after_fit(tmp_path, devices=1)
    assert torch.load(ckpt, weights_only=True)["loop"]["epoch"] == 1  # the next epoch to run
    _check(tmp_path, model, trainer, ckpt, "after_fit")


def test_a_sigterm_checkpoint_resumes_exactly(reference, tmp_path):
    _, model, trainer = reference
    signalled = rp.SaveAt(tmp_path, sigterm_at=(1, 7))
    with pytest.raises(SystemExit) as stop:
        rp.fit(tmp_path / "signalled", 1, seed=11, callbacks=[signalled])
    assert stop.value.code == 143
    (ckpt,) = (tmp_path / "signalled").rglob("last.ckpt")
    assert torch.load(ckpt, weights_only=True)["global_step"] == 8  # the window ending at batch 8
    _check(tmp_path, model, trainer, ckpt, "sigterm")


def test_the_sanity_check_leaves_training_bit_identical(tmp_path):
    with_check, ta = rp.fit(tmp_path / "a", 1, seed=3, max_epochs=1, num_sanity_val_steps=2)
    without, tb = rp.fit(tmp_path / "b", 1, seed=3, max_epochs=1, num_sanity_val_steps=0)
    assert not rp.differences(with_check, ta, without, tb)


def test_validation_frequency_leaves_training_bit_identical(tmp_path):
    often, ta = rp.fit(tmp_path / "a", 1, seed=3, max_epochs=2, val_check_interval=2)
    never, tb = rp.fit(tmp_path / "b", 1, seed=3, max_epochs=2, limit_val_batches=0)
    assert not rp.differences(often, ta, never, tb)
