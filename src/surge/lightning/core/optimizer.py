"""`lightning.pytorch.core.optimizer.LightningOptimizer`: surge's own, the object `self.optimizers()`
hands out (see `surge.manual_optim`)."""

from ...manual_optim import LightningOptimizer

__all__ = ["LightningOptimizer"]
