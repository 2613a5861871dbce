"""A GAN with manual optimization, two optimizers and two schedulers the module steps itself at
each epoch's last batch, as in Lightning's manual-optimization docs; unmodified."""

import json

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = 8, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent_dim, 16), nn.ReLU(), nn.Linear(16, 4))
        self.discriminator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
        self.lrs = []  # (generator lr, discriminator lr) used at each batch
        self.frozen_while_generating = []

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        self.lrs.append((opt_g.param_groups[0]["lr"], opt_d.param_groups[0]["lr"]))
        z = torch.randn(real.shape[0], self.hparams.latent_dim).type_as(real)
        ones = torch.ones(real.shape[0], 1).type_as(real)
        zeros = torch.zeros(real.shape[0], 1).type_as(real)

        self.toggle_optimizer(opt_g)
        self.frozen_while_generating.append(not any(p.requires_grad for p in self.discriminator.parameters()))
        fake = self.generator(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        d_loss = (real_loss + fake_loss) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

        if self.trainer.is_last_batch:
            sch_g, sch_d = self.lr_schedulers()
            sch_g.step()
            sch_d.step()

    def configure_optimizers(self):
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        sch_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)
        sch_d = torch.optim.lr_scheduler.ExponentialLR(opt_d, gamma=0.9)
        return [opt_g, opt_d], [sch_g, sch_d]


def main():
    L.seed_everything(3)
    real = torch.randn(40, 4) * 0.5 + 2.0
    loader = DataLoader(TensorDataset(real), batch_size=10)  # 4 batches an epoch
    model = GAN()
    trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, loader)
    all_trainable = all(p.requires_grad for p in model.parameters())
    print(
        json.dumps(
            {
                "global_step": trainer.global_step,
                "current_epoch": trainer.current_epoch,
                "lrs": model.lrs,
                "final_lrs": [s.get_last_lr()[0] for s in model.lr_schedulers()],
                "frozen_while_generating": all(model.frozen_while_generating),
                "all_trainable_after": all_trainable,
                "callback_metrics": sorted(trainer.callback_metrics),
            }
        )
    )


if __name__ == "__main__":
    main()
