"""Lightning's transformer demo: `Transformer`, `PositionalEncoding`, `LightningTransformer`, and
`WikiText2`, which here GENERATES its text instead of downloading it (see its docstring)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from ...module import Module


class PositionalEncoding(nn.Module):
    """The sinusoidal position encoding added to token embeddings, then dropout."""

    pe: Tensor

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_len, dim)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.pe[:, : x.size(1)])


class Transformer(nn.Module):
    """An encoder-decoder `nn.Transformer` language model: `forward(inputs, target)` returns
    log-probabilities of shape (batch * length, vocab_size), the target already shifted by one."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200,
        nlayers: int = 2, dropout: float = 0.2,
    ) -> None:  # fmt: skip
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp, nhead=nhead, num_encoder_layers=nlayers, num_decoder_layers=nlayers,
            dim_feedforward=nhid, dropout=dropout, batch_first=True,
        )  # fmt: skip
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp, self.vocab_size = ninp, vocab_size

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        t = inputs.shape[1]
        if mask is None:  # causal: position i sees targets up to i
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=inputs.device)
        src = self.pos_encoder(self.embedding(inputs) * math.sqrt(self.ninp))
        tgt = self.pos_encoder(self.embedding(target) * math.sqrt(self.ninp))
        output = self.decoder(self.transformer(src, tgt, tgt_mask=mask))
        return F.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class Dictionary:
    """Words and their indices (`word2idx`, `idx2word`)."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


class WikiText2(Dataset):
    """A WikiText-2-shaped language-modelling dataset whose text is GENERATED, never downloaded.

    surge cannot fetch data, so instead of Wikipedia's text this makes `num_tokens` words from a
    fixed Markov chain over `vocab_size` made-up words (each word is followed by one of
    `successors` others), from its own generator seeded with `seed`: the same text every time,
    and torch's global random stream is not touched. A model can learn it (the loss falls from
    log(vocab_size) towards log(successors)). Item i is `(inputs, target)`: `block_size` tokens
    and the same shifted by one, as in Lightning's `WikiText2`. `data_dir` and `download`
    are accepted for Lightning's signature and unused: nothing is read from or written to disk.
    """

    def __init__(
        self, data_dir: str | Path = Path("./data"), block_size: int = 35, download: bool = True,
        vocab_size: int = 1000, num_tokens: int = 20_000, successors: int = 4, seed: int = 0,
    ) -> None:  # fmt: skip
        self.block_size = block_size
        self.dictionary = Dictionary()
        for i in range(vocab_size):
            self.dictionary.add_word(f"w{i}")
        self.data = _markov_text(vocab_size, num_tokens, successors, seed)

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1 : end + 1]


def _markov_text(vocab_size: int, num_tokens: int, successors: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    table = torch.randint(vocab_size, (vocab_size, successors), generator=gen).tolist()
    choices = torch.randint(successors, (num_tokens,), generator=gen).tolist()
    tokens, word = [], 0
    for choice in choices:
        tokens.append(word)
        word = table[word][choice]
    return torch.tensor(tokens, dtype=torch.long)


class LightningTransformer(Module):
    """`Transformer` trained by SGD (lr 0.1) on `WikiText2`'s next-word NLL."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())
