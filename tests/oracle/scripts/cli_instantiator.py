"""A LightningCLI project's hyper-parameters: what `model.hparams` and `datamodule.hparams` hold when
the CLI built them (the config's section and Lightning's `_instantiator`), what hparams.yaml and the
checkpoint keep, and what `load_from_checkpoint` builds from that checkpoint, with fixed classes and in
subclass mode; a checkpoint naming another instantiator is refused."""

from pathlib import Path

import lightning.pytorch as pl
import record
import torch
import yaml
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader, TensorDataset


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4, samples: int = 16):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.hparams.samples, 4, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.hparams.batch_size)


class Base(pl.LightningModule):
    def __init__(self, lr: float = 0.1, hidden: int = 3, activation: torch.nn.Module | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.activation = activation if activation is not None else torch.nn.Identity()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden), self.activation, torch.nn.Linear(hidden, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Model(Base):
    def __init__(
        self, lr: float = 0.1, hidden: int = 3, activation: torch.nn.Module | None = None, tag: str = "a"
    ):
        super().__init__(lr, hidden, activation)
        self.save_hyperparameters()


def fit(name, *args, **kwargs):
    """`fit` under a LightningCLI with a CSVLogger in `name/`; what it built and wrote."""
    trainer = {
        "max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False,
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": name, "name": "logs"}},
    }  # fmt: skip
    cli = LightningCLI(
        *args, trainer_defaults=trainer, seed_everything_default=1, save_config_kwargs={"overwrite": True},
        args=["fit", "--trainer.default_root_dir", name, *kwargs.pop("argv")], **kwargs,
    )  # fmt: skip
    ckpt = next(Path(name).rglob("*.ckpt"))
    saved = torch.load(ckpt, weights_only=True)
    hparams_yaml = yaml.safe_load(next(Path(name).rglob("hparams.yaml")).read_text())
    record.put(f"{name}.model_hparams", dict(cli.model.hparams))
    record.put(f"{name}.data_hparams", dict(cli.datamodule.hparams))
    record.put(f"{name}.hparams_yaml", hparams_yaml)
    record.put(f"{name}.ckpt_hyper_parameters", saved["hyper_parameters"])
    record.put(f"{name}.ckpt_datamodule_hyper_parameters", saved.get("datamodule_hyper_parameters"))
    return cli, ckpt


def loaded(name, cls, ckpt, model):
    again = cls.load_from_checkpoint(ckpt)
    record.put(f"{name}.loaded_class", type(again).__name__)
    record.put(f"{name}.loaded_hparams", dict(again.hparams))
    record.put(f"{name}.loaded_activation", type(again.activation).__name__)
    record.put(
        f"{name}.loaded_weights_equal",
        all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values())),
    )


cli, ckpt = fit(
    "fixed", Model, Data, argv=["--model.lr=0.05", "--model.activation=torch.nn.Tanh", "--data.batch_size=8"]
)
loaded("fixed", Model, ckpt, cli.model)
record.put("fixed.loaded_data_hparams", dict(Data.load_from_checkpoint(ckpt).hparams))
record.put("fixed.overridden", dict(Model.load_from_checkpoint(ckpt, hidden=3, tag="b").hparams))

cli, ckpt = fit(
    "subclass", Base, Data, subclass_mode_model=True, argv=["--model=Model", "--model.init_args.tag=c"]
)
loaded("subclass", Base, ckpt, cli.model)

saved = torch.load(ckpt, weights_only=True)  # a checkpoint of one's own making names another instantiator
hyper_parameters = {**saved["hyper_parameters"], "_instantiator": "os.system"}
version = {"pytorch-lightning_version": saved.get("pytorch-lightning_version", "2.6.6")}
torch.save(
    {"state_dict": saved["state_dict"], "hyper_parameters": hyper_parameters, **version}, "forged.ckpt"
)
try:
    Model.load_from_checkpoint("forged.ckpt")
    record.put("forged_refused", False)
except ValueError as err:
    record.put("forged_refused", "os.system" in str(err))
