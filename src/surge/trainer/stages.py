"""The Trainer's entry points with Lightning's signatures: `fit`, `validate`, `test`, `predict`.

Their arguments are checked here, before any work (a value surge cannot honour is refused by name);
the stages themselves run in `Trainer._fit` / `_evaluate` / `_predict` (here, or in the ranks a
stage launcher starts: launching.py). `verbose=True` (Lightning's
default) prints the results table (`results_table.py`) on rank zero."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..arguments.lightning import warn_default_max_epochs
from ..config.paths import writable_dir
from ..datamodule import DataModule
from ..errors import bad_value
from ..loops.stage_data import check_step_defined
from ..metrics.table import print_results
from ..module import Module
from .launching import StageLaunching

if TYPE_CHECKING:
    from ..launch.signals import RequeuePolicy


def check_weights_only(where: str, weights_only: bool | None) -> None:
    """surge loads every checkpoint weights-only (tensors and plain containers): None and True are
    what it does; False (unpickling arbitrary objects) is refused."""
    if weights_only not in (None, True):
        raise bad_value(
            f"{where}(weights_only)", weights_only,
            "None or True (surge loads checkpoints weights-only, with a verified digest; it never unpickles objects)",
        )  # fmt: skip


def _check_flag(where: str, name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed or (value is not None and not isinstance(value, bool)):
        raise bad_value(f"{where}({name})", value, " or ".join(map(str, allowed)))


class StageEntryPoints(StageLaunching):
    """`fit`, `validate`, `test` and `predict`: argument checks, then the Trainer's stage."""

    _requeue: RequeuePolicy  # the requeue policy the Trainer decided (its checkpoint: `Semantics`)

    def fit(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | Path | None = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train `model`; resume from `ckpt_path` (a path, "last", "best" or "auto") if given."""
        check_weights_only("fit", weights_only)
        warn_default_max_epochs(self._cfg)
        if self._cfg.logger is True:  # the default logger writes there: fail now, not at a log point
            writable_dir(Path(self.default_root_dir), f"default_root_dir={self.default_root_dir!r}")
        if isinstance(train_dataloaders, DataModule):
            datamodule, train_dataloaders = train_dataloaders, None
        check_step_defined(model, "training_step", "fit")
        loaders = (train_dataloaders, val_dataloaders)
        ckpt_path = self._requeue.resume_path(ckpt_path, self.default_root_dir)  # a requeued job's
        if self._in_this_process("fit"):  # (no frame between fit and its loop's but `_fit`)
            self._fit(model, loaders, datamodule, ckpt_path)
        else:
            self._launched("fit", model, "_fit", model, loaders, datamodule, ckpt_path)

    def _fit(
        self, model: Module, loaders: tuple[Any, Any], datamodule: DataModule | None, ckpt_path: Any
    ) -> None:
        raise NotImplementedError  # the Trainer's

    def _evaluate(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> list[dict[str, float]]:
        raise NotImplementedError  # the Trainer's

    def _predict(
        self, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: Any, returned: bool
    ) -> Any:
        raise NotImplementedError  # the Trainer's

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run `validation_step` over the data; one dict of metrics per dataloader, printed as a
        table when `verbose`."""
        return self._checked_evaluation(
            "validate", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run `test_step` over the data; one dict of metrics per dataloader, printed as a table when
        `verbose`."""
        return self._checked_evaluation(
            "test", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | Path | None = None,
        weights_only: bool | None = None,
    ) -> list[Any] | None:
        """Run `predict_step` over the data and return the predictions (None with
        `return_predictions=False`: they are not kept)."""
        _check_flag("predict", "return_predictions", return_predictions, (None, True, False))
        check_weights_only("predict", weights_only)
        predictions = self._launched(
            "predict",
            model,
            "_predict",
            model,
            dataloaders,
            ckpt_path,
            datamodule,
            return_predictions is not False,
        )
        return None if return_predictions is False else predictions

    def _checked_evaluation(
        self,
        stage: str,
        model: Any,
        dataloaders: Any,
        ckpt_path: Any,
        verbose: Any,
        datamodule: Any,
        weights_only: Any,
    ) -> list[dict[str, float]]:
        _check_flag(stage, "verbose", verbose, (True, False))
        check_weights_only(stage, weights_only)
        results: list[dict[str, float]] = self._launched(
            stage, model, "_evaluate", stage, model, dataloaders, ckpt_path, datamodule
        )
        if results is None:  # ended by a tuner before any batch (stage_exit): no results, as Lightning
            return results
        if verbose and self.is_global_zero:
            print_results(results, stage)
        return results
