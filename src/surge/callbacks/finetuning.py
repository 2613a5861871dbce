"""`BaseFinetuning` and `BackboneFinetuning`: freeze layers before training, unfreeze them on a
schedule with their own param group (Lightning's semantics).

`freeze_before_training` runs in `setup`, which comes before `configure_optimizers()`, so an
optimizer built from `filter(lambda p: p.requires_grad, self.parameters())` starts without the
frozen layers; `finetune_function(module, epoch, optimizer)` runs for every optimizer at each
epoch's start.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from ..errors import CheckpointError, MisconfigurationError, bad_value
from ..rank_zero import info, warn
from .base import Callback

if TYPE_CHECKING:
    from ..trainer import Trainer

Modules = nn.Module | Iterable[nn.Module]


class BaseFinetuning(Callback):
    """Subclass it and implement `freeze_before_training(module)` and
    `finetune_function(module, epoch, optimizer)`, using the static helpers below."""

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False  # a checkpoint's state was loaded; its param groups are rebuilt next
        self._trainable: dict[str, list[str]] = {}  # what requires grad, as of the latest epoch start
        self._epoch_started = -1  # the latest epoch whose start ran `finetune_function`
        self._resumed_epoch: int | None = None  # a resume inside that epoch must not run it twice

    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules, and parents that hold parameters themselves."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            found: list[nn.Module] = []
            for m in modules:
                found.extend(BaseFinetuning.flatten_modules(m))
            candidates: Iterable[nn.Module] = found
        else:
            candidates = modules.modules()
        return [m for m in candidates if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(
        modules: Modules, train_bn: bool = True, requires_grad: bool = True
    ) -> Generator[nn.Parameter, None, None]:
        for m in BaseFinetuning.flatten_modules(modules):
            if isinstance(m, _BatchNorm) and not train_bn:
                continue
            for p in m.parameters(recurse=False):
                if p.requires_grad == requires_grad:
                    yield p

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        for m in BaseFinetuning.flatten_modules(modules):
            if isinstance(m, _BatchNorm):
                m.track_running_stats = True
            for p in m.parameters(recurse=False):
                p.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for p in module.parameters(recurse=False):
            p.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Stop gradients in `modules` (BatchNorm layers stay trainable with `train_bn`)."""
        for m in BaseFinetuning.flatten_modules(modules):
            if isinstance(m, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(m)
            else:
                BaseFinetuning.freeze_module(m)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """`params` not already in one of `optimizer`'s groups (those are skipped, with a warning)."""
        held = [p for group in optimizer.param_groups for p in group["params"]]
        out: list[nn.Parameter] = []
        removed: list[nn.Parameter] = []
        for p in params:
            (removed if any(torch.equal(q, p) for q in held) else out).append(p)
        if removed:
            warn(
                "finetuning: some parameters to unfreeze are already in another param group of the "
                "optimizer and are skipped; build it from filter(lambda p: p.requires_grad, self.parameters())."
            )
        return out

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Make `modules` trainable and add their parameters to `optimizer` as a new group, with
        `lr` (default: the first group's rate divided by `initial_denom_lr`)."""
        BaseFinetuning.make_trainable(modules)
        params_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denom = initial_denom_lr if lr is None else 1.0
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": params_lr / denom})

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        epoch, resumed, self._resumed_epoch = trainer.current_epoch, self._resumed_epoch, None
        if epoch == resumed:
            return  # resumed inside an epoch whose start already ran (its groups were rebuilt)
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            groups = len(optimizer.param_groups)
            self.finetune_function(module, epoch, optimizer)
            self._store(module, opt_idx, groups, optimizer.param_groups)
        self._trainable = _trainable(module)
        self._epoch_started = epoch

    def _store(self, module: nn.Module, opt_idx: int, before: int, groups: list[dict[str, Any]]) -> None:
        """The param groups by parameter name (what a checkpoint records of them)."""
        names = {p: n for n, p in module.named_parameters()}

        def described(gs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{**g, "params": [names[p] for p in g["params"]]} for g in gs]

        if opt_idx not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[opt_idx] = described(groups)
        elif before != len(groups):
            self._internal_optimizer_metadata[opt_idx].extend(described(groups[before:]))

    def state_dict(self) -> dict[str, Any]:
        return {
            "internal_optimizer_metadata": self._internal_optimizer_metadata,
            "trainable": self._trainable,
            "epoch_started": self._epoch_started,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, Mapping) or "internal_optimizer_metadata" not in state_dict:
            entries = (
                sorted(map(str, state_dict)) if isinstance(state_dict, Mapping) else type(state_dict).__name__
            )
            raise CheckpointError(
                f"{type(self).__name__}: the checkpoint's state for it has no 'internal_optimizer_metadata' "
                f"(its entries: {entries}); it was not written by this callback."
            )
        _check_state(self, state_dict)
        self._restarting = True
        self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]
        self._trainable = state_dict.get("trainable", {})
        self._epoch_started = state_dict.get("epoch_started", -1)
        self._resumed_epoch = self._epoch_started if self._epoch_started >= 0 else None

    def restore_optimization(
        self, optimizers: list[Any], lr_scheduler_configs: list[Any], module: Any
    ) -> None:
        """Resumed: the layers the run had unfrozen are trainable again and every optimizer gets
        the param groups it had (by parameter name); their saved state is loaded next."""
        if not self._restarting:
            return
        self._restarting = False
        named = dict(module.named_parameters())
        saved = self._internal_optimizer_metadata
        if any(i >= len(optimizers) for i in saved):
            raise CheckpointError(
                f"{type(self).__name__}: the checkpoint has param groups of {len(saved)} optimizers, "
                f"configure_optimizers() returned {len(optimizers)}; resume with the optimizers it was saved with."
            )
        rebuilt = {
            i: [{**group, "params": _params(self, group["params"], named)} for group in groups]
            for i, groups in saved.items()
        }  # every name checked before anything changes
        _set_trainable(self, module, named)
        for i, groups in rebuilt.items():
            optimizers[i].param_groups = []
            for group in groups:
                optimizers[i].add_param_group(group)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} must implement finetune_function(module, epoch, optimizer)"
        )

    def freeze_before_training(self, pl_module: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(module)")


def _check_state(cb: BaseFinetuning, state: Mapping[str, Any]) -> None:
    """A saved state in the shape this callback writes, or a CheckpointError naming the damaged key
    (a tampered or foreign state would otherwise fail as a bare KeyError, or read a string's letters as names)."""
    metadata = state["internal_optimizer_metadata"]
    _expect(
        cb,
        "internal_optimizer_metadata",
        metadata,
        isinstance(metadata, Mapping),
        "a dict by optimizer index",
    )
    for i, groups in metadata.items():
        where = f"internal_optimizer_metadata[{i!r}]"
        _expect(
            cb, where, i, isinstance(i, int) and not isinstance(i, bool) and i >= 0, "an optimizer index >= 0"
        )
        _expect(cb, where, groups, isinstance(groups, list), "a list of param groups")
        for j, group in enumerate(groups):
            _expect(cb, f"{where}[{j}]", group, isinstance(group, Mapping), "a param group dict")
            _names(cb, f"{where}[{j}]['params']", group.get("params"))
    trainable = state.get("trainable", {})
    _expect(cb, "trainable", trainable, isinstance(trainable, Mapping), "a dict")
    for key in ("params", "batch_norms") if trainable else ():
        _names(cb, f"trainable[{key!r}]", trainable.get(key))
    started = state.get("epoch_started", -1)
    _expect(
        cb, "epoch_started", started, isinstance(started, int) and not isinstance(started, bool), "an int"
    )
    if "previous_backbone_lr" in state:
        lr = state["previous_backbone_lr"]
        ok = lr is None or isinstance(lr, int | float) and not isinstance(lr, bool)
        _expect(cb, "previous_backbone_lr", lr, ok, "a number or None")


def _names(cb: BaseFinetuning, where: str, value: Any) -> None:
    ok = isinstance(value, list) and all(isinstance(n, str) for n in value)
    _expect(cb, where, value, ok, "a list of parameter (or module) names")


def _expect(cb: BaseFinetuning, where: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise CheckpointError(
            f"{type(cb).__name__}: the checkpoint's state for it is damaged: {where} is {value!r:.80} "
            f"({type(value).__name__}), expected {expected}; resume from a checkpoint this callback wrote."
        )


def _trainable(module: nn.Module) -> dict[str, list[str]]:
    """The names of the parameters that require grad and of the BatchNorm layers that track statistics."""
    return {
        "params": [n for n, p in module.named_parameters() if p.requires_grad],
        "batch_norms": [
            n for n, m in module.named_modules() if isinstance(m, _BatchNorm) and m.track_running_stats
        ],
    }


def _set_trainable(cb: BaseFinetuning, module: nn.Module, named: dict[str, nn.Parameter]) -> None:
    """Freeze and unfreeze as `_trainable` recorded (resume: `freeze_before_training` has just run)."""
    if not cb._trainable:
        return
    _params(cb, cb._trainable["params"], named)  # every name must still be there
    trainable = set(cb._trainable["params"])
    for name, p in named.items():
        p.requires_grad = name in trainable
    tracking = set(cb._trainable["batch_norms"])
    for name, m in module.named_modules():
        if isinstance(m, _BatchNorm):
            m.track_running_stats = name in tracking


def _params(cb: BaseFinetuning, names: list[str], named: dict[str, nn.Parameter]) -> list[nn.Parameter]:
    missing = [n for n in names if n not in named]
    if missing:
        raise CheckpointError(
            f"{type(cb).__name__}: the checkpoint names parameters this model lacks: "
            f"{missing[:5]}; resume with the model the run was saved with."
        )
    return [named[n] for n in names]


def multiplicative(epoch: int) -> float:
    return 2.0


class BackboneFinetuning(BaseFinetuning):
    """Freeze `module.backbone`; at `unfreeze_backbone_at_epoch` add it to the optimizer with rate
    `backbone_initial_lr` (default: the current rate x `backbone_initial_ratio_lr`); after that,
    each epoch multiply its rate by `lambda_func(epoch + 1)`, capped at the current rate when
    `should_align`."""

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        if (
            isinstance(unfreeze_backbone_at_epoch, bool)
            or not isinstance(unfreeze_backbone_at_epoch, int)
            or unfreeze_backbone_at_epoch < 0
        ):
            raise bad_value(
                "BackboneFinetuning(unfreeze_backbone_at_epoch)", unfreeze_backbone_at_epoch, "an int >= 0"
            )
        if not callable(lambda_func):
            raise bad_value("BackboneFinetuning(lambda_func)", lambda_func, "a callable epoch -> factor")
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # checks the state first
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), nn.Module):
            raise MisconfigurationError(
                f"BackboneFinetuning needs {type(pl_module).__name__}.backbone to be an nn.Module."
            )
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            initial = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.previous_backbone_lr = initial
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                initial,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
            if self.verbose:
                info(
                    f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(initial, self.rounding)}"
                )
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            following = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            following = current_lr if self.should_align and following > current_lr else following
            optimizer.param_groups[-1]["lr"] = following
            self.previous_backbone_lr = following
            if self.verbose:
                info(
                    f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(following, self.rounding)}"
                )
