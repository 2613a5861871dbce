"""A DQN-style reinforcement-learning loop as Lightning's RL examples write it: an agent steps a
toy environment and fills a replay buffer; the training data is an IterableDataset sampling the
buffer (no length), epochs cut by `limit_train_batches`, the run by `max_steps`; a target network
synced every few steps; a fixed set of states validated each epoch."""

from collections import deque, namedtuple

import lightning as L
import numpy as np
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

Experience = namedtuple("Experience", ["state", "action", "reward", "done", "next_state"])


class LineWorld:
    """Walk left or right on a line; reward for reaching the right end."""

    def __init__(self, size=6):
        self.size, self.pos = size, 0

    def reset(self):
        self.pos = int(np.random.randint(self.size - 1))
        return self.observe()

    def observe(self):
        state = np.zeros(self.size, dtype=np.float32)
        state[self.pos] = 1.0
        return state

    def step(self, action):
        self.pos = min(max(self.pos + (1 if action == 1 else -1), 0), self.size - 1)
        done = self.pos == self.size - 1
        return self.observe(), float(done) - 0.01, done


class ReplayBuffer:
    def __init__(self, capacity):
        self.buffer = deque(maxlen=capacity)

    def __len__(self):
        return len(self.buffer)

    def append(self, experience):
        self.buffer.append(experience)

    def sample(self, batch_size):
        indices = np.random.choice(len(self.buffer), batch_size, replace=False)
        states, actions, rewards, dones, next_states = zip(*(self.buffer[i] for i in indices))
        return (
            np.array(states),
            np.array(actions),
            np.array(rewards, dtype=np.float32),
            np.array(dones, dtype=bool),
            np.array(next_states),
        )


class RLDataset(IterableDataset):
    def __init__(self, buffer, sample_size=32):
        self.buffer, self.sample_size = buffer, sample_size

    def __iter__(self):
        states, actions, rewards, dones, new_states = self.buffer.sample(self.sample_size)
        for i in range(len(dones)):
            yield states[i], actions[i], rewards[i], dones[i], new_states[i]


class Agent:
    def __init__(self, env, buffer):
        self.env, self.buffer = env, buffer
        self.state = env.reset()

    def play_step(self, net, epsilon):
        if np.random.random() < epsilon:
            action = int(np.random.randint(2))
        else:
            with torch.no_grad():
                action = int(net(torch.tensor(self.state).unsqueeze(0)).argmax(1).item())
        new_state, reward, done = self.env.step(action)
        self.buffer.append(Experience(self.state, action, reward, done, new_state))
        self.state = self.env.reset() if done else new_state
        return reward, done


class DQNLightning(L.LightningModule):
    def __init__(self, batch_size=8, lr=1e-2, gamma=0.9, sync_rate=5, warm_start_steps=40, eps=0.3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 2))
        self.target_net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 2))
        self.target_net.load_state_dict(self.net.state_dict())
        self.buffer = ReplayBuffer(200)
        self.agent = Agent(LineWorld(), self.buffer)
        self.total_reward = 0.0
        for _ in range(warm_start_steps):
            self.agent.play_step(self.net, epsilon=1.0)

    def forward(self, x):
        return self.net(x)

    def dqn_mse_loss(self, batch):
        states, actions, rewards, dones, next_states = batch
        q = self.net(states).gather(1, actions.long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_q = self.target_net(next_states).max(1)[0]
            next_q[dones] = 0.0
        return F.mse_loss(q, rewards + self.hparams.gamma * next_q)

    def training_step(self, batch, batch_idx):
        reward, done = self.agent.play_step(self.net, self.hparams.eps)
        self.total_reward += reward
        loss = self.dqn_mse_loss(batch)
        if self.global_step % self.hparams.sync_rate == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        self.log("total_reward", self.total_reward, prog_bar=True)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        (states,) = batch
        self.log("val_q_max", self.net(states).max(1)[0].mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.hparams.lr)

    def train_dataloader(self):
        return DataLoader(RLDataset(self.buffer, sample_size=32), batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.eye(6)), batch_size=3, shuffle=True)


def main():
    L.seed_everything(11)
    model = DQNLightning()
    trainer = L.Trainer(
        max_steps=14,
        limit_train_batches=4,
        logger=CSVLogger(save_dir=".", name="logs"),
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model)
    record.put("after_fit", record.metrics(trainer))
    record.put("epochs", [trainer.current_epoch, trainer.global_step])
    record.put("buffer", len(model.buffer))
    record.weights("final", model)


if __name__ == "__main__":
    main()
