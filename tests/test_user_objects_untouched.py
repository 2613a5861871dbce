"""surge leaves the user's objects and the process environment as they were: no attributes stamped
on the model, no DataLoader changed in place, no variables written for the Trainer to read back."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

import surge
from helpers import fast_trainer, make_dataset, make_model
from surge.data.loader_prep import prepare_loader
from surge.launch.signals import WorkerSignals
from surge.seed import Seeding, last_seeding, worker_init_fn


def test_seed_everything_records_the_seed_and_leaves_os_environ_alone():
    before = dict(os.environ)
    try:
        surge.seed_everything(123, workers=False)
        assert last_seeding() == Seeding(seed=123, workers=False)
        surge.seed_everything(7)
        assert last_seeding() == Seeding(seed=7, workers=True)
        assert dict(os.environ) == before
    finally:
        surge.seed_everything(0)


def test_fit_leaves_the_users_loaders_as_they_were(tmp_path):
    surge.seed_everything(0, workers=True)  # asks for per-worker seeds: set on surge's copy only
    train = DataLoader(make_dataset(32), batch_size=8, shuffle=True, num_workers=1, persistent_workers=True)
    val = DataLoader(make_dataset(16, seed=1), batch_size=8)
    before = {"train": dict(train.__dict__), "val": dict(val.__dict__)}
    trainer = fast_trainer(default_root_dir=tmp_path, max_epochs=2)
    trainer.fit(make_model(), train, val)
    trainer.validate(dataloaders=val)
    assert {"train": train.__dict__, "val": val.__dict__} == before
    assert train.worker_init_fn is None and train._iterator is None
    assert trainer.global_step == 8  # both epochs ran on the re-created loader
    prepared = trainer.train_dataloader
    assert prepared is not train and isinstance(prepared.worker_init_fn, WorkerSignals)
    assert prepared.worker_init_fn.user_fn is worker_init_fn and prepared.sampler is train.sampler


def test_a_loader_that_needs_pinning_is_re_created_with_its_sampler():
    class Subclassed(DataLoader):
        pass

    for cls in (DataLoader, Subclassed):
        user = cls(make_dataset(8), batch_size=4, shuffle=True, drop_last=True)
        before = dict(user.__dict__)
        pinned = prepare_loader(user, pin_memory=True)
        assert pinned is not user and pinned.pin_memory and type(pinned) is cls
        assert pinned.sampler is user.sampler and (pinned.batch_size, pinned.drop_last) == (4, True)
        assert user.__dict__ == before
    dataset = make_dataset(8)
    custom = DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), 3, drop_last=False))
    assert prepare_loader(custom, pin_memory=True).batch_sampler is custom.batch_sampler
    plain = DataLoader(make_dataset(8), batch_size=4)
    assert prepare_loader(plain, pin_memory=False) is plain  # nothing to change: the user's own


@pytest.mark.parametrize("compile_", [False, {"backend": "eager"}])  # eager: dynamo without codegen
def test_nothing_is_stamped_on_the_model_and_it_is_compiled_once(tmp_path, compile_):
    torch._dynamo.reset()
    model = make_model()
    attributes = set(vars(model))
    trainer = fast_trainer(default_root_dir=tmp_path, max_steps=2, compile=compile_)
    trainer.fit(model, DataLoader(make_dataset(16), batch_size=8))
    compiled = model._compiled_call_impl
    assert (compiled is not None) == bool(compile_)
    trainer.fit(model, DataLoader(make_dataset(16), batch_size=8))
    assert model._compiled_call_impl is compiled  # the second fit did not compile again
    assert not [name for name in set(vars(model)) - attributes if name.startswith("_surge")]
    assert set(vars(model)) - attributes <= {"_compiled_call_impl"}
