"""Lightning's transformer language-model example (`lightning.pytorch.demos.Transformer` on
`WikiText2`), a few dozen steps; unmodified. Writes the loss of every step to losses.json."""

import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos import Transformer, WikiText2
from torch.utils.data import DataLoader


class LightningTransformer(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.save_hyperparameters()
        self.model = Transformer(vocab_size=vocab_size, ninp=64, nhid=128, nlayers=1, dropout=0.1)

    def forward(self, inputs, target):
        return self.model(inputs, target)

    def training_step(self, batch, batch_idx):
        inputs, target = batch
        output = self(inputs, target)
        loss = torch.nn.functional.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=3e-3)


class LossRecorder(Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"].item())


def main():
    L.seed_everything(42)
    dataset = WikiText2(data_dir=Path("data"), block_size=20)
    dataloader = DataLoader(dataset, batch_size=16, shuffle=True)
    model = LightningTransformer(vocab_size=dataset.vocab_size)
    recorder = LossRecorder()
    trainer = L.Trainer(max_steps=40, gradient_clip_val=0.25, callbacks=[recorder], enable_progress_bar=False)
    trainer.fit(model=model, train_dataloaders=dataloader)
    ckpt = trainer.checkpoint_callback.best_model_path
    restored = LightningTransformer.load_from_checkpoint(ckpt)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))
    Path("losses.json").write_text(json.dumps(recorder.losses))
    print(
        json.dumps(
            {
                "global_step": trainer.global_step,
                "vocab_size": dataset.vocab_size,
                "checkpoint": str(Path(ckpt).relative_to(Path.cwd())),
                "restored_equal": same,
                "restored_hparams": dict(restored.hparams),
            }
        )
    )


if __name__ == "__main__":
    main()
