"""The error (type and message) `self.log` raises for values Lightning cannot log, and for
`on_step=False, on_epoch=False` and a name holding `/dataloader_idx_`."""

import lightning.pytorch as pl
import record
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from regressor import Regressor, loader

CATCHERS = {"ValueError": ValueError, "MisconfigurationException": MisconfigurationException}
CASES = {
    "None": dict(value=None),
    "str": dict(value="foo"),
    "list": dict(value=[1, 2]),
    "dict": dict(value={"a": 1}),
    "nested": dict(value={"a": {"b": 1}}),
    "vector": dict(value=torch.tensor([1.0, 2.0])),
    "nowhere": dict(value=1.0, on_step=False, on_epoch=False),
    "suffix": dict(value=1.0, name="x/dataloader_idx_0"),
}


class Model(Regressor):
    def training_step(self, batch, batch_idx):
        for case, kwargs in CASES.items():
            kwargs = dict(kwargs)
            name, value = kwargs.pop("name", "foo"), kwargs.pop("value")
            try:
                self.log(name, value, **kwargs)
            except Exception as err:  # noqa: BLE001 - what catches it is what is recorded
                caught_by = [name for name, kind in CATCHERS.items() if isinstance(err, kind)]
                message = str(err) if case != "nowhere" else "is not useful" in str(err)
                record.put(case, [caught_by, message])
        return super().training_step(batch, batch_idx)


trainer = pl.Trainer(
    fast_dev_run=1,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
    enable_checkpointing=False,
)
trainer.fit(Model(), loader(8, 0))
