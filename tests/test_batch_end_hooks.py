"""Which `on_train_batch_end` hooks the loop calls: surge's own idle ones are left out of an epoch,
and a user's hook (a subclass's override included) is called at every batch with its outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import surge
from surge.callbacks import ModelCheckpoint, ProgressBar


class Tiny(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(24, 4, generator=g), torch.randint(0, 2, (24,), generator=g)), batch_size=4
    )


class SeenBar(ProgressBar):
    def __init__(self) -> None:
        super().__init__(mode="lines")
        self.seen: list[tuple[int, list[str]]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append((batch_idx, sorted(outputs)))
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)


class SeenCheckpoint(ModelCheckpoint):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.calls += 1
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)


def test_an_override_of_an_idle_hook_is_called_at_every_batch_with_its_outputs(tmp_path):
    bar, checkpoint = SeenBar(), SeenCheckpoint()
    trainer = surge.Trainer(max_epochs=2, default_root_dir=tmp_path, callbacks=[bar, checkpoint])
    trainer.fit(Tiny(), _loader())
    assert bar.seen == [(i, ["loss"]) for i in range(6)] * 2
    assert checkpoint.calls == 12
    assert bar.batch_end_idle(trainer) and checkpoint.batch_end_idle(trainer)  # the base's would be left out


def test_a_checkpoint_is_called_per_batch_only_where_it_has_work(tmp_path):
    plain, stepped, timed = (
        ModelCheckpoint(),
        ModelCheckpoint(every_n_train_steps=2),
        ModelCheckpoint(train_time_interval=60),
    )
    trainer = surge.Trainer(max_epochs=1, default_root_dir=tmp_path)
    assert plain.batch_end_idle(trainer)
    assert not stepped.batch_end_idle(trainer) and not timed.batch_end_idle(trainer)
    background = surge.Trainer(max_epochs=1, default_root_dir=tmp_path, async_checkpoint=True)
    assert not ModelCheckpoint().batch_end_idle(background)  # a background write's error is checked per batch
