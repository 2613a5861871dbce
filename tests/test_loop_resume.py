"""Resume continues bit-for-bit: at an epoch boundary and inside an epoch, with shuffling and dropout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

import surge


class Net(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=0.01)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


class Counting(Dataset):
    def __init__(self, x, y) -> None:
        self.x, self.y, self.calls = x, y, 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        self.calls += 1
        return self.x[i], self.y[i]


def _loader(counting: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(100, 8, generator=g)
    y = (x[:, 0] > 0).long()
    return DataLoader(Counting(x, y) if counting else TensorDataset(x, y), batch_size=16, shuffle=True)


def _trainer(root, **kw) -> surge.Trainer:
    return surge.Trainer(
        default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False, **kw
    )


def _run(root, seed: int, ckpt=None, **kw) -> tuple[Net, surge.Trainer]:
    surge.seed_everything(seed)
    model = Net()
    trainer = _trainer(root, **kw)
    trainer.fit(model, _loader(), ckpt_path=ckpt)
    return model, trainer


def test_resume_at_an_epoch_boundary_is_bit_exact(tmp_path):
    full, _ = _run(tmp_path / "full", 3, max_epochs=4)
    _, first = _run(tmp_path / "half", 3, max_epochs=2)
    resumed, trainer = _run(
        tmp_path / "resumed", 99, ckpt=first.checkpoint_callback.best_model_path, max_epochs=4
    )
    assert trainer.global_step == 28 and trainer.current_epoch == 4
    assert all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters()))
    assert torch.equal(torch.stack(full.losses[14:]), torch.stack(resumed.losses))


@pytest.mark.parametrize("stop_step", [3, 10, 20])
def test_resume_inside_an_epoch_is_bit_exact(tmp_path, stop_step):
    full, _ = _run(tmp_path / "full", 3, max_epochs=4)
    _, first = _run(tmp_path / "part", 3, max_steps=stop_step)
    resumed, _ = _run(tmp_path / "resumed", 7, ckpt=first.checkpoint_callback.best_model_path, max_epochs=4)
    assert torch.equal(torch.stack(full.losses[stop_step:]), torch.stack(resumed.losses))
    assert all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters()))


def test_mid_epoch_resume_skips_samples_without_loading_them(tmp_path):
    surge.seed_everything(0)
    first = _trainer(tmp_path / "a", max_steps=3)
    first.fit(Net(), _loader())
    loader = _loader(counting=True)
    second = _trainer(tmp_path / "b", max_steps=5)
    second.fit(Net(), loader, ckpt_path=first.checkpoint_callback.best_model_path)
    assert second.global_step == 5
    assert loader.dataset.calls == 2 * 16  # only the two batches trained; the three skipped are never read


def test_ckpt_path_last_finds_the_newest_checkpoint(tmp_path):
    _run(tmp_path, 3, max_epochs=1)
    _, trainer = _run(tmp_path, 3, ckpt="last", max_epochs=2)
    assert trainer.current_epoch == 2 and trainer.global_step == 14


def test_ckpt_path_auto_starts_fresh_without_a_checkpoint(tmp_path):
    _, trainer = _run(tmp_path, 3, ckpt="auto", max_epochs=1)
    assert trainer.global_step == 7


class PythonRandom(Net):
    """A loss scaled by python's `random`: a resume is exact only if python's RNG state is."""

    def training_step(self, batch, batch_idx):
        import random

        return super().training_step(batch, batch_idx) * (0.5 + random.random())


def _with_python_words_as_lists(state):
    """The RNG states as older checkpoints wrote them: python's 625 words a list, not a tensor."""
    if isinstance(state, dict):
        if {"version", "state", "gauss"} <= state.keys() and isinstance(state["state"], torch.Tensor):
            return {**state, "state": state["state"].tolist()}
        return {k: _with_python_words_as_lists(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_with_python_words_as_lists(v) for v in state]
    return state


def test_a_checkpoint_with_python_rng_words_as_a_list_still_resumes_bit_exact(tmp_path):
    """Checkpoints keep python's RNG words as one tensor (a list before); both forms resume the same."""
    from surge.checkpoint import save_atomic

    def run(root, seed, ckpt=None, **kw):
        surge.seed_everything(seed)
        model = PythonRandom()
        trainer = _trainer(root, **kw)
        trainer.fit(model, _loader(), ckpt_path=ckpt)
        return model

    full = run(tmp_path / "full", 3, max_epochs=2)
    run(tmp_path / "part", 3, max_steps=10)
    new = next((tmp_path / "part").rglob("*.ckpt"))
    state = torch.load(new, weights_only=True)
    assert isinstance(state["rng"]["python"]["state"], torch.Tensor)
    old = save_atomic(_with_python_words_as_lists(state), tmp_path / "old.ckpt")
    assert isinstance(torch.load(old, weights_only=True)["rng"]["python"]["state"], list)
    for ckpt in (new, old):
        resumed = run(tmp_path / f"resumed-{ckpt.stem}", 7, ckpt=ckpt, max_epochs=2)
        assert torch.equal(torch.stack(full.losses[10:]), torch.stack(resumed.losses))
        assert all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters()))
