"""A small transformer language model as tutorials write it: token blocks from a synthetic corpus,
AdamW with a linear warm-up stepped every batch (`"interval": "step"`), gradient clipping,
dropout, a CSV logger and checkpoints on the validation loss; three epochs, then test."""

import math

import lightning as L
import record
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB, BLOCK = 32, 12


class TokenBlocks(Dataset):
    """Blocks of a synthetic corpus (a noisy counting sequence); input and next-token target."""

    def __init__(self, n_blocks: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(VOCAB, (n_blocks, 1), generator=g)
        noise = (torch.rand(n_blocks, BLOCK + 1, generator=g) < 0.1).long()
        self.data = (start + torch.arange(BLOCK + 1) + noise) % VOCAB

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i, :-1], self.data[i, 1:]


class PositionalEncoding(nn.Module):
    def __init__(self, dim, dropout, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_len, dim)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class LanguageModel(L.LightningModule):
    def __init__(
        self, dim: int = 32, heads: int = 2, layers: int = 2, lr: float = 3e-3, warmup_steps: int = 6
    ):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = PositionalEncoding(dim, dropout=0.1)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(BLOCK))

    def forward(self, tokens):
        h = self.encoder(self.pos(self.embed(tokens)), mask=self.mask, is_causal=True)
        return self.head(h)

    def _loss(self, batch):
        tokens, target = batch
        logits = self(tokens)
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_ppl", torch.exp(loss), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_ppl", torch.exp(loss))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        warmup = self.hparams.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main():
    L.seed_everything(1234)
    train = DataLoader(TokenBlocks(96, seed=0), batch_size=16, shuffle=True)
    val = DataLoader(TokenBlocks(32, seed=1), batch_size=16)
    model = LanguageModel()
    checkpoint = ModelCheckpoint(dirpath="ckpts", monitor="val_loss", save_top_k=2, save_last=True)
    trainer = L.Trainer(
        max_epochs=3,
        gradient_clip_val=0.5,
        callbacks=[checkpoint],
        logger=CSVLogger(save_dir=".", name="logs"),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=2,
    )
    trainer.fit(model, train, val)
    record.put("after_fit", record.metrics(trainer))
    record.put("global_step", trainer.global_step)
    record.put("lr", trainer.optimizers[0].param_groups[0]["lr"])
    record.weights("final", model)
    trainer.test(model, val)
    record.put("after_test", record.metrics(trainer))


if __name__ == "__main__":
    main()
