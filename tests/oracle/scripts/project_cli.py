"""The transformer language model (project_transformer_lm.py) behind a LightningCLI, as projects
ship a `main.py`: `main.py fit --print_config > config.yaml`, then `main.py fit --config config.yaml`."""

import lightning as L
import record
from lightning.pytorch.cli import LightningCLI
from project_transformer_lm import LanguageModel, TokenBlocks
from torch.utils.data import DataLoader


class TokenDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 16, train_blocks: int = 96, val_blocks: int = 32):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str):
        self.train_set = TokenBlocks(self.hparams.train_blocks, seed=0)
        self.val_set = TokenBlocks(self.hparams.val_blocks, seed=1)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class LanguageModelCLI(LightningCLI):
    def after_fit(self):
        record.put("after_fit", record.metrics(self.trainer))
        record.put("global_step", self.trainer.global_step)
        record.weights("final", self.model)


def main():
    LanguageModelCLI(
        LanguageModel,
        TokenDataModule,
        seed_everything_default=1234,
        trainer_defaults={
            "max_epochs": 3,
            "gradient_clip_val": 0.5,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": ".", "name": "logs"},
            },
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 2,
        },
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
