"""`lightning.pytorch.core.optimizer.LightningOptimizer`: surge's own, the object `self.optimizers()`
hands out (see `surge.optim.manual`)."""

from ...optim.manual import LightningOptimizer

__all__ = ["LightningOptimizer"]
