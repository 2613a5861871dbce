"""The process-wide state a spawned rank takes from the main process, as a forked rank (or a rank
that ran the script again) has it: the random streams, the last `seed_everything`, and torch's
determinism and cuDNN benchmark flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import seed


@dataclass(frozen=True)
class GlobalState:
    rng: dict[str, Any]
    seeding: seed.Seeding | None
    deterministic: bool
    deterministic_warn_only: bool
    cudnn_benchmark: bool

    @classmethod
    def capture(cls) -> GlobalState:
        return cls(
            rng=seed.rng_state(), seeding=seed.last_seeding(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            cudnn_benchmark=torch.backends.cudnn.benchmark,
        )  # fmt: skip

    def restore(self) -> None:
        seed.set_rng_state(self.rng)
        seed.remember_seeding(self.seeding)
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
