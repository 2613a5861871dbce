"""Resume after StochasticWeightAveraging began or BackboneFinetuning unfroze the backbone: from
every save point (epoch ends, inside epochs, before and after the change), the resumed fit ends
with the uninterrupted fit's weights, average, param groups, rates and optimizer state
(`torch.equal`). What cannot resume is refused with a CheckpointError naming the callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

import surge
from helpers import make_dataset
from surge.callbacks import BackboneFinetuning, ModelCheckpoint, StochasticWeightAveraging
from surge.errors import CheckpointError

EPOCHS = 5  # 4 batches an epoch: 20 optimizer steps


class SWAModel(surge.Module):
    """BatchNorm (SWA's last pass recomputes it), dropout (the RNG matters) and a StepLR that SWALR replaces."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, 2)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)]


class BackboneModel(surge.Module):
    """A backbone and a head; the optimizer holds only what requires grad (Lightning's recipe)."""

    def __init__(self, shifted: bool = False) -> None:
        super().__init__()
        first: list[nn.Module] = [nn.Identity()] if shifted else []  # shifted: the backbone's names differ
        self.backbone = nn.Sequential(*first, nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(8, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1, momentum=0.9)


def swa() -> StochasticWeightAveraging:
    return StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3, annealing_epochs=2)  # from epoch 2


def finetuning() -> BackboneFinetuning:
    return BackboneFinetuning(unfreeze_backbone_at_epoch=2)


def fit(root: Path, model: surge.Module, callback: Any, seed: int, ckpt: Path | None = None, **kw: Any):
    surge.seed_everything(seed)
    trainer = surge.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )
    trainer.callbacks.insert(0, callback)
    loader = DataLoader(make_dataset(32), batch_size=8, shuffle=True)
    trainer.fit(model, loader, ckpt_path=ckpt)
    return trainer


def uninterrupted(root: Path, model: surge.Module, callback: Any) -> surge.Trainer:
    """The reference fit, writing a checkpoint at every epoch end and every 3 steps."""
    saves = [
        ModelCheckpoint(dirpath=root / "epochs", filename="{epoch}", every_n_epochs=1, save_top_k=-1),
        ModelCheckpoint(dirpath=root / "steps", filename="{step}", every_n_train_steps=3, save_top_k=-1),
    ]
    return fit(root / "run", model, callback, seed=3, callbacks=saves)


def resume(root: Path, model: surge.Module, callback: Any, ckpt: Path) -> surge.Trainer:
    return fit(root, model, callback, seed=99, ckpt=ckpt, enable_checkpointing=False)


def save_points(root: Path) -> dict[str, Path]:
    # 4 steps an epoch: step 6 is inside epoch 1, 9 inside 2, 12 its last batch, 15 inside 3
    points = {f"end of epoch {e}": root / "epochs" / f"epoch={e}.ckpt" for e in range(4)}
    points.update({f"step {s}": root / "steps" / f"step={s}.ckpt" for s in (6, 9, 12, 15)})
    assert all(p.is_file() for p in points.values()), sorted(map(str, root.rglob("*.ckpt")))
    return points


def optimizer_differences(a: surge.Trainer, b: surge.Trainer) -> list[str]:
    out = []
    ga, gb = a.optimizers[0].param_groups, b.optimizers[0].param_groups
    if [g["lr"] for g in ga] != [g["lr"] for g in gb]:
        out.append(f"param group rates {[g['lr'] for g in ga]} != {[g['lr'] for g in gb]}")
    sa, sb = a.optimizers[0].state_dict()["state"], b.optimizers[0].state_dict()["state"]
    if sa.keys() != sb.keys():
        out.append(f"optimizer state of parameters {sorted(sa)} != {sorted(sb)}")
    out += [
        f"momentum {i}"
        for i in sa
        if i in sb and not torch.equal(sa[i]["momentum_buffer"], sb[i]["momentum_buffer"])
    ]
    return out


def weight_differences(a: nn.Module, b: nn.Module) -> list[str]:
    sa, sb = a.state_dict(), b.state_dict()
    return [name for name in sa if not torch.equal(sa[name], sb[name])]


# -- StochasticWeightAveraging ---------------------------------------------------------------


@pytest.fixture(scope="module")
def swa_reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("swa")
    torch.manual_seed(0)
    model, callback = SWAModel(), swa()
    trainer = uninterrupted(root, model, callback)
    return root, model, trainer, callback


def test_swa_resumes_exactly_before_and_after_averaging_began(swa_reference, tmp_path):
    root, model, trainer, callback = swa_reference
    assert (
        int(callback.n_averaged) == 3 and type(trainer.lr_scheduler_configs[0].scheduler).__name__ == "SWALR"
    )
    for name, ckpt in save_points(root).items():
        torch.manual_seed(5)  # another initialisation: the checkpoint must supply everything
        resumed_model, resumed_cb = SWAModel(), swa()
        resumed = resume(tmp_path / name.replace(" ", "_"), resumed_model, resumed_cb, ckpt)
        problems = weight_differences(model, resumed_model) + optimizer_differences(trainer, resumed)
        assert resumed_cb._average is not None and callback._average is not None
        if not all(torch.equal(p, q) for p, q in zip(callback._average, resumed_cb._average)):
            problems.append("the average")
        if int(resumed_cb.n_averaged) != int(callback.n_averaged):
            problems.append(f"n_averaged {int(resumed_cb.n_averaged)}")
        sched, resumed_sched = trainer.lr_scheduler_configs, resumed.lr_scheduler_configs
        if (
            len(resumed_sched) != 1
            or sched[0].scheduler.state_dict() != resumed_sched[0].scheduler.state_dict()
        ):
            problems.append(f"the scheduler: {[type(c.scheduler).__name__ for c in resumed_sched]}")
        assert not problems, f"resumed from {name}: {problems}"


def test_swa_checkpoint_records_that_averaging_began(swa_reference):
    root = swa_reference[0]
    before = torch.load(root / "epochs" / "epoch=1.ckpt", weights_only=True)
    after = torch.load(root / "steps" / "step=9.ckpt", weights_only=True)
    assert before["callbacks"]["StochasticWeightAveraging"]["initialized"] is False
    assert after["callbacks"]["StochasticWeightAveraging"]["initialized"] is True
    assert after["callbacks"]["StochasticWeightAveraging"]["n_averaged"] == 1


def test_swa_checkpoint_without_the_callback_is_refused(swa_reference, tmp_path):
    ckpt = swa_reference[0] / "steps" / "step=9.ckpt"
    with pytest.raises(CheckpointError, match="StochasticWeightAveraging"):
        resume(tmp_path, SWAModel(), surge.callbacks.Callback(), ckpt)


def test_swa_average_of_another_model_is_refused(swa_reference, tmp_path):
    ckpt = swa_reference[0] / "steps" / "step=9.ckpt"
    model = SWAModel(hidden=6)
    model.strict_loading = False  # the weights that fit load; the average cannot
    with pytest.raises(CheckpointError, match="StochasticWeightAveraging: the checkpoint's average"):
        resume(tmp_path, model, swa(), ckpt)


# -- BackboneFinetuning ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def finetuning_reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetuning")
    torch.manual_seed(0)
    model, callback = BackboneModel(), finetuning()
    trainer = uninterrupted(root, model, callback)
    return root, model, trainer, callback


def test_backbone_finetuning_resumes_exactly_before_and_after_the_unfreeze(finetuning_reference, tmp_path):
    root, model, trainer, callback = finetuning_reference
    assert len(trainer.optimizers[0].param_groups) == 2
    for name, ckpt in save_points(root).items():
        torch.manual_seed(5)
        resumed_model, resumed_cb = BackboneModel(), finetuning()
        resumed = resume(tmp_path / name.replace(" ", "_"), resumed_model, resumed_cb, ckpt)
        problems = weight_differences(model, resumed_model) + optimizer_differences(trainer, resumed)
        if len(resumed.optimizers[0].param_groups) != 2:
            problems.append(f"{len(resumed.optimizers[0].param_groups)} param groups")
        if not all(p.requires_grad for p in resumed_model.parameters()):
            problems.append("the backbone is still frozen")
        if resumed_cb.previous_backbone_lr != callback.previous_backbone_lr:
            problems.append(f"previous_backbone_lr {resumed_cb.previous_backbone_lr}")
        assert not problems, f"resumed from {name}: {problems}"


def test_backbone_finetuning_resume_inside_the_unfreeze_epoch_runs_it_once(finetuning_reference, tmp_path):
    ckpt = finetuning_reference[0] / "steps" / "step=9.ckpt"  # inside epoch 2, after its start unfroze
    calls: list[int] = []

    class Counting(BackboneFinetuning):
        state_key = "BackboneFinetuning"  # the saved state is this callback's

        def finetune_function(self, pl_module, epoch, optimizer):
            calls.append(epoch)
            super().finetune_function(pl_module, epoch, optimizer)

    resume(tmp_path, BackboneModel(), Counting(unfreeze_backbone_at_epoch=2), ckpt)
    assert calls == [3, 4]


def test_backbone_finetuning_checkpoint_without_the_callback_is_refused(finetuning_reference, tmp_path):
    ckpt = finetuning_reference[0] / "epochs" / "epoch=0.ckpt"  # before the unfreeze: still needs it
    with pytest.raises(CheckpointError, match="BackboneFinetuning"):
        resume(tmp_path, BackboneModel(), surge.callbacks.Callback(), ckpt)


def test_backbone_finetuning_param_groups_of_another_model_are_refused(finetuning_reference, tmp_path):
    ckpt = finetuning_reference[0] / "steps" / "step=9.ckpt"
    model = BackboneModel(shifted=True)
    model.strict_loading = False
    with pytest.raises(
        CheckpointError, match="BackboneFinetuning: the checkpoint names parameters this model lacks"
    ):
        resume(tmp_path, model, finetuning(), ckpt)
