"""`surge.Module`: the model, its steps, its optimizers and its hooks, with Lightning's names."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..errors import SurgeRuntimeError
from ..rank_zero import warn
from .hooks import LoopHooks
from .hparams import HyperparametersMixin, build_from_checkpoint
from .log_options import check_log_name, check_log_value, reduction, refuse_log_options
from .model_hooks import ModelHooks
from .optimizers import ModuleOptimizers

if TYPE_CHECKING:
    from ..metrics.results import Results
    from ..optim.manual import OptimizerSteps
    from ..trainer import Trainer

# Methods with a default that does the work; a subclass's own version is called instead of it.
OVERRIDABLE = (
    "prepare_data", "setup", "teardown", "configure_callbacks", "configure_model",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer",
    "optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "backward", "configure_gradient_clipping",
    "clip_gradients",
    *(f"on_{stage}_model_{what}" for stage in ("validation", "test") for what in ("eval", "train")),
    "on_validation_model_zero_grad", "on_predict_model_eval",
)  # fmt: skip


# The fields a running stage fills, by the name `Module._attach` takes them.
_SLOTS = {
    "trainer": "_trainer", "results": "_results", "device": "_device", "optimizer_steps": "_optimizer_steps"
}  # fmt: skip


class Module(LoopHooks, ModelHooks, ModuleOptimizers, nn.Module, HyperparametersMixin):
    """A torch `nn.Module` that also says how to train itself.

    Override `training_step` and `configure_optimizers`; the rest is optional. `self.log` keeps
    values on the device; the Trainer reads them at log intervals, never per step.
    """

    strict_loading: bool = True  # resume and ckpt_path= loads: False loads what matches, reports the rest

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Trainer | None = None
        self._barebones = False  # the attached Trainer's barebones=True (set by _attach)
        self._results: Results | None = None
        self._device = torch.device("cpu")
        self.automatic_optimization = True
        self._optimizer_steps: OptimizerSteps | None = None  # the fit's LightningOptimizers (fit loop)
        self._requires_grad_saved: dict[nn.Parameter, bool] = {}  # toggle_optimizer's record

    # -- the steps ---------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | Mapping[str, Any] | None:
        """Return the loss (a scalar tensor) or a dict with a "loss" key."""
        raise NotImplementedError(f"{type(self).__name__} must define training_step(batch, batch_idx) to fit")

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Compute and `self.log` validation metrics."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Compute and `self.log` test metrics."""

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """Return the prediction for a batch (default: `self(batch)`; `dataloader_idx` accepted, as
        Lightning's default takes it, so an override may pass it to `super().predict_step`)."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list, `(optimizers, schedulers)` or a dict (see the docs)."""
        raise NotImplementedError(f"{type(self).__name__} must define configure_optimizers() to fit")

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to the device; override for custom batch types."""
        from ..data import move_to_device

        return move_to_device(batch, device)

    # -- overridable steps of a stage (called only when overridden; see docs/lightning.md) ---
    def prepare_data(self) -> None:
        """Download or write data, once per machine (local rank 0), before `setup`."""

    def setup(self, stage: str) -> None:
        """Build what the stage needs (layers, datasets) before its data is read; every process."""

    def teardown(self, stage: str) -> None:
        """Release what `setup` built, at the end of a stage that succeeded."""

    def configure_callbacks(self) -> Sequence[Any] | Any:
        """Callbacks to add to the Trainer's; one of a type the Trainer has replaces it."""
        return []

    def configure_model(self) -> None:
        """Create layers late (after `setup`, before the strategy wraps the module)."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it is moved to the device."""
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch after it is moved to the device."""
        return batch

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable[[], Any] | None = None
    ) -> None:
        """Step `optimizer` at the end of an accumulation window; an override must call
        `optimizer.step(closure=optimizer_closure)`."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Clear the gradients after a step."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Advance a learning-rate scheduler (with the monitored value for ReduceLROnPlateau)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    # -- logging -----------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a scalar: kept detached on the device; epoch values are batch-size-weighted means.

        Defaults follow the hook: per step in `training_step`, per epoch in evaluation.
        `sync_dist` averages step values over processes; epoch values are exact over all processes
        (under `surge run` one logged without `sync_dist` is this process's own, as in Lightning).
        With several evaluation loaders the name gets `/dataloader_idx_{i}` unless
        `add_dataloader_idx=False`. Lightning's `metric_attribute` is accepted and not needed (surge
        finds a logged Metric by the object); `rank_zero_only`, `sync_dist_group` and `enable_graph`
        are refused unless left at their defaults. The arguments are in Lightning's order;
        `logger=None` is True; `reduce_fx` is a name or `torch.mean`/`max`/`min`/`sum`.
        """
        check_log_value(name, value)
        if rank_zero_only or enable_graph or sync_dist_group is not None:
            refuse_log_options(name, rank_zero_only, sync_dist_group, enable_graph)
        reduce_fx = "mean" if reduce_fx == "mean" else reduction(name, reduce_fx)  # (the default: no call)
        results, trainer = self._results, self._trainer
        if self._barebones:  # (read when the trainer was attached: no call per log)
            warn(  # as Lightning's words: logging is off in barebones mode
                "You are trying to `self.log()` but `Trainer(barebones=True)` is configured."
                " Logging can impact raw speed so it is disabled under this setting."
            )
            return
        if results is None:
            if trainer is None:
                warn(f"self.log({name!r}) was called without a Trainer running; the value is dropped.")
            return
        check_log_name(name, add_dataloader_idx)
        results.log(
            name, value, on_step=on_step, on_epoch=on_epoch, prog_bar=prog_bar, logger=logger is not False,
            reduce_fx=reduce_fx, batch_size=batch_size, sync_dist=sync_dist,
            add_dataloader_idx=add_dataloader_idx,
        )  # fmt: skip

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """`self.log` for each item, with the same options."""
        for name, value in dictionary.items():
            self.log(
                name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist,
                sync_dist_group, add_dataloader_idx, batch_size, None, rank_zero_only,
            )  # fmt: skip

    # -- checkpoints -------------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path,
        map_location: str | torch.device | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **hparams: Any,
    ) -> Module:
        """A new module built from the checkpoint's saved hyper-parameters (`hparams` override them)
        with its weights loaded, from any surge checkpoint (one file or sharded), safely.

        As in Lightning, `configure_model()` runs first (layers created there exist before the
        weights load), then `on_load_checkpoint(checkpoint)`, which may still change the
        checkpoint's `"state_dict"`; then the weights load. `strict=False` loads the keys that match
        and warns with what it left out.

        The file is read weights-only either way. Hyper-parameters that are not plain data (a class,
        an object) are in it as their repr, and pickled beside; `weights_only=False` makes them again
        from that pickle, which runs code from the file: pass it only for a file you trust.
        """
        from ..checkpoint import load_checkpoint
        from ..checkpoint.layout import check_layout
        from ..checkpoint.model_state import apply_model_state
        from ..checkpoint.sharded import model_weights

        ckpt = load_checkpoint(checkpoint_path)
        check_layout(ckpt, checkpoint_path)
        model = build_from_checkpoint(cls, ckpt, str(checkpoint_path), weights_only, hparams)
        if callable(model.configure_model) and type(model).configure_model is not Module.configure_model:
            model.configure_model()  # layers created late exist before the weights load (as Lightning)
        if type(model).on_load_checkpoint is not Module.on_load_checkpoint:
            model.on_load_checkpoint(ckpt)
        weights = model_weights(ckpt, checkpoint_path)
        strict = cls.strict_loading if strict is None else strict
        problems = apply_model_state(model, weights, strict=strict, source=str(checkpoint_path))
        if problems:
            warn(
                f"{cls.__name__}.load_from_checkpoint({str(checkpoint_path)!r}) loaded what matched; "
                + "; ".join(problems)
            )
        return model.to(map_location) if map_location is not None else model

    # -- the run's slots -------------------------------------------------------------------
    def _attach(self, **slots: Any) -> dict[str, Any]:
        """Set the slots a running stage fills (`trainer`, `results`, `device`, `optimizer_steps`):
        surge's one writer of the module's own fields, so no other part assigns an attribute of the
        user's model. Returns the slots' previous values, for `_attach(**previous)` to put back."""
        unknown = sorted(set(slots) - set(_SLOTS))
        if unknown:
            raise TypeError(f"Module._attach: unknown slots {unknown}; the slots are {list(_SLOTS)}")
        previous = {name: getattr(self, _SLOTS[name]) for name in slots}
        for name, value in slots.items():
            object.__setattr__(self, _SLOTS[name], value)  # plain fields (never a submodule)
        if "trainer" in slots:  # Trainer(barebones=True): self.log is off while it is attached
            object.__setattr__(self, "_barebones", bool(getattr(slots["trainer"], "barebones", False)))
        return previous

    def _swap_results(self, results: Any) -> Any:
        """Put `results` in the `results` slot for one hook's call and return what was there: the
        check of `self.log` around a hook that may run per batch (`module/log_hooks.py`), cheaper
        than `_attach`."""
        previous = self._results
        object.__setattr__(self, "_results", results)
        return previous

    def _slots(self) -> dict[str, Any]:
        """Every slot's value now (what `_attach(**slots)` puts back)."""
        return {name: getattr(self, field) for name, field in _SLOTS.items()}

    # -- what the trainer exposes ------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module."""
        if self._trainer is None:
            raise SurgeRuntimeError(f"{type(self).__name__} is not attached to a Trainer yet")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        """Attach (or, with None, detach) a Trainer, as Lightning's `module.trainer = trainer`."""
        self._attach(trainer=trainer)

    @property
    def device(self) -> torch.device:
        """The device the Trainer placed the module on."""
        return self._device

    @property
    def device_mesh(self) -> Any:
        """The DeviceMesh the strategy built (`surge.strategies.ModelParallel`), for the parallel plan
        applied in `configure_model`; None under other strategies or without a Trainer."""
        return self._trainer.strategy.device_mesh if self._trainer is not None else None

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Lightning's `all_gather`: each tensor in `data` (through dicts, lists and tuples; a number
        or numpy array becomes a tensor on the module's device) gathered from every process, stacked
        on a new first dimension (one process: as it is). `sync_grads`: gradients flow back."""
        gather = self.trainer.strategy.all_gather

        def each(value: Any) -> Any:
            if isinstance(value, Tensor):
                return gather(value.to(self.device), group=group, sync_grads=sync_grads)
            if isinstance(value, (bool, int, float)) or type(value).__module__ == "numpy":
                return each(torch.as_tensor(value))
            if isinstance(value, Mapping):
                return type(value)({k: each(v) for k, v in value.items()})  # type: ignore[call-arg]
            if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
                return type(value)(*(each(v) for v in value))
            if isinstance(value, (list, tuple)):
                return type(value)(each(v) for v in value)
            return value

        return each(data)

    @property
    def current_epoch(self) -> int:
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def global_rank(self) -> int:
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger (None without a Trainer or loggers)."""
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        return self._trainer.loggers if self._trainer is not None else []

    @property
    def on_gpu(self) -> bool:
        """Whether the module runs on a CUDA device."""
        return self._device.type == "cuda"

    # -- fine-tuning -----------------------------------------------------------------------
    def freeze(self) -> None:
        """No parameter requires grad, and the module is in eval mode."""
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        """Every parameter requires grad, and the module is in train mode."""
        for param in self.parameters():
            param.requires_grad = True
        self.train()

    def print(self, *args: Any) -> None:
        """Print from rank zero only."""
        from ..rank_zero import info

        info(" ".join(str(a) for a in args))
