"""An on-policy reinforcement-learning loop as Lightning's PPO example writes it: the train loader
streams an IterableDataset whose iterator plays one epoch of a toy environment, yields the epoch's
samples in batches (the last one short), and only then updates the episode statistics; the module
logs them as Python floats, `on_epoch=True` without a batch size, and steps two optimizers by hand."""

import lightning as L
import record
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, IterableDataset


class Rollouts(IterableDataset):
    """Each pass plays an epoch: what `generate()` yields."""

    def __init__(self, generate):
        self.generate = generate

    def __iter__(self):
        return self.generate()


class Agent(L.LightningModule):
    def __init__(self, steps_per_epoch: int = 13, batch_size: int = 5):
        super().__init__()
        self.automatic_optimization = False
        self.steps_per_epoch, self.batch_size = steps_per_epoch, batch_size
        self.actor, self.critic = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
        self.env = torch.Generator().manual_seed(7)  # the toy environment's own randomness
        self.avg_ep_len, self.avg_ep_reward = 0.0, 0.0

    def generate(self):
        samples, lengths, rewards, length, reward = [], [], [], 0, 0.0
        for step in range(self.steps_per_epoch):
            state = torch.rand(3, generator=self.env)
            with torch.no_grad():
                value = self.critic(state)
            length, reward = length + 1, reward + float(state[0])
            samples.append((state, value.squeeze() - state[1]))
            done = bool(torch.rand(1, generator=self.env) < 0.3)
            if done or step == self.steps_per_epoch - 1:
                lengths.append(length)
                rewards.append(reward)
                length, reward = 0, 0.0
        yield from samples
        # the episode statistics change once the epoch's samples are out, as the example's do
        self.avg_ep_len = self.steps_per_epoch / len(lengths)
        self.avg_ep_reward = sum(rewards) / len(rewards)

    def training_step(self, batch):
        state, advantage = batch
        record.append("seen", [len(state), self.avg_ep_len])
        self.log("avg_ep_len", self.avg_ep_len, prog_bar=True, on_step=False, on_epoch=True)
        self.log("avg_ep_reward", self.avg_ep_reward, prog_bar=True, on_step=False, on_epoch=True)
        self.log("ep_len", self.avg_ep_len, on_step=True, on_epoch=True, batch_size=len(state))
        actor_opt, critic_opt = self.optimizers()
        loss_actor = -(self.actor(state).log_softmax(-1)[:, 0] * advantage).mean()
        self.manual_backward(loss_actor)
        actor_opt.step()
        actor_opt.zero_grad()
        loss_critic = (self.critic(state).squeeze(-1) - advantage).pow(2).mean()
        self.manual_backward(loss_critic)
        critic_opt.step()
        critic_opt.zero_grad()
        self.log("loss_critic", loss_critic, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.actor.parameters(), lr=0.01), torch.optim.Adam(
            self.critic.parameters(), lr=0.01
        )

    def train_dataloader(self):
        return DataLoader(Rollouts(self.generate), batch_size=self.batch_size)


L.seed_everything(0)
agent = Agent()
trainer = L.Trainer(
    max_epochs=3, logger=CSVLogger(".", name="logs"), log_every_n_steps=1, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)  # fmt: skip
trainer.fit(agent)
record.put("callback_metrics", record.metrics(trainer))
record.put("global_step", trainer.global_step)
record.weights("final", agent)
