"""What `configure_gradient_clipping` and `trainer.gradient_clip_algorithm` get for each way of
setting clipping (nothing, a value alone, a value and an algorithm)."""

import lightning.pytorch as pl
import record
from lightning.pytorch.demos.boring_classes import BoringModel


class Clipping(BoringModel):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        algorithm = None if gradient_clip_algorithm is None else str(gradient_clip_algorithm.value
                                                                      if hasattr(gradient_clip_algorithm, "value")
                                                                      else gradient_clip_algorithm)  # fmt: skip
        record.append("hook", [gradient_clip_val, algorithm])
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)


for kwargs in (
    {},
    {"gradient_clip_val": 0.5},
    {"gradient_clip_val": 0.5, "gradient_clip_algorithm": "value"},
):
    pl.seed_everything(0)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False, **kwargs)  # fmt: skip
    model = Clipping()
    trainer.fit(model)
    algorithm = trainer.gradient_clip_algorithm
    record.append("attribute", None if algorithm is None else algorithm == "value")
    record.weights(f"clip{len(kwargs)}", model)
