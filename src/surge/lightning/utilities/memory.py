"""`lightning.pytorch.utilities.memory`: telling an out-of-memory error from others (what a
batch-size search retries on), and the helpers that go with it."""

from __future__ import annotations

import gc
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection


def is_cuda_out_of_memory(exception: BaseException) -> bool:
    """A CUDA allocation that failed (torch's OutOfMemoryError is a RuntimeError)."""
    text = str(exception)
    return isinstance(exception, RuntimeError) and "CUDA" in text and "out of memory" in text


def is_cudnn_snafu(exception: BaseException) -> bool:
    """cuDNN failing to run a kernel, which it reports when memory is short."""
    return isinstance(exception, RuntimeError) and "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED" in str(exception)


def is_out_of_cpu_memory(exception: BaseException) -> bool:
    """A host allocation that failed."""
    return isinstance(exception, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(
        exception
    )


def is_oom_error(exception: BaseException) -> bool:
    """Any of the three out-of-memory failures above."""
    return is_cuda_out_of_memory(exception) or is_cudnn_snafu(exception) or is_out_of_cpu_memory(exception)


def garbage_collection_cuda() -> None:
    """Collect garbage and give cached CUDA memory back (nothing to give without CUDA)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def recursive_detach(in_dict: Any, to_cpu: bool = False) -> Any:
    """Every tensor in `in_dict` detached (and moved to the CPU with `to_cpu`)."""
    return apply_to_collection(in_dict, torch.Tensor, lambda t: t.detach().cpu() if to_cpu else t.detach())


__all__ = [
    "garbage_collection_cuda", "is_cuda_out_of_memory", "is_cudnn_snafu", "is_oom_error",
    "is_out_of_cpu_memory", "recursive_detach",
]  # fmt: skip
