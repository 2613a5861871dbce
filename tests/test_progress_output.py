"""Where the progress bar draws a bar and where it prints plain lines (a real pseudo-terminal)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge
from helpers import TinyModel
from surge.callbacks import ProgressBar


def _size(fd: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


def test_a_terminal_that_reports_no_width_gets_plain_lines(tmp_path):
    main, follower = pty.openpty()  # a new pseudo-terminal reports 0 columns until someone sizes it
    stream = os.fdopen(follower, "w", buffering=1)
    try:
        bar = ProgressBar(stream=stream)
        assert stream.isatty() and not bar._use_bar()
        _size(follower, 100)
        assert bar._use_bar()
        _size(follower, 0)
        g = torch.Generator().manual_seed(0)
        data = DataLoader(
            TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)),
            batch_size=8,
        )
        surge.Trainer(max_epochs=1, callbacks=[bar], default_root_dir=tmp_path, logger=False,
                      enable_checkpointing=False, enable_model_summary=False).fit(TinyModel(), data)  # fmt: skip
        stream.flush()
        written = os.read(main, 65536).decode()
    finally:
        stream.close()
        os.close(main)
    assert "Epoch 0 | 2/2 batches" in written and "step 2" in written, written
