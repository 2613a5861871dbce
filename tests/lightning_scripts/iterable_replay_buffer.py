"""A DQN-style replay buffer streamed through an IterableDataset (a DataLoader with no length), as
in Lightning's reinforcement-learning examples; unmodified. Three fits: a finite stream the epoch
exhausts, an endless one cut by limit_train_batches, and an endless one cut by max_steps."""

import json
from collections import deque

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset


class ReplayBuffer:
    def __init__(self, capacity):
        self.buffer = deque(maxlen=capacity)

    def append(self, experience):
        self.buffer.append(experience)

    def sample(self, batch_size):
        indices = torch.randint(len(self.buffer), (batch_size,)).tolist()
        return [self.buffer[i] for i in indices]


class RLDataset(IterableDataset):
    """Yields `sample_size` experiences from the buffer per pass; `sample_size=None`: endless."""

    def __init__(self, buffer, sample_size=None):
        self.buffer = buffer
        self.sample_size = sample_size
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        count = 0
        while self.sample_size is None or count < self.sample_size:
            yield from self.buffer.sample(1)
            count += 1


class DQN(L.LightningModule):
    def __init__(self, buffer, sample_size=None, gamma=0.9):
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.target_net = nn.Linear(4, 2)
        self.buffer = buffer
        self.sample_size = sample_size
        self.gamma = gamma
        self.epoch_starts = []
        self.dataset = None

    def on_train_epoch_start(self):
        self.epoch_starts.append(self.trainer.current_epoch)

    def training_step(self, batch, batch_idx):
        states, actions, rewards, next_states = batch
        q = self.net(states).gather(1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target = rewards + self.gamma * self.target_net(next_states).max(1)[0]
        loss = F.mse_loss(q, target)
        self.log("train_loss", loss)
        return loss

    def on_train_epoch_end(self):
        self.target_net.load_state_dict(self.net.state_dict())

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=1e-2)

    def train_dataloader(self):
        self.dataset = RLDataset(self.buffer, self.sample_size)
        return DataLoader(self.dataset, batch_size=16)


def filled_buffer():
    buffer = ReplayBuffer(1000)
    for _ in range(300):
        state = torch.randn(4)
        action = int(torch.randint(2, ()))
        buffer.append((state, action, float(state.sum() > 0), torch.randn(4)))
    return buffer


def fit(sample_size, **trainer_args):
    model = DQN(filled_buffer(), sample_size)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **trainer_args)
    trainer.fit(model)
    return {
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "epoch_starts": model.epoch_starts,
        "passes": model.dataset.passes,
        "num_training_batches": str(trainer.num_training_batches),
    }


def main():
    L.seed_everything(0)
    print(
        json.dumps(
            {
                "exhausted": fit(200, max_epochs=2),
                "limited": fit(None, max_epochs=3, limit_train_batches=5),
                "max_steps": fit(None, max_steps=7),
            }
        )
    )


if __name__ == "__main__":
    main()
