"""What each Trainer argument means, in the groups docs/trainer.md uses.

This is the one text behind three views: `Trainer`'s docstring (what `help(surge.Trainer)` and an
IDE's hover show), `surge fit --help`, and the argument table in docs/trainer.md. The first and the
last are generated from it by `python docs/trainer_arguments.py`; tests/test_argument_meanings.py
fails when either differs from it, or when its names differ from `TrainerConfig`'s fields.
Keep each meaning short: plain words, sentences under 20 words, what `None` stands for.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

GROUPS: tuple[tuple[str, dict[str, str]], ...] = (
    ("Training length", {
        "max_epochs": "Stop after this many epochs (-1: no limit). None: 1000, or no limit when "
                      "`max_steps` or `max_time` is set.",
        "min_epochs": "Train at least this many epochs, even if early stopping asks to stop. "
                      "None: 0, or 1 with `min_steps`.",
        "max_steps": "Stop after this many optimizer steps. -1: no limit.",
        "min_steps": "Train at least this many optimizer steps before early stopping may stop the fit.",
        "max_time": 'Stop at the first step after this much training time: "DD:HH:MM:SS", a dict '
                    'such as {"hours": 2}, or a timedelta.',
        "limit_train_batches": "Batches per training epoch: a count (int) or a fraction (float). None: all.",
    }),
    ("Validation, test and predict", {
        "val_check_interval": "Validate inside an epoch: after this fraction of it (float) or every "
                              "n batches (int). None: at each epoch's end.",
        "check_val_every_n_epoch": "Validate every n epochs. None: count `val_check_interval` "
                                   "batches across epochs.",
        "num_sanity_val_steps": "Validation batches run before training, to catch bugs early. -1: all.",
        "limit_val_batches": "Validation batches: a count (int) or a fraction (float). None: all.",
        "limit_test_batches": "Test batches: a count (int) or a fraction (float). None: all.",
        "limit_predict_batches": "Predict batches: a count (int) or a fraction (float). None: all.",
        "inference_mode": "Validate and test under `torch.inference_mode()`. False: under `torch.no_grad()`.",
    }),
    ("Optimization", {
        "accumulate_grad_batches": "Batches whose gradients add up before each optimizer step.",
        "gradient_clip_val": "Clip the gradients at this value, after fp16 unscaling. None: no clipping.",
        "gradient_clip_algorithm": '"norm" clips the total norm, "value" each element. None: "norm" '
                                   "(hooks see None, as in Lightning).",
        "effective_batch_size": "Samples per optimizer step. surge picks the micro-batch and the "
                                "accumulation that reach it.",
        "scale_lr": 'Scale the learning rates with the effective batch: "linear" or "sqrt". '
                    "Needs `reference_batch_size`.",
        "reference_batch_size": "The batch size your learning rates were tuned for (with `scale_lr`).",
        "on_nonfinite": 'What a NaN or inf loss does: "warn" (no per-step sync), "raise", "skip" the '
                        'step, or "rollback" to the last good state. None: no check.',
    }),
    ("Precision and devices", {
        "precision": '"32-true", "16-mixed", "bf16-mixed", "bf16-true", "64-true", ... or a '
                     "Precision object. See docs/precision.md.",
        "accelerator": '"cpu", "cuda" (or "gpu"), "mps", or an Accelerator object. "auto": the best '
                       "one present.",
        "devices": 'How many devices (int), which ones (a list, or "0,2"), or "auto". On the CPU, '
                   "n processes.",
        "strategy": '"ddp", "fsdp", "dp", ... or a Strategy object. "auto": one device, or DDP on '
                    "several. See docs/distributed.md.",
        "num_nodes": "Machines in the run; each runs `devices` processes.",
        "sync_batchnorm": "Turn BatchNorm layers into SyncBatchNorm before the model is wrapped "
                          "(CUDA only).",
        "plugins": "A plugin or a list: a cluster environment, checkpoint writer, precision or "
                   "requeue policy.",
    }),
    ("Data", {
        "num_workers": 'Loader worker processes: an int, or "auto" to measure and pick during the '
                       "fit. None: each loader's own.",
        "use_distributed_sampler": "With several processes, each reads its own share of the data "
                                   "(a DistributedSampler).",
        "reload_dataloaders_every_n_epochs": "Ask the module or datamodule for new loaders every "
                                             "n epochs. 0: never.",
    }),
    ("Logging and progress", {
        "logger": "True: TensorBoard (when installed) and CSV, in one run directory. False: none. "
                  "Or Logger objects.",
        "log_every_n_steps": "Send step metrics to the loggers every n steps (0: never; each send reads the device).",
        "enable_progress_bar": "Show the progress bar.",
        "enable_model_summary": "Print the model summary when the fit starts.",
        "barebones": "Turn off what costs speed (checkpoints, loggers, progress bar, summary, sanity check, self.log), as Lightning.",
        "enable_autolog_hparams": "Log the module's and datamodule's hyper-parameters to the loggers.",
        "profiler": '"simple", "advanced", "pytorch", or a Profiler object: where the time goes. '
                    "See docs/doctor.md.",
        "goodput_report": 'At the fit\'s end: "line" (one line), "table", or "off". None: "line" '
                          '("off" under `surge run`).',
    }),
    ("Checkpoints, callbacks and the run directory", {
        "default_root_dir": "Where `surge_logs/version_N/` is written. None: the current directory.",
        "enable_checkpointing": "Add a ModelCheckpoint callback when `callbacks` has none.",
        "async_checkpoint": "Write checkpoints on a background thread while training goes on.",
        "callbacks": "A callback or a list: ModelCheckpoint, EarlyStopping, LearningRateMonitor, ...",
    }),
    ("Speed and memory", {
        "compile": 'torch.compile: True (the forward), "step" (training and optimizer step), '
                   '"regions" (repeated blocks), or a dict.',
        "benchmark": "Set `torch.backends.cudnn.benchmark`. None: leave it as it is.",
        "matmul_precision": '`torch.set_float32_matmul_precision`: "highest", "high" (TF32) or '
                            '"medium". None: leave it.',
        "channels_last": "Use the channels-last memory format for the model and image batches.",
        "activation_checkpointing": "Module classes (or a policy) whose activations are recomputed "
                                    "in backward, to save memory.",
    }),
    ("Debugging and reproducibility", {
        "fast_dev_run": "Run n batches (True: 1) of each stage to test the code. No loggers, no "
                        "checkpoints.",
        "overfit_batches": "Train and validate on the same few batches (int or fraction), in order.",
        "detect_anomaly": "Find the operation that made a NaN in backward "
                          "(`torch.autograd.detect_anomaly`). Slow.",
        "deterministic": 'True: deterministic algorithms only. "warn": warn on others instead. '
                         "None: torch's setting.",
    }),
    ("Lightning arguments surge refuses", {
        "model_registry": "Lightning's model upload. Refused unless None: use `trainer.export(path)`.",
    }),
)  # fmt: skip

WIDTH = 100  # the docstring's lines, as the source's


def meaning(name: str) -> str:
    """The meaning of the Trainer argument `name` (KeyError for another name)."""
    for _, arguments in GROUPS:
        if name in arguments:
            return arguments[name]
    raise KeyError(name)


def names() -> list[str]:
    """Every argument, in the groups' order."""
    return [name for _, arguments in GROUPS for name in arguments]


def accepted_types(config: type) -> dict[str, str]:
    """Each init field's accepted type as written (`Resolves[A, R]` shows `A`), without importing
    the classes it names."""
    return {f.name: _accepted(str(f.type)) for f in dataclasses.fields(config) if f.init}


def defaults(config: type) -> dict[str, Any]:
    """Each init field's default, as the signature shows it."""
    return {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(config)
        if f.init
    }


def docstring(config: type, summary: str) -> str:
    """`summary`, then every argument under its group: name, accepted type, default, meaning."""
    types, given = accepted_types(config), defaults(config)
    lines = [summary, ""]
    for title, arguments in GROUPS:
        lines += [f"{title}:", ""]
        for name, text in arguments.items():
            item = f"- `{name}: {types[name]} = {given[name]!r}`: {text}"
            lines += textwrap.wrap(item, WIDTH - 4, subsequent_indent="  ", break_on_hyphens=False)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def markdown_table(config: type) -> str:
    """docs/trainer.md's tables: one per group, a row per argument."""
    given = defaults(config)
    out = []
    for title, arguments in GROUPS:
        out += [f"**{title}**", "", "| argument | default | meaning |", "|---|---|---|"]
        out += [f"| `{name}` | `{given[name]!r}` | {text} |" for name, text in arguments.items()]
        out.append("")
    return "\n".join(out) + "\n"


def _accepted(annotation: str) -> str:
    if not annotation.startswith("Resolves["):
        return annotation
    depth = 0
    for i, char in enumerate(annotation):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 1:
            return annotation[len("Resolves[") : i].strip()
    raise ValueError(f"not Resolves[Accepted, Resolved]: {annotation}")
