"""An RL-style module with one optimizer stepped by hand: gradients accumulated over two batches,
two losses backpropagated through one shared graph (`retain_graph=True`), a scheduler the module
steps after each optimizer step, and in the second epoch `opt.step(closure=...)`, whose closure
runs the forward and `manual_backward`. A callback records the optimization hooks. Then
Lightning's own `ManualOptimBoringModel` for two short epochs."""

import lightning.pytorch as pl
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.demos.boring_classes import ManualOptimBoringModel
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 2


class ActorCritic(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
        self.policy = nn.Linear(16, 3)
        self.value = nn.Linear(16, 1)
        self.returned = []

    def losses(self, batch):
        obs, actions, returns = batch
        features = self.body(obs)
        log_probs = F.log_softmax(self.policy(features), dim=-1).gather(1, actions[:, None]).squeeze(1)
        values = self.value(features).squeeze(1)
        advantage = (returns - values).detach()
        return -(log_probs * advantage).mean(), F.mse_loss(values, returns)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        scheduler = self.lr_schedulers()
        if self.current_epoch == 0:
            policy_loss, value_loss = self.losses(batch)
            self.manual_backward(policy_loss / ACCUMULATE, retain_graph=True)
            self.manual_backward(value_loss / ACCUMULATE)
            if (batch_idx + 1) % ACCUMULATE == 0:
                self.clip_gradients(opt, gradient_clip_val=1.0)
                opt.step()
                opt.zero_grad()
                scheduler.step()
        else:

            def closure():
                opt.zero_grad()
                policy_loss, value_loss = self.losses(batch)
                self.manual_backward(policy_loss + value_loss)
                return policy_loss + value_loss

            self.returned.append(opt.step(closure=closure).item())
            scheduler.step()
            policy_loss, value_loss = self.losses(batch)
        self.log_dict({"policy_loss": policy_loss, "value_loss": value_loss})

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.97)]


class Hooks(pl.Callback):
    def __init__(self):
        self.calls = []

    def on_before_backward(self, trainer, pl_module, loss):
        self.calls.append(["on_before_backward", loss.item(), trainer.global_step])

    def on_after_backward(self, trainer, pl_module):
        self.calls.append(["on_after_backward", trainer.global_step])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in pl_module.parameters()]))
        self.calls.append(["on_before_optimizer_step", norm.item(), trainer.global_step])

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        self.calls.append(["on_before_zero_grad", trainer.global_step])


def main():
    pl.seed_everything(4)
    obs = torch.randn(48, 4)
    data = TensorDataset(obs, torch.randint(0, 3, (48,)), obs.sum(1))
    model, hooks = ActorCritic(), Hooks()
    trainer = pl.Trainer(
        max_epochs=2, logger=False, callbacks=[hooks], enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(model, DataLoader(data, batch_size=6))
    record.put("global_step", trainer.global_step)
    record.put("calls", hooks.calls)
    record.put("returned", model.returned)
    record.put("lr", trainer.optimizers[0].param_groups[0]["lr"])
    record.put("callback_metrics", record.metrics(trainer))
    record.weights("actor_critic", model)

    boring = ManualOptimBoringModel()
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=4, limit_val_batches=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(boring)
    record.put("boring_global_step", trainer.global_step)
    record.put("boring_optimizer", type(boring.optimizers()).__name__)
    record.weights("boring", boring)


if __name__ == "__main__":
    main()
