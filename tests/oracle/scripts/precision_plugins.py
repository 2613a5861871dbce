"""Lightning's precision plugins called directly (and a strategy's `tensor_init_context` given one), and "64-true"/"bf16-true" fits that create layers
in `configure_model`.

`plugins`: for each plugin and format, what `convert_module`, `module_init_context`,
`forward_context`, `convert_input`/`convert_output`, `clip_gradients`, `state_dict` and FSDP's
`mixed_precision_config` give (dtypes, clipped gradients, the default dtype restored after an
error). `fit64`: a model with a complex buffer made in `__init__` and one in `configure_model`,
the dtypes seen in `on_fit_start` and `training_step`, and the trained weights. `fitbf16`: the
dtype of a layer `configure_model` creates under "bf16-true"."""

import lightning as L
import record
import torch
from lightning.pytorch.plugins import (
    DeepSpeedPrecision,
    DoublePrecision,
    FSDPPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
)
from lightning.pytorch.strategies import SingleDeviceStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def plugins():
    return {
        "32": Precision(), "64": DoublePrecision(), "16-true": HalfPrecision("16-true"),
        "bf16-true": HalfPrecision("bf16-true"), "bf16-mixed": MixedPrecision("bf16-mixed", "cpu"),
        **{f"fsdp/{p}": FSDPPrecision(p) for p in ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")},
        **{f"deepspeed/{p}": DeepSpeedPrecision(p) for p in ("32-true", "16-true", "bf16-mixed")},
    }  # fmt: skip


def complex_buffer_survives(plugin):
    module = nn.Module()
    module.register_buffer("c", torch.complex(torch.ones(2), torch.ones(2)))
    return str(plugin.convert_module(module).c.dtype)


def restored_after_error(context):
    try:
        with context():
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    return str(torch.get_default_dtype())


def clipped(plugin, algorithm):
    torch.manual_seed(0)
    layer = nn.Linear(3, 2)
    layer(torch.randn(4, 3)).pow(2).sum().backward()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    try:
        plugin.clip_gradients(optimizer, clip_val=0.05, gradient_clip_algorithm=algorithm)
    except Exception as err:  # FSDP's refuses clipping by norm
        return "`gradient_clip_algorithm='norm'` is currently not supported" in str(err)
    return [p.grad for p in layer.parameters()]


def describe(plugin):
    out = {"module": str(plugin.convert_module(nn.Linear(2, 2)).weight.dtype)}
    with plugin.module_init_context():
        out["init_default"] = str(torch.get_default_dtype())
        out["init_layer"] = str(nn.Linear(2, 2).weight.dtype)
    with plugin.forward_context():
        out["forward_default"] = str(torch.get_default_dtype())
        out["forward_autocast"] = torch.is_autocast_enabled("cpu")
    batch = {"x": torch.ones(2), "i": torch.ones(2, dtype=torch.long)}
    out["input"] = {k: str(v.dtype) for k, v in plugin.convert_input(batch).items()}
    out["output"] = str(plugin.convert_output(torch.ones(2, dtype=torch.float16)).dtype)
    out["restored"] = [restored_after_error(c) for c in (plugin.module_init_context, plugin.forward_context)]
    out["connect"] = [x == y for x, y in zip(plugin.connect(1, [2], [3]), (1, [2], [3]))]
    out["state"] = sorted(plugin.state_dict())
    out["scaler"] = type(getattr(plugin, "scaler", None)).__name__
    return out


def run_plugins():
    for name, plugin in plugins().items():
        record.put(f"plugins/{name}", describe(plugin))
        if not name.startswith("deepspeed"):
            record.put(f"plugins/{name}/clip", [clipped(plugin, a) for a in ("value", "norm")])
            record.put(f"plugins/{name}/no_clip", clipped(plugin, "value") is not None)
    record.put("plugins/64/complex", complex_buffer_survives(DoublePrecision()))
    for p in ("32-true", "16-true", "bf16-true"):
        config = FSDPPrecision(p).mixed_precision_config
        record.put(f"plugins/fsdp/{p}/config", [str(config.param_dtype), str(config.buffer_dtype)])
    fused = torch.optim.Adam([nn.Parameter(torch.ones(1))])
    fused._step_supports_amp_scaling = True
    try:
        MixedPrecision("bf16-mixed", "cpu").clip_gradients(fused, clip_val=1.0)
    except RuntimeError as err:
        record.put("plugins/fused", "does not allow for gradient clipping" in str(err))


def run_strategy_init():
    """`tensor_init_context` of a strategy given a precision plugin: the layer's dtype and device, and
    whether its initialisation drew from the RNG (the next draw tells)."""
    for empty_init in (None, True, False):
        for name, plugin in (
            ("32", Precision()),
            ("64", DoublePrecision()),
            ("16-true", HalfPrecision("16-true")),
        ):
            strategy = SingleDeviceStrategy(device="cpu", precision_plugin=plugin)
            torch.manual_seed(0)
            with strategy.tensor_init_context(empty_init=empty_init):
                layer = nn.Linear(2, 2)
            record.put(
                f"plugins/strategy/{name}/{empty_init}",
                [str(layer.weight.dtype), str(layer.weight.device), torch.rand(1)],
            )


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.register_buffer("early", torch.complex(torch.rand(3), torch.rand(3)), persistent=False)

    def configure_model(self):
        self.layer = nn.Linear(4, 2)
        if SCENARIO == "fit64":  # torch has no complex counterpart of bfloat16
            self.register_buffer("late", torch.complex(torch.rand(3), torch.rand(3)), persistent=False)
        record.put(f"{SCENARIO}/in_configure_model", str(self.layer.weight.dtype))

    def on_fit_start(self):
        record.put(
            f"{SCENARIO}/on_fit_start",
            [
                str(self.early.dtype),
                str(getattr(self, "late", self.early).dtype),
                str(torch.tensor([1.0]).dtype),
            ],
        )

    def training_step(self, batch, batch_idx):
        (x,) = batch
        record.put(
            f"{SCENARIO}/step",
            [
                str(x.dtype),
                str(torch.tensor([1.0]).dtype),
                str(torch.tensor([1j]).dtype) if SCENARIO == "fit64" else "",
            ],
        )
        return self.layer(x).pow(2).mean()

    def on_train_epoch_end(self):
        record.put(f"{SCENARIO}/epoch_end", str(torch.tensor([1.0]).dtype))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(precision):
    torch.manual_seed(0)
    model = Model()
    trainer = L.Trainer(precision=precision, max_epochs=1, limit_train_batches=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4))
    record.weights(SCENARIO, model.layer)


SCENARIO = "plugins"
if __name__ == "__main__":
    run_plugins()
    run_strategy_init()
    SCENARIO = "fit64"
    fit("64-true")
    SCENARIO = "fitbf16"
    fit("bf16-true")
