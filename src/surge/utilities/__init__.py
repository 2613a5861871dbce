"""Small tools about a model: its gradients' norms (`grad_norm`) and the FLOPs of a call (`measure_flops`)."""

from __future__ import annotations

from .flops import measure_flops
from .grad_norm import grad_norm

__all__ = ["grad_norm", "measure_flops"]
