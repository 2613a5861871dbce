"""Names surge provides where it used to refuse them at import: their results, recorded under both."""

import record
from lightning.fabric.accelerators.cuda import is_cuda_available, num_cuda_devices
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.plugins.precision import Precision as FabricPrecision
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from lightning.pytorch.plugins.io import TorchCheckpointIO as PytorchTorchCheckpointIO
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy, StrategyRegistry
from lightning.pytorch.utilities.parsing import get_init_args
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature


class Base:
    def __init__(self, a, b=2, *args, c=3, **kwargs):
        self.seen = get_init_args(__import__("inspect").currentframe())
        _ = __class__  # noqa: F821  (what super() references)


class Hooks:
    def plain(self, batch, batch_idx): ...
    def star(self, batch, *args): ...
    def one(self, batch): ...


numbers = [0, 1, 12, 0.5, 1.0, 1e-9, 123.456, 1234567890.5, "3", "x", "1.5", "inf"]
record.put("format_num", [Tqdm.format_num(n) for n in numbers])
record.put("init_args", {k: repr(v) for k, v in Base(1, 5, 7, 8, c=4, d=9).seen.items()})
record.put("init_args_outside", get_init_args(__import__("inspect").currentframe()))
record.put("in_signature", [
    is_param_in_hook_signature(h, p, explicit=e, min_args=m)
    for h in (Hooks.plain, Hooks.star, Hooks.one)
    for p, e, m in (("batch_idx", False, None), ("batch_idx", True, None), ("dataloader_idx", False, 2), ("x", True, 3))
])  # fmt: skip
record.put("cuda", [num_cuda_devices(), is_cuda_available()])
record.put(
    "torch_io", [TorchCheckpointIO is PytorchTorchCheckpointIO, issubclass(Precision, FabricPrecision)]
)


class XPUAccelerator(Accelerator):  # what a library registers at import time
    pass


class SingleXPUStrategy(SingleDeviceStrategy):
    pass


AcceleratorRegistry.register("xpu", XPUAccelerator, description="xpu", override=True)
StrategyRegistry.register("xpu_single", SingleXPUStrategy, description="single xpu", override=False)
try:
    StrategyRegistry.register("xpu_single", SingleXPUStrategy)
    again = "registered twice"
except Exception as err:  # noqa: BLE001
    again = f"ValueError: {isinstance(err, ValueError)}"
record.put("registries", {
    "xpu": ["xpu" in AcceleratorRegistry, AcceleratorRegistry["xpu"]["description"], "xpu" in AcceleratorRegistry.available_accelerators()],
    "xpu_single": ["xpu_single" in StrategyRegistry, StrategyRegistry["xpu_single"]["init_params"], "xpu_single" in StrategyRegistry.available_strategies()],
    "again": again,
    "common": sorted({"ddp", "fsdp", "ddp_spawn", "single_device"} & set(StrategyRegistry)),
    "accelerators": sorted({"cpu", "cuda", "mps"} & AcceleratorRegistry.available_accelerators()),
    "default": StrategyRegistry.get("nope", "fallback"),
})  # fmt: skip
try:
    StrategyRegistry.get("nope")
except KeyError:
    record.put("unknown", "KeyError")
StrategyRegistry.remove("xpu_single")
record.put("removed", "xpu_single" in StrategyRegistry)
