"""A GAN trained with manual optimization, as Lightning's docs write one: two optimizers toggled in
turn, `manual_backward`, gradients clipped with `self.clip_gradients`, schedulers the module steps
at each epoch's end, validation every epoch. Callbacks record every optimization hook with its
arguments, log gradient norms in `on_before_optimizer_step` and count non-finite gradients in
`on_after_backward`; metrics go to a CSVLogger.

Arguments: `ddp` runs it on two CPU processes (DDP over gloo); each rank then records its own hook calls."""

import os
import sys

import lightning.pytorch as pl
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DDP = "ddp" in sys.argv[1:]


def rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def describe(value):
    """A hook argument as the record compares it: tensors by value, optimizers by their index."""
    if isinstance(value, torch.Tensor):
        return ["tensor", value.detach().tolist(), value.requires_grad]
    if isinstance(value, torch.optim.Optimizer):
        return ["optimizer", type(value).__name__, isinstance(value, LightningOptimizer)]
    return repr(value)


class GAN(pl.LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 0.02):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent_dim, 16), nn.Tanh(), nn.Linear(16, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
        self.calls = []
        # The noise has a generator of its own, so what validation draws from the global one (a
        # matter of the validation loop, not of manual optimization) cannot change it.
        self.noise = torch.Generator().manual_seed(5)

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        assert isinstance(opt_g, LightningOptimizer) and isinstance(opt_g, torch.optim.Adam)
        assert opt_g.optimizer is self.optimizers(use_pl_optimizer=False)[0]
        z = torch.randn(real.shape[0], self.hparams.latent_dim, generator=self.noise)
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)

        self.toggle_optimizer(opt_g)
        fake = self(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        self.clip_gradients(opt_g, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        d_loss = (real_loss + fake_loss) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=0.05, gradient_clip_algorithm="value")
        opt_d.step()
        self.untoggle_optimizer(opt_d)

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)
        if self.trainer.is_last_batch:
            for scheduler in self.lr_schedulers():
                scheduler.step()
        return d_loss

    def validation_step(self, batch, batch_idx):
        (real,) = batch
        self.log("val_d_real", torch.sigmoid(self.discriminator(real)).mean(), sync_dist=True)

    def on_before_backward(self, loss):
        self.calls.append(["module", "on_before_backward", describe(loss), self.global_step])

    def on_after_backward(self):
        self.calls.append(["module", "on_after_backward", self.global_step])

    def on_before_optimizer_step(self, optimizer):
        self.calls.append(["module", "on_before_optimizer_step", describe(optimizer), self.global_step])

    def on_before_zero_grad(self, optimizer):
        self.calls.append(["module", "on_before_zero_grad", describe(optimizer), self.global_step])

    def configure_optimizers(self):
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        sch_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)
        sch_d = torch.optim.lr_scheduler.ExponentialLR(opt_d, gamma=0.9)
        return [opt_g, opt_d], [sch_g, sch_d]


class HookRecorder(pl.Callback):
    """Every optimization hook, with its arguments and the step it ran at."""

    def __init__(self, calls):
        self.calls = calls

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.calls.append(["callback", "on_train_batch_start", batch_idx, trainer.global_step])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.calls.append(
            ["callback", "on_train_batch_end", describe_outputs(outputs), batch_idx, trainer.global_step]
        )

    def on_before_backward(self, trainer, pl_module, loss):
        self.calls.append(["callback", "on_before_backward", describe(loss), trainer.global_step])

    def on_after_backward(self, trainer, pl_module):
        self.calls.append(["callback", "on_after_backward", trainer.global_step])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        index = [o is optimizer for o in trainer.optimizers].index(True)
        self.calls.append(
            ["callback", "on_before_optimizer_step", index, describe(optimizer), trainer.global_step]
        )

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        self.calls.append(["callback", "on_before_zero_grad", describe(optimizer), trainer.global_step])


def describe_outputs(outputs):
    if isinstance(outputs, dict):
        return {k: describe(v) for k, v in outputs.items()}
    return describe(outputs)


class GradNormLogger(pl.Callback):
    """The gradient norm of each optimizer's parameters, logged before its step."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        index = [o is optimizer for o in trainer.optimizers].index(True)
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        pl_module.log(f"grad_norm/opt{index}", norm)


class NonFiniteGradients(pl.Callback):
    """Counts parameters whose gradient holds inf or NaN after each backward."""

    def __init__(self):
        self.checked = 0
        self.bad = 0

    def on_after_backward(self, trainer, pl_module):
        self.checked += 1
        self.bad += sum(
            int(not torch.isfinite(p.grad).all()) for p in pl_module.parameters() if p.grad is not None
        )


def shard(dataset):
    return DistributedSampler(dataset, num_replicas=2, rank=rank(), shuffle=False)


def main():
    pl.seed_everything(11)
    data = torch.randn(96, 2) * 0.3 + torch.tensor([1.0, -1.0])
    train_set, val_set = TensorDataset(data[:64]), TensorDataset(data[64:])
    if DDP:  # each rank's share said explicitly (the frameworks shard a sequential sampler differently)
        train = DataLoader(train_set, batch_size=4, sampler=shard(train_set))
        val = DataLoader(val_set, batch_size=8, sampler=shard(val_set))
    else:
        train = DataLoader(train_set, batch_size=8)
        val = DataLoader(val_set, batch_size=16)
    model = GAN()
    nonfinite = NonFiniteGradients()
    trainer = pl.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=2 if DDP else 1,
        # The generator's backward leaves the toggled-off discriminator without gradients.
        strategy="ddp_find_unused_parameters_true" if DDP else "auto",
        log_every_n_steps=2,
        logger=CSVLogger(".", name="logs", version=0),
        callbacks=[HookRecorder(model.calls), GradNormLogger(), nonfinite],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, train, val)
    if DDP:
        record.PER_RANK = True
    record.put("global_step", trainer.global_step)
    record.put("current_epoch", trainer.current_epoch)
    record.put("calls", model.calls)
    record.put("hook_counts", count(model.calls))
    record.put("nonfinite", [nonfinite.checked, nonfinite.bad])
    record.put("callback_metrics", record.metrics(trainer))
    record.put("lrs", [[g["lr"] for g in opt.param_groups] for opt in trainer.optimizers])
    record.put("requires_grad", all(p.requires_grad for p in model.parameters()))
    record.put("optimizers", [type(o).__name__ for o in model.optimizers()])
    record.put("raw_optimizers", [type(o).__name__ for o in model.optimizers(use_pl_optimizer=False)])
    record.weights("final", model)


def count(calls):
    counts = {}
    for call in calls:
        key = f"{call[0]}.{call[1]}"
        counts[key] = counts.get(key, 0) + 1
    return counts


if __name__ == "__main__":
    main()
