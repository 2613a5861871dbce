"""reload_dataloaders_every_n_epochs: fit's loaders are requested again as Lightning requests them,
each new loader trains exactly its own batches, and a resume continues bit-for-bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge


def _data(epoch: int, per_epoch: int = 8, base: int = 16, seed: int = 0) -> TensorDataset:
    """A curriculum: epoch `epoch` has `base + per_epoch * epoch` samples, drawn from its own seed."""
    g = torch.Generator().manual_seed(seed + epoch)
    n = base + per_epoch * epoch
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


class Curriculum(surge.Module):
    """Its loaders depend on `current_epoch`; it records when they are requested and what it trains on."""

    def __init__(self, batch_size: int = 4, shuffle: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Dropout(dropout), torch.nn.ReLU(), torch.nn.Linear(8, 2)
        )
        self.batch_size, self.shuffle = batch_size, shuffle
        self.requests: dict[str, list[int]] = {"train": [], "val": []}
        self.seen: dict[int, int] = {}  # samples trained on, per epoch
        self.planned: dict[int, int | float] = {}  # trainer.num_training_batches at each epoch's start
        self.val_batches: list[int] = []
        self.losses: list[torch.Tensor] = []

    def train_dataloader(self) -> DataLoader:
        self.requests["train"].append(self.current_epoch)
        return DataLoader(_data(self.current_epoch), batch_size=self.batch_size, shuffle=self.shuffle)

    def val_dataloader(self) -> DataLoader:
        self.requests["val"].append(self.current_epoch)
        return DataLoader(_data(self.current_epoch, base=4, seed=100), batch_size=4)

    def on_train_epoch_start(self) -> None:
        self.planned[self.current_epoch] = self.trainer.num_training_batches

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen[self.current_epoch] = self.seen.get(self.current_epoch, 0) + len(x)
        loss = F.cross_entropy(self.net(x), y)
        self.losses.append(loss.detach())
        return loss

    def validation_step(self, batch, batch_idx):
        if not self.trainer.sanity_checking:
            self.val_batches.append(self.current_epoch)
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(root, **kw) -> surge.Trainer:
    base = dict(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                enable_checkpointing=False, max_epochs=5)  # fmt: skip
    return surge.Trainer(**{**base, **kw})


# Lightning 2.x (fit_loop `_should_reload_train_dl`, evaluation_loop `_should_reload_val_dl`) over 5
# epochs with the sanity check and validation every epoch: the epochs at which `train_dataloader()`
# and `val_dataloader()` are called (the first val call is the sanity check's, at epoch 0).
LIGHTNING_REQUESTS = {
    0: ([0], [0]),  # 1 call each: the loaders are kept
    1: ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4]),  # 5 calls each
    2: ([0, 2, 4], [0, 2, 4]),  # 3 calls each
    3: ([0, 3], [0, 3]),  # 2 calls each
}


@pytest.mark.parametrize("n", sorted(LIGHTNING_REQUESTS))
def test_loaders_are_requested_at_the_epochs_lightning_requests_them(tmp_path, n):
    model = Curriculum()
    _trainer(tmp_path, reload_dataloaders_every_n_epochs=n).fit(model)
    train, val = LIGHTNING_REQUESTS[n]
    assert model.requests == {"train": train, "val": val}


def test_infrequent_validation_requests_val_loaders_when_it_runs(tmp_path):
    # Lightning's case (sanity check, check_val_every_n_epoch=3, n=4, 10 epochs): train at 0, 4, 8;
    # validation at epochs 2, 5, 8, its loaders requested again at 2 and 8 (the sanity check's request
    # at epoch 0 is not one for a validation epoch, so epoch 2's validation asks again).
    model = Curriculum()
    trainer = _trainer(
        tmp_path, reload_dataloaders_every_n_epochs=4, check_val_every_n_epoch=3, max_epochs=10
    )
    trainer.fit(model)
    assert model.requests == {"train": [0, 4, 8], "val": [0, 2, 8]}
    assert sorted(set(model.val_batches)) == [2, 5, 8]


def test_a_loader_whose_length_changes_trains_exactly_its_batches(tmp_path):
    model = Curriculum()
    trainer = _trainer(tmp_path, reload_dataloaders_every_n_epochs=1, max_epochs=4, accumulate_grad_batches=3)
    trainer.fit(model)
    sizes = [16 + 8 * e for e in range(4)]  # 16, 24, 32, 40 samples: 4, 6, 8, 10 batches of 4
    assert model.seen == dict(enumerate(sizes))
    assert model.planned == {e: s // 4 for e, s in enumerate(sizes)}
    # accumulation's last window is re-planned per epoch: ceil(batches / 3) optimizer steps each
    assert trainer.global_step == 2 + 2 + 3 + 4
    assert trainer.num_training_batches == 10


def test_limits_and_the_val_interval_are_re_planned_for_each_new_loader(tmp_path):
    model = Curriculum()
    trainer = _trainer(
        tmp_path, reload_dataloaders_every_n_epochs=2, max_epochs=4, limit_train_batches=0.5,
        val_check_interval=0.5, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model)
    # epochs 0-1 use epoch 0's loader (4 batches -> 2), epochs 2-3 epoch 2's (8 -> 4)
    assert model.seen == {0: 8, 1: 8, 2: 16, 3: 16}
    assert model.planned == {0: 2, 1: 2, 2: 4, 3: 4}
    # validation at half of each epoch and at its end, on the val loader requested for that epoch:
    # epoch 0's has 1 batch (4 samples), epoch 2's 5 batches (4 + 16 samples)
    assert model.val_batches == [0, 0, 1, 1] + [2] * 10 + [3] * 10


def test_a_loader_passed_to_fit_is_kept(tmp_path):
    model = Curriculum()
    given = DataLoader(_data(0), batch_size=4)
    trainer = _trainer(tmp_path, reload_dataloaders_every_n_epochs=1, max_epochs=3)
    trainer.fit(model, train_dataloaders=given)
    assert model.requests == {"train": [], "val": [0, 1, 2]}
    assert trainer.train_dataloader is given and model.seen == {0: 16, 1: 16, 2: 16}


class Data(surge.DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[int] = []

    def train_dataloader(self) -> DataLoader:
        epoch = self.trainer.current_epoch
        self.epochs.append(epoch)
        return DataLoader(_data(epoch), batch_size=4)


def test_a_datamodule_is_asked_for_new_loaders(tmp_path):
    data, model = Data(), Curriculum()
    trainer = _trainer(tmp_path, reload_dataloaders_every_n_epochs=2, max_epochs=3, limit_val_batches=0)
    trainer.fit(model, datamodule=data)
    assert data.epochs == [0, 2] and model.requests["train"] == []
    assert model.seen == {0: 16, 1: 16, 2: 32}


def _fit(root, n: int, seed: int, ckpt=None, **kw) -> tuple[Curriculum, surge.Trainer]:
    surge.seed_everything(seed)
    model = Curriculum(shuffle=True, dropout=0.2)
    trainer = _trainer(root, reload_dataloaders_every_n_epochs=n, enable_checkpointing=True, **kw)
    trainer.fit(model, ckpt_path=ckpt)
    return model, trainer


@pytest.mark.parametrize(("n", "stop_step"), [(1, 6), (1, 12), (2, 12)])
def test_resume_after_a_reload_is_bit_exact(tmp_path, n, stop_step):
    # Epochs have 4, 6, 8, 10 batches (steps 0-4, 4-10, 10-18, 18-28): step 6 is inside epoch 1, 12
    # inside epoch 2, both epochs where the loader was requested again.
    full, _ = _fit(tmp_path / "full", n, 3, max_epochs=4)
    _, first = _fit(tmp_path / "part", n, 3, max_steps=stop_step, max_epochs=4)
    ckpt = first.checkpoint_callback.best_model_path
    resumed, trainer = _fit(tmp_path / "resumed", n, 7, ckpt=ckpt, max_epochs=4)
    assert trainer.global_step == full.trainer.global_step
    assert torch.equal(torch.stack(full.losses[stop_step:]), torch.stack(resumed.losses))
    assert all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters()))


def test_a_resume_between_reloads_requests_the_loader_for_its_epoch(tmp_path):
    # n=2: the first run trains epoch 1 on epoch 0's loader (4 batches) and stops 2 batches into it.
    # The resumed run asks again for epoch 1 (as Lightning, which requests its loaders after the
    # restore), trains the rest of that loader's 6 batches, and goes on with the rule from there.
    _, first = _fit(tmp_path / "part", 2, 3, max_steps=6, max_epochs=4)
    resumed, trainer = _fit(tmp_path / "resumed", 2, 7, ckpt=first.checkpoint_callback.best_model_path)
    assert resumed.requests["train"] == [0, 1, 3]  # 0: fit's start, before the checkpoint is read
    # (no on_train_epoch_start for the epoch resumed inside, as Lightning: its 6 batches show in `seen`)
    assert resumed.planned == {2: 6, 3: 10, 4: 10}
    assert resumed.seen == {1: 4 * 4, 2: 24, 3: 40, 4: 40}


def test_tuned_settings_apply_to_each_new_loader(tmp_path):
    model = Curriculum(batch_size=16)
    trainer = _trainer(
        tmp_path, reload_dataloaders_every_n_epochs=1, max_epochs=2, effective_batch_size=8, num_workers=1,
        limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model)
    loader = trainer.train_dataloader
    assert model.requests["train"] == [0, 1]
    assert loader.dataset.tensors[0].shape[0] == 24 and loader.batch_size == 8 and loader.num_workers == 1
    assert model.planned == {0: 2, 1: 3}  # 16 and 24 samples in the micro-batches of 8 it chose
