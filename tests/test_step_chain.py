"""How deep the optimizer step sits: the frames from `Trainer.fit` down to the optimizer's `step`,
all of them (torch's own `Optimizer.step` wrapper included), recorded by an optimizer whose `step`
looks at the stack. The loop's part is loop -> optimization -> precision, nothing between."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import surge

# The calls from `Trainer.fit` to `step` (frames below fit's, step's own included): `_fit` (the
# stage's guard and the fit's start and end are context managers around the loop's run), then the
# loop's 5 below `FitLoop.run`, torch's wrapper among them.
CALLS = 7
CHAIN = [
    "trainer/stages.py:fit",
    "trainer/__init__.py:_fit",
    "loops/fit.py:run",
    "loops/train_batches.py:_train_batches",
    "optim/__init__.py:step",
    "precision/base.py:optimizer_step",
    "optim/optimizer.py:wrapper",  # torch's profiling hook around every Optimizer.step
    "/test_step_chain.py:step",
]


class StackRecorder(torch.optim.SGD):
    def step(self, closure=None):
        frames, frame = [], sys._getframe()
        while frame is not None:
            code = frame.f_code
            frames.append(f"{'/'.join(code.co_filename.split('/')[-3:])}:{code.co_name}")
            if code.co_name == "fit" and "surge/trainer/" in code.co_filename:
                break
            frame = frame.f_back
        self.chain = frames[::-1]
        return super().step(closure)


class Model(surge.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        self.opt = StackRecorder(self.parameters(), lr=0.1)
        return self.opt


def test_trainer_fit_reaches_the_optimizer_step_in_seven_calls():
    model = Model()
    trainer = surge.Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    chain = model.opt.chain
    assert len(chain) - 1 == CALLS, chain
    assert all(f.endswith(name) for f, name in zip(chain, CHAIN, strict=True)), chain
