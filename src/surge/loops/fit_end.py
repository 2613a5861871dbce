"""What the end of a fit says. In the Lightning mode: why it stopped, in Lightning's words (its
"`Trainer.fit` stopped: ..." line). In surge's own API: nothing when it trained, and one warning
naming the cause and the fix when it trained nothing (`max_epochs=0`, `max_steps=0`,
`limit_train_batches=0`) or when no `training_step` returned a loss, so the optimizer never had a
gradient to apply. One per fit (in its context): the loop reports the batches done once per
epoch, and each batch whose step returned None where it warns about it; nothing per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rank_zero import global_rank, lightning_log, warn

if TYPE_CHECKING:
    from .fit import FitLoop


class FitEnd:
    """The fit's closing words: surge's or Lightning's, as `Semantics.fit_end_words` says."""

    def __init__(self) -> None:
        self.trained_batches = 0  # batches trained in this fit
        self.lossless_batches = 0  # of those, the ones whose training_step returned None
        self._from = 0  # where the current epoch's training started (a resume: inside it)

    def start_at(self, batches_done: int) -> None:
        """The fit starts `batches_done` into its first epoch (a checkpoint written inside it)."""
        self._from = batches_done

    def trained_to(self, batches_done: int) -> None:
        """An epoch's training ended with `batches_done` of its batches done (the next starts at 0)."""
        self.trained_batches += batches_done - self._from
        self._from = 0

    def lossless(self) -> None:
        self.lossless_batches += 1

    def say(self, loop: FitLoop, limit_train_batches: int | float) -> None:
        ctx = loop.context()
        settings, no_batches = ctx.settings, ctx.data.plan.train == 0
        if ctx.parts.semantics.fit_end_words == "lightning":
            reason = _lightning_reason(loop, no_batches and limit_train_batches != 0)
            if reason is not None and global_rank() == 0:
                lightning_log().getChild("utilities.rank_zero").info(f"`Trainer.fit` stopped: {reason}")
            return
        trained = self.trained_batches
        if trained == 0 and (no_batches or _lightning_reason(loop, False) is not None):
            warn(_nothing_trained(settings.max_epochs, settings.max_steps, limit_train_batches))
        elif ctx.parts.module.automatic_optimization and trained and self.lossless_batches == trained:
            warn(
                f"fit() trained nothing: training_step returned None on all {trained} batches, so no loss "
                "reached backward and the weights are as they started. Return the loss from training_step "
                "(`return loss`, or a dict with a 'loss' key)."
            )


def _lightning_reason(loop: FitLoop, no_batches: bool) -> str | None:
    """Why Lightning's fit loop says it stopped (None: stopped early, by should_stop or max_time, which
    it says only at DEBUG; or with limit_train_batches=0, which it skips without a word)."""
    settings = loop.context().settings
    if no_batches:
        return "No training batches."
    if 0 <= settings.max_steps <= loop.global_step:
        return f"`max_steps={settings.max_steps!r}` reached."
    if 0 <= settings.max_epochs <= loop.epoch:
        return f"`max_epochs={settings.max_epochs!r}` reached."
    return None


def _nothing_trained(max_epochs: int, max_steps: int, limit_train_batches: int | float) -> str:
    if max_epochs == 0:
        cause, fix = "max_epochs=0 leaves no epoch to run", "pass max_epochs >= 1 (or -1: no limit)"
    elif max_steps == 0:
        cause, fix = "max_steps=0 leaves no step to take", "pass max_steps >= 1 (or -1: no limit)"
    elif limit_train_batches == 0:
        cause, fix = "limit_train_batches=0 leaves no batch to train on", "pass limit_train_batches > 0"
    else:
        cause = "the fit had already reached max_epochs/max_steps (a resumed checkpoint at its end)"
        fix = "raise max_epochs or max_steps to train on"
    return f"fit() trained nothing: {cause}; {fix}."
